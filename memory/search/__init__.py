"""History search: ranked keyword, phrase, date and RE2 search over HISTORY.md.

The rest of the project reaches it through `memory.search.engine` (`search_history`,
`SearchResult`, `SearchError`) and `memory.search.history_index` (`drop` after a rewrite of
HISTORY.md, `is_index` for /export); the term parser, word forms, bulk scan, scan cache, date
reader and regex wrapper are its own.
"""

__all__ = ["engine", "history_index"]
