"""LightGrep on Telegram, through python-telegram-bot (long polling by default, webhook optional).

The adapter decides who is talking (allow list), whether the bot is addressed (private chat,
@mention, reply to the bot, /command@thisbot), derives the keys, and hands an Inbound to the core.
Everything it sends goes through one path: split the plain text (bot.formatting), render each chunk
as Telegram HTML, fall back to plain text if Telegram rejects the markup, wait out flood limits.

Polling is our own loop (`_Poller`), not PTB's Updater: the Updater acknowledges a batch as soon as
it has queued it, so a crash lost every queued message. We acknowledge an update only once its
turn has finished and its answer was sent (or failed); after a crash Telegram redelivers the rest,
and the core recognises a message it has already persisted by `Inbound.message_id`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from telegram import Bot, BotCommand, Message, MessageEntity, ReplyParameters, Update, User
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import (
    Application,
    ApplicationBuilder,
    BaseUpdateProcessor,
    ContextTypes,
    MessageHandler,
    filters,
)
from telegram.warnings import PTBDeprecationWarning

from adapters.telegram_format import markdown_to_html
from bot.access import is_allowed
from bot.formatting import split_message
from bot.inbound import Inbound
from bot.keys import session_key, user_key
from bot.platform import PlatformStartError
from bot.repeating import repeating

if TYPE_CHECKING:
    from bot.agent import Agent
    from bot.config import Config, TelegramConfig

log = logging.getLogger(__name__)

PLATFORM = "telegram"
LIMIT = 4096  # characters per message, counted by Telegram in UTF-16 code units
FLOOD_RETRIES = 5
MAX_CONCURRENT_UPDATES = 256
# Every running turn may hold one Bot API connection (typing, then its answer); a connection
# pool smaller than that, or a short wait for a free connection, fails sends under load with
# "Pool timeout" (PTB's defaults: 256 connections, 1 s).
CONNECTION_POOL_SIZE = MAX_CONCURRENT_UPDATES + 64
POOL_TIMEOUT_S = 30.0
POLL_LIMIT = 100  # updates per getUpdates: Telegram's maximum
BUSY_POLL_S = 0.5  # while turns run, look for new updates at least this often…
MIN_POLL_GAP_S = 0.01  # …and, when a turn finishes, no sooner than this after the last poll
MAX_BACKOFF_S = 30.0
GET_UPDATES_READ_S = 10.0  # read timeout of a getUpdates on top of its long-poll timeout
REFUSAL = "Sorry, this bot is private and you are not on its allow list."
TEXT_ONLY = "I can only read text for now."
FAILED = "Sorry, something went wrong on my side. Please try again in a moment."
SENT_PRIVATELY = "I've sent you the answer in our private chat."

T = TypeVar("T")


def create(config: Config, agent: Agent) -> TelegramAdapter:
    """Entry point `lightgrep.platforms: telegram`."""
    return TelegramAdapter(config.telegram, agent)


class TelegramAdapter:
    """One Telegram bot serving the agent core."""

    name = PLATFORM
    typing_interval_s = 4.0  # Telegram shows "typing…" for about 5 s per sendChatAction

    def __init__(self, config: TelegramConfig, agent: Agent) -> None:
        self.ready = asyncio.Event()
        self._config = config
        self._agent = agent
        self._me: User | None = None
        self._commands = {name.lower() for name, _ in agent.command_menu()}

    # ---- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set; then stop fetching updates and let running turns finish."""
        token = self._check_config()
        logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs URLs, which hold the token
        with _redacted(token):
            app = self._build_app(token)
            try:
                await self._initialize(app)
                await self._serve(app, stop)
            finally:
                await self._wind_down(app)

    def _check_config(self) -> str:
        """The token, or PlatformStartError saying which key to set."""
        if not self._config.token or not self._config.token.strip():
            raise PlatformStartError(
                "telegram is enabled but has no token: set TELEGRAM_BOT_TOKEN or [telegram] "
                "token (create a bot with @BotFather to get one)"
            )
        if not [entry for entry in self._config.allow_from if str(entry).strip()]:
            raise PlatformStartError(
                "telegram is enabled but [telegram] allow_from is empty, so nobody could talk to "
                'the bot: list numeric user ids or @usernames, or "*" for everyone'
            )
        if self._config.mode not in ("polling", "webhook"):
            raise PlatformStartError(
                f'[telegram] mode must be "polling" or "webhook", not {self._config.mode!r}'
            )
        if self._config.mode == "webhook" and not self._config.webhook_url:
            raise PlatformStartError('[telegram] mode = "webhook" needs [telegram] webhook_url')
        return self._config.token.strip()

    def _build_app(self, token: str) -> Application:
        builder = (
            ApplicationBuilder()
            .token(token)
            .concurrent_updates(_PerUserOrder(MAX_CONCURRENT_UPDATES))
            .connection_pool_size(CONNECTION_POOL_SIZE)
            .pool_timeout(POOL_TIMEOUT_S)
        )
        if self._config.mode == "polling":
            builder = builder.updater(None)  # our own loop: see _Poller
        if self._config.api_base:
            base = self._config.api_base.rstrip("/")
            builder = builder.base_url(f"{base}/bot").base_file_url(f"{base}/file/bot")
        app = builder.build()
        app.add_handler(MessageHandler(filters.UpdateType.MESSAGE, self._on_message))
        app.add_error_handler(self._on_error)
        return app

    async def _initialize(self, app: Application) -> None:
        """getMe (through Application.initialize), turned into one clear line on failure."""
        where = self._config.api_base or "api.telegram.org"
        try:
            await app.initialize()
        except TelegramError as exc:
            await app.bot.request.shutdown()  # a failed initialize leaves its client open
            raise PlatformStartError(_start_error(exc, where)) from None
        self._me = app.bot.bot

    async def _serve(self, app: Application, stop: asyncio.Event) -> None:
        await self._set_commands(app.bot)
        await app.start()
        poller = await self._start_updates(app)
        me = app.bot.bot
        allow = (
            "everyone"
            if "*" in self._config.allow_from
            else (f"{len(self._config.allow_from)} allowed user(s)")
        )
        log.info(
            "telegram: serving @%s (id %s, %s) via %s in %s mode; private chats, group "
            "@mentions, replies and /commands",
            me.username,
            me.id,
            allow,
            self._config.api_base or "api.telegram.org",
            self._config.mode,
        )
        self.ready.set()
        if poller is not None:
            await poller.run(stop)  # returns once stopped, running turns finished, acknowledged
            return
        await stop.wait()
        log.info("telegram: stopping; finishing running turns")

    async def _start_updates(self, app: Application) -> _Poller | None:
        """Long polling (our loop, returned), or a webhook; pending updates are kept either way.

        Webhook mode stays PTB's: Telegram redelivers an update whose POST was not answered 200,
        but PTB answers 200 as soon as the update is queued, so a crash there still loses the
        queued updates (the core's dedup would make acknowledging later safe; not done yet)."""
        allowed = [Update.MESSAGE]
        if self._config.mode == "polling":
            poller = _Poller(app, allowed, self._config.poll_timeout_s)
            await poller.start()
            return poller
        updater = app.updater
        assert updater is not None
        url = self._config.webhook_url or ""
        try:
            await updater.start_webhook(
                listen=self._config.webhook_listen,
                port=self._config.webhook_port,
                url_path=urlsplit(url).path.lstrip("/"),
                webhook_url=url,
                secret_token=secrets.token_urlsafe(32),
                drop_pending_updates=False,
                allowed_updates=allowed,
            )
        except RuntimeError as exc:
            raise PlatformStartError(f"telegram webhook mode could not start: {exc}") from None
        return None

    async def _set_commands(self, bot: Bot) -> None:
        """The command menu shown by Telegram clients; a failure is worth a warning, not a stop."""
        commands = [BotCommand(name, desc) for name, desc in self._agent.command_menu()]
        try:
            await _flood_safe(lambda: bot.set_my_commands(commands))
        except TelegramError as exc:
            log.warning("telegram: setMyCommands failed: %s", exc.message)

    async def _wind_down(self, app: Application) -> None:
        """Stop the webhook, finish running turns, close (polling has wound itself down)."""
        with contextlib.suppress(Exception):
            if app.updater is not None and app.updater.running:
                await app.updater.stop()
        with contextlib.suppress(Exception):
            if app.running:
                await app.stop()
        with contextlib.suppress(Exception):
            await app.shutdown()
        self.ready.clear()

    # ---- incoming --------------------------------------------------------------------------

    async def _on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        msg = update.message
        if msg is None or msg.from_user is None or msg.from_user.is_bot or self._me is None:
            return
        private = msg.chat.type == ChatType.PRIVATE
        text = self._addressed_text(msg, private)
        if text is None:
            return  # a group message that is not for us
        user = msg.from_user
        if not is_allowed(self._config.allow_from, user.id, user.username):
            log.info("telegram: refused user %s", user.id)
            if private:
                await self._send(context.bot, msg, REFUSAL, markup=False)
            return
        if msg.text is None:
            await self._send(context.bot, msg, TEXT_ONLY, markup=False)
            return
        await self._turn(context.bot, msg, text, private)

    async def _turn(self, bot: Bot, msg: Message, text: str, private: bool) -> None:
        user = msg.from_user
        assert user is not None
        inbound = Inbound(
            platform=PLATFORM,
            session_key=self._session_key(msg, private),
            user_key=user_key(PLATFORM, user.id),
            text=text,
            sender_name=user.full_name,
            is_private=private,
            message_id=f"{msg.chat.id}:{msg.message_id}",  # unique per chat: spots a redelivery
        )
        try:
            async with self._typing(bot, msg):
                reply = await self._agent.handle(inbound)
        except Exception:
            log.exception("telegram: turn failed for session %s", inbound.session_key)
            await self._send(bot, msg, FAILED, markup=False)
            return
        if not reply.text:
            return  # a redelivered message that a later message's answer already covered
        if reply.private and not private:
            await self._answer_privately(bot, msg, reply.text)
        else:
            await self._send(bot, msg, reply.text)

    def _addressed_text(self, msg: Message, private: bool) -> str | None:
        """The text for the core if the message is for this bot, else None.

        "/cmd@thisbot args" becomes "/cmd args", "/start" becomes "/help", "@thisbot " is dropped.
        """
        assert self._me is not None
        text = msg.text or msg.caption or ""
        command = _command(msg)
        if command is not None:
            name, target, rest = command
            mine = (
                target.lower() == (self._me.username or "").lower()
                if target
                else (private or name.lower() in self._commands or name.lower() == "start")
            )
            if not mine:
                return None
            if name.lower() == "start":
                return "/help"
            return f"/{name}{rest}"
        if private:
            return text
        if self._mentions_me(msg) or self._replies_to_me(msg):
            stripped = re.sub(rf"@{re.escape(self._me.username or '')}\b", "", text, flags=re.I)
            return stripped.strip() or text
        return None

    def _mentions_me(self, msg: Message) -> bool:
        assert self._me is not None
        username = (self._me.username or "").lower()
        entities = msg.parse_entities() if msg.text else msg.parse_caption_entities()
        for entity, value in entities.items():
            if entity.type == MessageEntity.MENTION and value.lstrip("@").lower() == username:
                return True
            if (
                entity.type == MessageEntity.TEXT_MENTION
                and entity.user
                and (entity.user.id == self._me.id)
            ):
                return True
        return False

    def _replies_to_me(self, msg: Message) -> bool:
        assert self._me is not None
        original = msg.reply_to_message
        if original is None or original.forum_topic_created is not None:
            return False  # in forum topics every message "replies" to the topic's first message
        return original.from_user is not None and original.from_user.id == self._me.id

    @staticmethod
    def _session_key(msg: Message, private: bool) -> str:
        user = msg.from_user
        assert user is not None
        if private:
            return session_key(PLATFORM, "dm", user.id)
        if msg.is_topic_message and msg.message_thread_id is not None:
            return session_key(
                PLATFORM, "group", msg.chat.id, user.id, "topic", msg.message_thread_id
            )
        return session_key(PLATFORM, "group", msg.chat.id, user.id)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        error = context.error
        log.error("telegram: error while handling an update: %r", error, exc_info=error)

    # ---- outgoing --------------------------------------------------------------------------

    async def _answer_privately(self, bot: Bot, msg: Message, text: str) -> None:
        """/memory and /recall asked in a group: the answer goes to the private chat only."""
        user = msg.from_user
        assert user is not None and self._me is not None
        try:
            await self._send_to(bot, user.id, text)
        except (Forbidden, BadRequest) as exc:
            log.info("telegram: cannot write to user %s privately (%s)", user.id, exc.message)
            link = f"https://t.me/{self._me.username}"
            note = (
                "I can only show that in a private chat. Open one with me "
                f"({link}), press Start, then ask again."
            )
            await self._send(bot, msg, note, markup=False)
            return
        await self._send(bot, msg, SENT_PRIVATELY, markup=False)

    async def _send(self, bot: Bot, msg: Message, text: str, *, markup: bool = True) -> None:
        """Answer `msg` in its chat (as a reply in groups, in its forum topic)."""
        private = msg.chat.type == ChatType.PRIVATE
        thread = msg.message_thread_id if msg.is_topic_message else None
        reply_to = None if private else msg.message_id
        await self._send_to(bot, msg.chat.id, text, reply_to=reply_to, thread=thread, markup=markup)

    async def _send_to(
        self,
        bot: Bot,
        chat_id: int,
        text: str,
        *,
        reply_to: int | None = None,
        thread: int | None = None,
        markup: bool = True,
    ) -> None:
        """Split the plain text, then render and send each chunk; the first one is the reply."""
        for number, chunk in enumerate(telegram_chunks(text)):
            extra: dict[str, Any] = {}
            if thread is not None:
                extra["message_thread_id"] = thread
            if number == 0 and reply_to is not None:
                extra["reply_parameters"] = ReplyParameters(
                    reply_to, allow_sending_without_reply=True
                )
            await self._send_chunk(bot, chat_id, chunk, markup, extra)

    @staticmethod
    async def _send_chunk(
        bot: Bot, chat_id: int, chunk: str, markup: bool, extra: dict[str, Any]
    ) -> None:
        if markup:
            html = markdown_to_html(chunk)
            try:
                await _flood_safe(
                    lambda: bot.send_message(chat_id, html, parse_mode=ParseMode.HTML, **extra)
                )
                return
            except BadRequest as exc:
                if not _is_markup_error(exc):
                    raise
                log.warning("telegram rejected the markup (%s); sending plain text", exc.message)
        await _flood_safe(lambda: bot.send_message(chat_id, chunk, **extra))

    def _typing(self, bot: Bot, msg: Message) -> contextlib.AbstractAsyncContextManager[None]:
        """Keep "typing…" showing in the chat while the body runs."""
        thread = msg.message_thread_id if msg.is_topic_message else None

        async def show_typing() -> None:
            with contextlib.suppress(TelegramError):
                await bot.send_chat_action(msg.chat.id, ChatAction.TYPING, message_thread_id=thread)

        return repeating(show_typing, self.typing_interval_s)


