"""History search: ranked keyword, phrase, date and RE2 search over HISTORY.md.

The rest of the project reaches it through `memory.search.engine` (`search_history`,
`SearchResult`, `SearchError`), `memory.search.history_index` (`drop` after a rewrite of
HISTORY.md, `is_index` for /export), `memory.search.transcripts` (HISTORY.md and then the
consolidated messages: /recall, the search tool; `drop` for /forget) and
`memory.search.mentions` (consolidation's check that an entry keeps a name said),
`memory.search.meaning` (ranking by meaning: the `Embedder` the bot gives, the vectors beside
HISTORY.md, dropped or merged with it); the term
parser, word forms, bulk scan, scan cache, date reader and regex wrapper are its own.
"""

__all__ = ["engine", "history_index", "meaning", "mentions", "transcripts"]
