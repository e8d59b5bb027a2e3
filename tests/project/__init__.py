"""The repository as a whole: the import rules of ARCHITECTURE.md, what the code cites."""
