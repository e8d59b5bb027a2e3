"""Webhook mode: our own small aiohttp server, which answers Telegram only once an update is safe.

PTB's webhook server answers 200 as soon as it has put the update in a memory queue, so a crash
lost every queued update. Telegram redelivers an update until a POST of it is answered 200; we
answer 200 only once the update is in the spool (adapters/telegram/spool.py, fsynced), from
where the intake runs it, and after a crash the next start runs what is left. An update that
cannot be spooled gets a 500, and Telegram sends it again. Updates from senders refused without
a turn are answered at once and not kept.

The secret token (a fresh random one each start, given to setWebhook) must come back in the
`X-Telegram-Bot-Api-Secret-Token` header: anyone else who finds the URL gets a 403.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
from typing import Any

from aiohttp import web
from telegram import Bot
from telegram.error import TelegramError

from adapters.telegram.bot_api import describe_error, flood_safe
from adapters.telegram.intake import Intake
from bot.platform import PlatformStartError

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY = 1024 * 1024  # an update is a few KiB; Telegram's own limit is far below this


class WebhookServer:
    """Listens on (listen, port) at `path`; registers `url` with Telegram."""

    def __init__(
        self, bot: Bot, intake: Intake, *, url: str, path: str, listen: str, port: int
    ) -> None:
        self._bot = bot
        self._intake = intake
        self._url = url
        self._path = "/" + path.lstrip("/")
        self._listen = listen
        self._port = port
        self._secret = secrets.token_urlsafe(32)
        self._runner: web.AppRunner | None = None
        self._accepting = False

    async def start(self, allowed: list[str]) -> None:
        """Serve, then tell Telegram where (keeping the updates it holds for us)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(self._path, self._receive)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self._listen, self._port).start()
        except OSError as exc:
            await self._runner.cleanup()
            raise PlatformStartError(
                f"telegram webhook mode could not listen on {self._listen}:{self._port}: "
                f"{exc.strerror or exc}"
            ) from None
        self._accepting = True
        try:
            await flood_safe(
                lambda: self._bot.set_webhook(
                    self._url,
                    secret_token=self._secret,
                    allowed_updates=allowed,
                    drop_pending_updates=False,
                )
            )
        except TelegramError as exc:
            await self.stop()
            raise PlatformStartError(
                f"telegram setWebhook {self._url} failed: {describe_error(exc)}"
            ) from None

    async def stop(self) -> None:
        """Refuse new POSTs (Telegram keeps them for the next start), then close."""
        self._accepting = False
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _receive(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self._secret.encode()):
            return web.Response(status=403)
        if not self._accepting:
            return web.Response(status=503)  # stopping: Telegram sends it again later
        try:
            raw: Any = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            log.warning("telegram: webhook POST with a body that is not JSON; refused")
            return web.Response(status=400)
        if not isinstance(raw, dict) or type(raw.get("update_id")) is not int:
            log.warning("telegram: webhook POST without an update_id; refused")
            return web.Response(status=400)
        try:
            self._intake.accept(raw)
        except OSError as exc:
            log.error(
                "telegram: cannot keep update %s (%s); Telegram will send it again",
                raw["update_id"],
                exc,
            )
            return web.Response(status=500)
        return web.Response(status=200)
