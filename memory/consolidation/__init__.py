"""Consolidation: the oldest turns of a session become a HISTORY.md entry and an updated MEMORY.md.

Public: `consolidator` (the `Consolidator` the agent drives), `checks` (the guard an update of
MEMORY.md passes before it is written, also used when a version is brought back) and `budget`
(MEMORY.md's token budget). `boundary` (where a chunk may end) is its own.
"""

__all__ = ["budget", "checks", "consolidator"]
