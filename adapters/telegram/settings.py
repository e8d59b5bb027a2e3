"""The `[telegram]` section: its keys, how each is checked, and the rules across keys.

Plain settings (bot.settings), so that loading the configuration never imports python-telegram-bot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.settings import HTTP, NON_NEGATIVE_INT, PORT, Rule, Section, SettingError, setting

if TYPE_CHECKING:
    pass

PLATFORM = "telegram"
MODES = ("polling", "webhook")


@dataclass(repr=False)
class TelegramConfig(Section):
    enabled: bool = False
    token: str | None = setting(
        None,
        secret=True,
        env="TELEGRAM_BOT_TOKEN",
        required=True,
        hint="create a bot with @BotFather to get one",
    )
    # Numeric ids or usernames; "*" for everyone.
    allow_from: list[str] = setting(
        default_factory=list,
        required=True,
        hint='so nobody could talk to the bot: list numeric user ids or @usernames, or "*" for '
        "everyone",
        question="Who may talk to the bot on Telegram? Their numeric user ids or @usernames, "
        "comma-separated, or * for everyone",
    )
    api_base: str | None = setting(None, url=HTTP)  # a self-hosted Bot API server
    mode: str = setting("polling", rule=Rule('"polling" or "webhook"', lambda v: v in MODES))
    webhook_url: str | None = setting(None, url=HTTP)
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = setting(8443, rule=PORT)
    poll_timeout_s: int = setting(30, rule=NON_NEGATIVE_INT)
    # Seconds between the messages the bot posts unasked (reminders) into one group: Telegram
    # takes about 20 a minute in a group.
    group_send_interval_s: float = setting(
        3.0, rule=Rule("a number of seconds, 0 or more", lambda v: v >= 0)
    )


def check(settings: TelegramConfig) -> None:
    """Rules across keys of an enabled [telegram]."""
    if settings.mode == "webhook" and not settings.webhook_url:
        raise SettingError('mode = "webhook" needs webhook_url', key="mode")
