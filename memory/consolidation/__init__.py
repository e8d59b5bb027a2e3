"""Consolidation: the oldest turns of a session become a HISTORY.md entry and an updated MEMORY.md.

Public: `consolidator` (the `MemoryConsolidator` the agent drives: which chunk, down to what),
`asking` (one attempt: the request, its answer, MEMORY.md written; `MemoryEvent`), `checks`
(the guard an update of MEMORY.md passes before it is written, also used when a version is
brought back) and `budget` (the window's shares, MEMORY.md's token budget). `boundary` (where a
chunk may end) is its own.
"""

__all__ = ["asking", "budget", "checks", "consolidator"]
