"""memory/consolidation/: folding old turns into MEMORY.md and HISTORY.md by the model."""
