"""MCP servers' tools offered to the model (docs/mcp.md): the servers [[mcp.servers]] lists,
run and watched in a process of their own, their allowed tools made `Tool` records.

Public: `settings` (the config's [[mcp.servers]], read by bot/config.py) and `hub` (the
servers started in the background, the tools they offer now, closed at the end). `child` (the
servers' process), `link` (one server's connection and its restarts, in that process) and
`records` (a listed tool checked and made a record, its result made bounded text) are the
package's own.
"""

__all__ = ["hub", "settings"]
