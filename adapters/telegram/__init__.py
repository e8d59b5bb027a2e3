"""Telegram, as the core sees it: the `[telegram]` section and the plugin (entry point `telegram`).

A light face: loading the configuration imports this, never python-telegram-bot; the adapter
(adapters/telegram/adapter.py) is imported only when the platform starts; what happens to a
message is the shared intake's (adapters/intake), which drives a chat through `chat` (sending,
typing, the private chat). Its own modules: `bot_api` (calling the Bot API within its limits),
`intake` (fair, per-user intake of updates, before the shared one),
`polling`, `webhook`, `spool` (updates kept on disk until handled), `request` (the aiohttp
transport), `place` (a private text read straight from its update), `live` (answers shown while
they are written) and `markup` (Markdown to Telegram's HTML).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.telegram.settings import PLATFORM, TelegramConfig, check
from bot.platform import PlatformPlugin

if TYPE_CHECKING:
    from adapters.telegram.adapter import TelegramAdapter
    from bot.config import Config
    from bot.platform import Core

__all__ = ["PLATFORM", "PLUGIN", "TelegramConfig", "check", "create"]


def create(config: Config, core: Core) -> TelegramAdapter:
    from adapters.telegram.adapter import TelegramAdapter
    from bot.chats import Speaking
    from bot.media.rules import MediaRules

    return TelegramAdapter(
        config.platforms[PLATFORM],
        core,
        config.memory.workspaces_dir,
        MediaRules.from_config(config),
        Speaking.from_config(config),
    )


PLUGIN = PlatformPlugin(name=PLATFORM, create=create, settings=TelegramConfig, check=check)
