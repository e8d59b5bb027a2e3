"""Tests that start real processes: `lightgrep` (chat, run, init, ingress, worker), nats-server."""
