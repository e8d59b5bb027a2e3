"""bot/tools/: the tools as records, and what is derived from their list."""
