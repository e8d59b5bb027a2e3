"""The `[telegram]` section and the Telegram plugin as the core sees it (entry point `telegram`).

Kept apart from adapters/telegram.py so that loading the configuration does not import
python-telegram-bot; the adapter itself is imported only when the platform starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.platform import PlatformPlugin
from bot.settings import HTTP, NON_NEGATIVE_INT, PORT, Rule, Section, SettingError, setting

if TYPE_CHECKING:
    from adapters.telegram import TelegramAdapter
    from bot.config import Config
    from bot.platform import Core

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
    )
    api_base: str | None = setting(None, url=HTTP)  # a self-hosted Bot API server
    mode: str = setting("polling", rule=Rule('"polling" or "webhook"', lambda v: v in MODES))
    webhook_url: str | None = setting(None, url=HTTP)
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = setting(8443, rule=PORT)
    poll_timeout_s: int = setting(30, rule=NON_NEGATIVE_INT)


def check(settings: TelegramConfig) -> None:
    """Rules across keys of an enabled [telegram]."""
    if settings.mode == "webhook" and not settings.webhook_url:
        raise SettingError('mode = "webhook" needs webhook_url', key="mode")


def create(config: Config, agent: Core) -> TelegramAdapter:
    from adapters.telegram import TelegramAdapter
    from bot.media.rules import MediaRules

    return TelegramAdapter(
        config.platforms[PLATFORM],
        agent,
        config.memory.workspaces_dir,
        MediaRules.from_config(config),
    )


PLUGIN = PlatformPlugin(name=PLATFORM, create=create, settings=TelegramConfig, check=check)
