"""Webhook mode: our own small aiohttp server, which answers Telegram only once an update is safe.

PTB's webhook server answers 200 as soon as it has put the update in a memory queue, so a crash
lost every queued update. Telegram redelivers an update until a POST of it is answered 200; we
answer 200 only once the update is in the spool (adapters/telegram/spool.py, fsynced), from
where the intake runs it, and after a crash the next start runs what is left. An update that
cannot be spooled gets a 500, and Telegram sends it again. Updates from senders refused without
a turn are answered at once and not kept.

The secret token (a fresh random one each start, given to setWebhook) must come back in the
`X-Telegram-Bot-Api-Secret-Token` header: anyone else who finds the URL gets a 403. A body that
is not an update (not JSON, nested too deep to parse, no update_id) gets a 400, which Telegram
does not retry. An update already handled (see Spool) is acknowledged without a second turn.

Anyone who finds the port may open connections and never finish a request (slow-loris): each
connection gets HEAD_TIMEOUT_S for its request head (from its start, or from its last answer)
and BODY_TIMEOUT_S for the body, and at most MAX_CONNECTIONS are open: beyond that the one that
has waited longest for its head is closed. So the process never runs out of file descriptors
(which stopped it answering Telegram, and everything else), and a delivery, whose head arrives
at once, gets through whatever number of idle connections someone else holds.
"""

from __future__ import annotations

import asyncio
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
HEAD_TIMEOUT_S = 10.0  # from a connection's start or its last answer to a whole request head
BODY_TIMEOUT_S = 10.0  # from the head to the whole body
MAX_CONNECTIONS = 100  # open at once; Telegram opens at most 40 (setWebhook's max_connections)
# aiohttp's request-head limits, down to what an update's POST needs (its own allow ~1 MB).
HEAD_LIMITS: dict[str, Any] = {"max_line_size": 4096, "max_field_size": 4096, "max_headers": 32}


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
        self._listener: asyncio.Server | None = None
        self.connections = Connections()
        self._accepting = False

    async def start(self, allowed: list[str]) -> None:
        """Serve, then tell Telegram where (keeping the updates it holds for us)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(self._path, self._receive)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, **HEAD_LIMITS)
        await self._runner.setup()
        protocols = self._runner.server
        assert protocols is not None
        loop = asyncio.get_running_loop()
        try:
            # aiohttp's server is a protocol factory; each connection is wrapped to be timed
            # and counted (Connections) instead of going through a TCPSite.
            self._listener = await loop.create_server(
                lambda: _Connection(self.connections, protocols()), self._listen, self._port
            )
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
        if self._listener is not None:
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.connections.close_all()
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

    async def _receive(self, request: web.Request) -> web.Response:
        transport = request.transport
        self.connections.busy(transport)
        try:
            return await self._answer(request)
        finally:
            self.connections.idle(transport)

    async def _answer(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self._secret.encode()):
            return web.Response(status=403)
        if not self._accepting:
            return web.Response(status=503)  # stopping: Telegram sends it again later
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                body = await request.read()
        except TimeoutError:
            log.warning(
                "telegram: webhook POST whose body did not come within %.1f s; closed",
                BODY_TIMEOUT_S,
            )
            response = web.Response(status=408)
            await response.prepare(request)
            await response.write_eof()
            if request.transport is not None:
                request.transport.close()  # not kept to read the rest (aiohttp's lingering)
            return response
        try:
            raw: Any = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            log.warning("telegram: webhook POST with a body that is not JSON; refused")
            return web.Response(status=400)
        if not isinstance(raw, dict) or type(raw.get("update_id")) is not int:
            log.warning("telegram: webhook POST without an update_id; refused")
            return web.Response(status=400)
        try:
            await self._intake.accept(raw)
        except OSError as exc:
            log.error(
                "telegram: cannot keep update %s (%s); Telegram will send it again",
                raw["update_id"],
                exc,
            )
            return web.Response(status=500)
        return web.Response(status=200)


class Connections:
    """The webhook's open connections: each one not in a request waits at most HEAD_TIMEOUT_S
    for its next request head, and of more than MAX_CONNECTIONS the one that has waited longest
    is closed (see the module docstring)."""

    def __init__(self) -> None:
        self._waiting: dict[_Connection, asyncio.TimerHandle] = {}  # longest waiting first
        self._busy: set[_Connection] = set()  # in a request: its body, its answer
        self._of: dict[asyncio.BaseTransport, _Connection] = {}
        self.closed = 0  # closed before a whole request came
        self._told = 0  # of them, in the log
        self._told_at = float("-inf")

    def __len__(self) -> int:
        return len(self._of)

    def opened(self, connection: _Connection) -> None:
        if len(self._of) >= MAX_CONNECTIONS:
            victim = next(iter(self._waiting), connection)  # all in requests: the new one
            self._close(victim, "to make room")
            if victim is connection:
                return
        self._of[connection.transport] = connection
        self._wait(connection)

    def busy(self, transport: asyncio.BaseTransport | None) -> None:
        """A request head came in on `transport`."""
        connection = self._of.get(transport) if transport is not None else None
        if connection is None:
            return
        timer = self._waiting.pop(connection, None)
        if timer is not None:
            timer.cancel()
        self._busy.add(connection)

    def idle(self, transport: asyncio.BaseTransport | None) -> None:
        """The request on `transport` is answered: it may send the next one (keep-alive)."""
        connection = self._of.get(transport) if transport is not None else None
        if connection is None or connection not in self._busy:
            return
        self._busy.discard(connection)
        self._wait(connection)

    def lost(self, connection: _Connection) -> None:
        timer = self._waiting.pop(connection, None)
        if timer is not None:
            timer.cancel()
        self._busy.discard(connection)
        if self._of.get(connection.transport) is connection:
            del self._of[connection.transport]

    def close_all(self) -> None:
        for connection in list(self._of.values()):
            connection.transport.close()

    def _wait(self, connection: _Connection) -> None:
        loop = asyncio.get_running_loop()
        self._waiting[connection] = loop.call_later(
            HEAD_TIMEOUT_S, self._close, connection, "after waiting for a request"
        )

    def _close(self, connection: _Connection, why: str) -> None:
        self.lost(connection)
        connection.transport.abort()  # nothing of theirs is owed an answer
        self.closed += 1
        now = asyncio.get_running_loop().time()
        if now - self._told_at >= 60.0:  # a flood of them is one line a minute
            log.warning(
                "telegram: closed %d webhook connection(s) that sent no whole request (the "
                "last %s); %d open",
                self.closed - self._told,
                why,
                len(self._of),
            )
            self._told, self._told_at = self.closed, now


class _Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's protocol does the HTTP, Connections the timing."""

    def __init__(self, connections: Connections, inner: asyncio.Protocol) -> None:
        self._connections = connections
        self._inner = inner
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._inner.connection_made(transport)
        self._connections.opened(self)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.lost(self)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