def telegram_chunks(text: str) -> list[str]:
    """Chunks within Telegram's limit, which counts UTF-16 code units (emoji count twice)."""
    chunks: list[str] = []
    for chunk in split_message(text, LIMIT):
        if _utf16_len(chunk) > LIMIT:
            chunks.extend(split_message(chunk, LIMIT // 2))
        else:
            chunks.append(chunk)
    return [chunk for chunk in chunks if chunk.strip()]


def _start_error(exc: TelegramError, where: str) -> str:
    """One line for a failed getMe; never InvalidToken's own text (it holds the token)."""
    if isinstance(exc, InvalidToken):
        return "telegram rejected the bot token (getMe: unauthorized): check [telegram] token"
    if isinstance(exc, BadRequest):
        return f"telegram getMe failed: {exc.message}"
    if isinstance(exc, NetworkError):
        return f"cannot reach the Telegram Bot API at {where}: {type(exc).__name__}"
    return f"telegram getMe failed: {type(exc).__name__}"


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _command(msg: Message) -> tuple[str, str, str] | None:
    """(name, @target or "", rest of the text) when the message starts with a bot command."""
    text = msg.text or msg.caption or ""
    entities = msg.entities if msg.text else msg.caption_entities
    if not entities or entities[0].type != MessageEntity.BOT_COMMAND or entities[0].offset != 0:
        return None
    token = text[: entities[0].length]
    name, _, target = token[1:].partition("@")
    return name, target, text[entities[0].length :]


def _is_markup_error(exc: BadRequest) -> bool:
    message = exc.message.lower()
    return any(word in message for word in ("parse", "entit", "tag"))


async def _flood_safe(call: Callable[[], Awaitable[T]]) -> T:
    """Run a Bot API call, waiting out 429 flood limits as Telegram asks."""
    for _ in range(FLOOD_RETRIES):
        try:
            return await call()
        except RetryAfter as exc:
            wait = _retry_seconds(exc)
            log.warning("telegram: flood limit, retrying in %.0f s", wait)
            await asyncio.sleep(wait)
    return await call()


def _retry_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB 22 warns that the type will become timedelta
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class _PerUserOrder(BaseUpdateProcessor):
    """Different users' updates run concurrently; one user's updates run in arrival order."""

    def __init__(self, max_concurrent_updates: int) -> None:
        super().__init__(max_concurrent_updates)
        self._locks: dict[int, asyncio.Lock] = {}
        self._users: dict[int, int] = {}  # user id → updates holding or awaiting the lock

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        user = update.effective_user if isinstance(update, Update) else None
        if user is None:
            await coroutine
            return
        lock = self._locks.setdefault(user.id, asyncio.Lock())
        self._users[user.id] = self._users.get(user.id, 0) + 1
        try:
            async with lock:
                await coroutine
        finally:
            self._users[user.id] -= 1
            if not self._users[user.id]:
                del self._users[user.id]
                del self._locks[user.id]

    async def initialize(self) -> None:
        """Nothing to allocate."""

    async def shutdown(self) -> None:
        """Nothing to free."""


class _Poller:
    """Long polling that acknowledges an update only once it has been handled.

    Telegram forgets every update below the `offset` of a getUpdates call. We send the lowest
    update id still being handled, or one past the highest handled when none is; so a crash (or a
    stop that could not finish) leaves every unfinished update with Telegram, to be redelivered.
    Until then getUpdates keeps returning the updates in flight: each is dispatched once per
    process, and while any runs we poll without waiting, as soon as one finishes or every
    BUSY_POLL_S, never closer together than MIN_POLL_GAP_S.
    """

    def __init__(self, app: Application, allowed: list[str], timeout_s: int) -> None:
        self._app = app
        self._allowed = allowed
        self._timeout_s = timeout_s
        self._in_flight: set[int] = set()  # update ids being handled
        self._dispatched: set[int] = set()  # ids handed to the application, not yet forgotten
        self._highest: int | None = None  # highest id dispatched
        self._acknowledged = 0  # the offset of the last getUpdates Telegram answered
        self._finished = asyncio.Event()  # an update finished since the last poll
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_poll = float("-inf")
        self._got_new = True  # the last poll brought a new update

    def offset(self) -> int | None:
        """What to acknowledge: every update below this id has been handled."""
        if self._in_flight:
            return min(self._in_flight)
        return None if self._highest is None else self._highest + 1

    async def start(self) -> None:
        """Drop a webhook left from webhook mode (keeping its pending updates): getUpdates
        answers 409 while one is set."""
        try:
            await _flood_safe(lambda: self._app.bot.delete_webhook(drop_pending_updates=False))
        except TelegramError as exc:
            log.warning("telegram: deleteWebhook failed (%s); polling anyway", _describe(exc))

    async def run(self, stop: asyncio.Event) -> None:
        """Poll and dispatch until `stop`; then let running turns finish and acknowledge them."""
        failures = 0
        while not stop.is_set():
            await self._pause(stop)
            if stop.is_set():
                break
            try:
                updates = await self._poll(stop)
            except Exception as exc:  # the loop must outlive any error of one call
                failures += 1
                await _sleep_unless(stop, self._backoff(exc, failures))
                continue
            if updates is None:
                break  # stopped while polling; what that poll brought is redelivered later
            if failures:
                log.info("telegram: getUpdates works again")
            failures = 0
            self._dispatch(updates)
        log.info("telegram: stopping; finishing %d running turn(s)", len(self._in_flight))
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._acknowledge_handled()

    # ---- one poll ---------------------------------------------------------------------------

    async def _pause(self, stop: asyncio.Event) -> None:
        """Don't spin: getUpdates answers at once while updates are in flight (still pending)."""
        loop = asyncio.get_running_loop()
        if self._in_flight:
            deadline = self._last_poll + BUSY_POLL_S
            await _wait_any([self._finished, stop], deadline - loop.time())
            gap = self._last_poll + MIN_POLL_GAP_S - loop.time()
            if gap > 0:
                await _sleep_unless(stop, gap)
        elif self._timeout_s <= 0 and not self._got_new:
            await _sleep_unless(stop, self._last_poll + BUSY_POLL_S - loop.time())

    async def _poll(self, stop: asyncio.Event) -> list[dict[str, Any]] | None:
        """One getUpdates (raw updates), or None if `stop` came first (the call is abandoned)."""
        offset = self.offset()
        timeout = 0 if self._in_flight else self._timeout_s
        self._finished.clear()
        self._last_poll = asyncio.get_running_loop().time()
        call = asyncio.ensure_future(self._get_updates(offset, timeout))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({call, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not call.done():
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            return None
        updates = call.result()
        if offset is not None:
            self._acknowledged = max(self._acknowledged, offset)
            self._dispatched = {u for u in self._dispatched if u >= offset}  # forgotten
        return updates

    async def _get_updates(
        self, offset: int | None, wait_s: int, limit: int = POLL_LIMIT
    ) -> list[dict[str, Any]]:
        """Bot.get_updates without building Update objects: a busy poll returns every update
        still in flight again (up to 100), and parsing them all each time cost more CPU than
        the turns. Bot._post is what every Bot method calls; errors are raised the same way."""
        data: dict[str, Any] = {"offset": offset, "limit": limit, "timeout": wait_s}
        if self._allowed:
            data["allowed_updates"] = self._allowed
        result = await self._app.bot._post(
            "getUpdates", data, read_timeout=GET_UPDATES_READ_S + wait_s
        )
        return [u for u in result if isinstance(u, dict) and isinstance(u.get("update_id"), int)]

    def _dispatch(self, updates: list[dict[str, Any]]) -> None:
        """Hand each update not yet handed over to the application, in id order."""
        self._got_new = False
        for raw in sorted(updates, key=lambda u: u["update_id"]):
            uid = raw["update_id"]
            if uid in self._dispatched or uid < self._acknowledged:
                continue  # still running, or handled and awaiting acknowledgement
            self._got_new = True
            self._dispatched.add(uid)
            self._highest = uid if self._highest is None else max(self._highest, uid)
            try:
                update = Update.de_json(raw, self._app.bot)
            except Exception as exc:  # never retried: it would fail the same way forever
                log.error("telegram: skipping update %s that does not parse (%r)", uid, exc)
                continue
            self._in_flight.add(uid)
            task = asyncio.create_task(self._handle(update), name=f"telegram update {uid}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, update: Update) -> None:
        """Process like PTB would (its processor: concurrency, one user's updates in order); the
        update counts as handled once its turn is over, answered or not."""
        app = self._app
        try:
            await app.update_processor.process_update(update, app.process_update(update))
        except Exception:
            log.exception("telegram: update %s could not be processed", update.update_id)
        finally:
            self._in_flight.discard(update.update_id)
            self._finished.set()

    async def _acknowledge_handled(self) -> None:
        """The last getUpdates: tell Telegram what was handled since the last poll."""
        offset = self.offset()
        if offset is None or offset <= self._acknowledged:
            return
        try:
            await self._get_updates(offset, 0, limit=1)
        except TelegramError as exc:
            log.warning(
                "telegram: could not acknowledge the last handled updates (%s); Telegram will "
                "deliver them again and they will not be answered twice",
                _describe(exc),
            )
            return
        self._acknowledged = offset

    def _backoff(self, exc: Exception, failures: int) -> float:
        """Seconds to wait after a failed getUpdates, with one clear log line."""
        wait = min(MAX_BACKOFF_S, 0.5 * 2 ** (failures - 1))
        if isinstance(exc, RetryAfter):
            wait = max(wait, _retry_seconds(exc))
            log.warning("telegram: getUpdates flood limit; retrying in %.1f s", wait)
        elif isinstance(exc, Conflict):
            log.error(
                "telegram: getUpdates conflict (%s): another process is polling with this bot "
                "token, or a webhook is set; retrying in %.1f s",
                _describe(exc),
                wait,
            )
        elif isinstance(exc, InvalidToken):
            wait = MAX_BACKOFF_S
            log.error("telegram: getUpdates unauthorized (token revoked?); retry in %.0f s", wait)
        elif isinstance(exc, TimedOut) and failures == 1:
            wait = 0.0  # a long poll that outlived its read timeout: just ask again
            log.debug("telegram: getUpdates timed out; polling again")
        elif isinstance(exc, TelegramError):
            log.warning("telegram: getUpdates failed (%s); retry in %.1f s", _describe(exc), wait)
        else:
            name = type(exc).__name__
            log.error("telegram: getUpdates failed (%s); retry in %.1f s", name, wait, exc_info=exc)
        return wait


def _describe(exc: TelegramError) -> str:
    """A short account of a Bot API error, never InvalidToken's text (it can hold the token)."""
    if isinstance(exc, InvalidToken):
        return "unauthorized"
    return f"{type(exc).__name__}: {exc.message}"


async def _wait_any(events: list[asyncio.Event], timeout_s: float) -> None:
    """Until one of `events` is set, or `timeout_s` has passed."""
    if timeout_s <= 0 or any(event.is_set() for event in events):
        return
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    await _wait_any([stop], seconds)


class _Redact(logging.Filter):
    """Replace the bot token in log records (messages, arguments, tracebacks)."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self._secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if self._secret in message:
            record.msg, record.args = message.replace(self._secret, "<token>"), ()
        if record.exc_text and self._secret in record.exc_text:
            record.exc_text = record.exc_text.replace(self._secret, "<token>")
        return True


@contextlib.contextmanager
def _redacted(token: str) -> Any:
    """Attach a token-redacting filter to every telegram/httpx logger (filters don't inherit)."""
    names = [
        name
        for name in list(logging.root.manager.loggerDict)
        if name.split(".")[0] in ("telegram", "httpx", "httpcore", "adapters")
    ]
    loggers = [logging.getLogger(name) for name in {*names, "telegram", "httpx", __name__}]
    redact = _Redact(token)
    for logger in loggers:
        logger.addFilter(redact)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(redact)
