"""The `[discord]` section: its keys, how each is checked, and the rules across keys.

Plain settings (bot.settings), so that loading the configuration never imports discord.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.settings import HTTP, WEBSOCKET, Rule, Section, SettingError, setting

if TYPE_CHECKING:
    pass

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
        question="Who may talk to the bot on Discord? Their user ids (Developer Mode, then "
        "right-click a name: Copy User ID), comma-separated, or * for everyone",
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
    # Sharding, to split the gateway between `lightgrep ingress` processes: this one connects
    # `shard_ids` (default: all) of `shard_count`. Discord sends DMs to shard 0 only, so only
    # the process with shard 0 answers DMs. Unset: one connection, unsharded.
    shard_count: int | None = setting(
        None, rule=Rule("an integer from 1 to 65536", lambda v: 0 < v <= 65536)
    )
    shard_ids: list[str] = setting(default_factory=list)  # integers (a list is of text)
    # Seconds between the messages the bot posts unasked (reminders) into one guild channel:
    # Discord takes about 5 in 5 seconds in a channel.
    channel_send_interval_s: float = setting(
        1.0, rule=Rule("a number of seconds, 0 or more", lambda v: v >= 0)
    )

    def shards(self) -> list[int] | None:
        """The shards this process connects; None: unsharded (check() made sure they parse)."""
        if self.shard_count is None:
            return None
        return [int(i) for i in self.shard_ids] or list(range(self.shard_count))


def check(settings: DiscordConfig) -> None:
    """Rules across keys of an enabled [discord]."""
    if not settings.shard_ids:
        return
    if settings.shard_count is None:
        raise SettingError("shard_ids needs shard_count (the number of shards in all)", "shard_ids")
    try:
        ids = [int(i) for i in settings.shard_ids]
    except ValueError:
        raise SettingError("shard_ids must be a list of integers", "shard_ids") from None
    if len(set(ids)) != len(ids):
        raise SettingError("shard_ids must list each shard once", "shard_ids")
    wrong = [i for i in ids if not 0 <= i < settings.shard_count]
    if wrong:
        raise SettingError(
            f"shard_ids {wrong} are not shards of shard_count = {settings.shard_count} "
            f"(0 to {settings.shard_count - 1})",
            "shard_ids",
        )
