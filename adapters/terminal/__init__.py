"""The terminal, as the core sees it: the plugin (entry point `terminal`; no settings section,
`lightgrep chat` starts it).

A light face: loading the configuration, which every command does (`lightgrep memory` too),
imports neither the terminal adapter (adapters/terminal/adapter.py) nor asyncio, prompt_toolkit
or rich with it; the adapter is imported only when a chat starts. `screen` draws the spinner
and the rendered answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.platform import PlatformPlugin

if TYPE_CHECKING:
    from pathlib import Path

    from adapters.terminal.adapter import TerminalAdapter
    from bot.config import Config
    from bot.platform import Core


def create(
    config: Config, core: Core, *, user: str | None = None, log_file: Path | None = None
) -> TerminalAdapter:
    from adapters.terminal.adapter import TerminalAdapter

    return TerminalAdapter(config, core, user=user, log_file=log_file)


PLUGIN = PlatformPlugin(name="terminal", create=create)
