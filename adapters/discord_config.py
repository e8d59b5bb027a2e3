"""The `[discord]` section and the Discord plugin as the core sees it (entry point `discord`).

Kept apart from adapters/discord.py so that loading the configuration does not import discord.py;
the adapter itself is imported only when the platform starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.platform import PlatformPlugin
from bot.settings import HTTP, WEBSOCKET, Rule, Section, setting

if TYPE_CHECKING:
    from adapters.discord import DiscordAdapter
    from bot.config import Config
    from bot.platform import Core

PLATFORM = "discord"


@dataclass(repr=False)
class DiscordConfig(Section):
    enabled: bool = False
    token: str | None = setting(None, secret=True, env="DISCORD_BOT_TOKEN", required=True)
    # User ids; "*" for everyone.
    allow_from: list[str] = setting(
        default_factory=list,
        required=True,
        hint='so nobody could talk to the bot: list user ids, or "*" for everyone',
    )
    api_base: str | None = setting(
        None, url=HTTP
    )  # REST proxy, e.g. "http://127.0.0.1:9000/api/v10"
    gateway_url: str | None = setting(
        None, url=WEBSOCKET
    )  # gateway proxy, e.g. "ws://127.0.0.1:9000/"
    message_content_intent: bool = False  # privileged; DMs and mentions work without it
    # Sync slash commands to one guild only (fast iteration).
    sync_guild_id: int | None = setting(
        None, rule=Rule("a positive integer (a guild id)", lambda v: v > 0)
    )


def create(config: Config, agent: Core) -> DiscordAdapter:
    from adapters.discord import DiscordAdapter

    return DiscordAdapter(config, agent)


PLUGIN = PlatformPlugin(name=PLATFORM, create=create, settings=DiscordConfig)
