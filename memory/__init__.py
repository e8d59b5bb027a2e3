"""Per-user memory in plain files: workspaces, sessions, tokens, consolidation, search.

Knows nothing about chat platforms or HTTP; the only I/O beyond the file system is the
LLM call that the consolidator is handed.
"""
