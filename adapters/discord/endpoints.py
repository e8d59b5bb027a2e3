"""Where discord.py connects: the one place that points it at a REST / gateway proxy.

discord.py has no per-client setting for its endpoints; they are class attributes:
- `discord.http.Route.BASE`, the REST base every HTTP call is built on ([discord] api_base);
- `discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`, the gateway of the first connection and
  of every new session after Discord invalidates one ([discord] gateway_url).
A resume does not use DEFAULT_GATEWAY: it goes to the `resume_gateway_url` Discord sent in
READY, so a proxy must hand out its own address there. Both attributes are process-wide, which
is why they are set only for the life of the adapter's run and then put back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route


def rest_base() -> str:
    """The REST base discord.py uses now (for error messages)."""
    return Route.BASE


@contextlib.contextmanager
def endpoints(api_base: str | None, gateway_url: str | None) -> Iterator[None]:
    """discord.py talks to `api_base` / `gateway_url` (each only if given) inside the block."""
    saved = (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    if api_base:
        Route.BASE = api_base.rstrip("/")
    if gateway_url:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
    try:
        yield
    finally:
        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = saved
