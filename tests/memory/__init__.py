"""memory/: the per-user files (MEMORY.md, HISTORY.md, sessions), keys, clock, tokens, disk."""
