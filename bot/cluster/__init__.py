"""LightGrep as many processes over NATS JetStream: `lightgrep ingress` and `lightgrep worker`.

The ingress runs the platform adapters and hands them a `BrokerCore` (ingress.py) instead of the
agent: it publishes each Inbound to the user's partition and replays the answer that comes back
into the adapter's Outbound. A worker (worker.py) holds a lease on a range of partitions
(lease.py), runs the real agent on its own workspaces folder and publishes every Outbound call
of the answer. What goes over the wire is in wire.py, the partition of a user in partition.py,
the connection and the streams in connection.py. `lightgrep run` uses none of this.
"""

# What the CLI starts; the rest (wire, signing, publish, assembly, adopt, resend) is the
# cluster's own.
__all__ = ["chats", "connection", "ingress", "lease", "partition", "people", "worker"]
