"""The terminal plugin as the core sees it (entry point `terminal`; no settings section,
`lightgrep chat` starts it).

Kept apart from adapters/terminal.py so that loading the configuration, which every command
does (`lightgrep memory` too), does not import the terminal adapter and asyncio with it; the
adapter is imported only when a chat starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.platform import PlatformPlugin

if TYPE_CHECKING:
    from pathlib import Path

    from adapters.terminal import TerminalAdapter
    from bot.config import Config
    from bot.platform import Core


def create(
    config: Config, agent: Core, *, user: str | None = None, log_file: Path | None = None
) -> TerminalAdapter:
    from adapters.terminal import TerminalAdapter

    return TerminalAdapter(config, agent, user=user, log_file=log_file)


PLUGIN = PlatformPlugin(name="terminal", create=create)
