"""History search: ranked keyword, phrase, date and RE2 search over HISTORY.md.

The rest of the project reaches it through `memory.search.engine` only (`search_history`,
`SearchResult`, `SearchError`); the term parser, word forms, bulk scan, scan cache, date reader and
regex wrapper are its own.
"""

__all__ = ["engine"]
