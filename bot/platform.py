"""What every platform adapter offers the core, and how the CLI finds adapters by name.

Adapters are registered as entry points (group `lightgrep.platforms` in pyproject.toml), so the
core starts them without importing adapters/: imports flow adapters → bot → memory only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bot.agent import Agent
    from bot.config import Config


class PlatformStartError(Exception):
    """A platform could not start (bad token, missing intent, unreachable API): one clear line."""


class PlatformAdapter(Protocol):
    name: str
    ready: asyncio.Event  # set once the adapter is serving

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set (or, for the terminal, until the user quits), then wind down:
        stop receiving, let running turns finish. Raise PlatformStartError if it cannot start."""
        ...


AdapterFactory = Callable[["Config", "Agent"], PlatformAdapter]


def load_platform(name: str) -> AdapterFactory:
    """The `create(config, agent)` factory registered for a platform name."""
    for ep in entry_points(group="lightgrep.platforms"):
        if ep.name == name:
            return ep.load()
    raise PlatformStartError(f"no adapter is installed for platform {name!r}")
