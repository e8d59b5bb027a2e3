"""memory/search/: history search (/recall, the agent's search tool) and its word index."""
