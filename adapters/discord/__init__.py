"""Discord, as the core sees it: the `[discord]` section and the plugin (entry point `discord`).

A light face: loading the configuration imports this, never discord.py; the adapter
(adapters/discord/adapter.py) is imported only when the platform starts; what happens to a
message is the shared intake's (adapters/intake), which drives a channel through `chat` (sending,
typing, the DMs). Its own modules: `endpoints` (REST and gateway overrides), `live` (answers
shown while they are written) and `resend` (answers sent again without the interaction's
connection).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.discord.settings import PLATFORM, DiscordConfig, check
from bot.platform import PlatformPlugin

if TYPE_CHECKING:
    from adapters.discord.adapter import DiscordAdapter
    from bot.config import Config
    from bot.platform import Core

__all__ = ["PLATFORM", "PLUGIN", "DiscordConfig", "check", "create"]


def create(config: Config, core: Core) -> DiscordAdapter:
    from adapters.discord.adapter import DiscordAdapter

    return DiscordAdapter(config, core)


PLUGIN = PlatformPlugin(name=PLATFORM, create=create, settings=DiscordConfig, check=check)
