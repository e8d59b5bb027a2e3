"""Watching the bot run: Prometheus metrics, the /metrics and /healthz server, heap snapshots.

Public: `metrics` (the metered wrappers and counters), `server` (the HTTP endpoints) and `heap`.
"""

__all__ = ["heap", "metrics", "server"]
