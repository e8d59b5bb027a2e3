"""LightGrep on Telegram, through python-telegram-bot (long polling by default, webhook optional).

The adapter reads who is talking, whether the bot is addressed (private chat, @mention, reply to
the bot, /command@thisbot) and derives the keys; the shared intake (adapters/intake) decides the
rest: the allow list and its refusal, the group's trigger, the turn, its failure, a private
answer asked in a group, the receipt. It drives the chat through `TelegramChat` (chat.py), where
everything is sent one way: split the plain text (bot.formatting), render each chunk as Telegram
HTML, fall back to plain text if Telegram rejects the markup, wait out flood limits.

Polling is our own loop (`Poller`), and so is the webhook server (`WebhookServer`), not PTB's
Updater: the Updater acknowledges an update as soon as it has queued it in memory, so a crash lost
every queued message. We acknowledge an update only once its turn has finished, or once it is on
disk (the spool); after a crash Telegram redelivers the rest, and the core recognises a message it
has already persisted by `Inbound.message_id`. One user's flood waits in that user's own backlog
(adapters/telegram/intake.py, `Intake`); strangers get at most one refusal per chat per throttle
interval (adapters/intake/throttle.py), sent once, never waiting out a flood limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mimetypes
import re
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from telegram import Bot, BotCommand, Message, MessageEntity, Update, User
from telegram.constants import ChatType
from telegram.error import BadRequest, InvalidToken, NetworkError, TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    ContextTypes,
    MessageHandler,
    filters,
)
from telegram.warnings import PTBDeprecationWarning

from adapters.intake import pipeline, texts
from adapters.live import Pacer
from adapters.telegram.bot_api import allow_raw_calls, flood_safe
from adapters.telegram.chat import UPLOAD_LIMIT, TelegramChat, send_files, send_text
from adapters.telegram.conversation import is_chat_admin, quoted_of
from adapters.telegram.intake import Intake, PerUserOrder
from adapters.telegram.place import Place, PrivateText, private_text
from adapters.telegram.polling import Poller
from adapters.telegram.request import AiohttpRequest
from adapters.telegram.settings import PLATFORM, TelegramConfig
from adapters.telegram.spool import Spool
from adapters.telegram.webhook import WebhookServer
from bot import logsafe
from bot.chats import ChatBook, Speaking
from bot.commands.registry import COMMANDS
from bot.inbound import Inbound, Quoted
from bot.keys import chat_key, session_key, user_key
from bot.media.rules import Candidate, MediaRules, TooLarge
from bot.observe.metrics import watch_in_flight
from bot.outbound import Reply
from bot.platform import PlatformStartError

if TYPE_CHECKING:
    from bot.platform import Core

log = logging.getLogger(__name__)

MAX_CONCURRENT_UPDATES = 256
# Every running turn may hold one Bot API connection (typing, then its answer); a connection
# pool smaller than that, or a short wait for a free connection, fails sends under load with
# "Pool timeout" (PTB's defaults: 256 connections, 1 s).
CONNECTION_POOL_SIZE = MAX_CONCURRENT_UPDATES + 64
POOL_TIMEOUT_S = 30.0
DOWNLOAD_LIMIT = 20 * 1000 * 1000  # bytes the cloud Bot API lets a bot download (getFile)
SEND_WAIT_S = 60.0  # a message to send by its place waits this long for the connection


class TelegramAdapter:
    """One Telegram bot serving the core (the agent, or in cluster mode the ingress's broker)."""

    name = PLATFORM
    typing_interval_s = 4.0  # Telegram shows "typing…" for about 5 s per sendChatAction
    upload_limit = UPLOAD_LIMIT

    def __init__(
        self,
        config: TelegramConfig,
        core: Core,
        state_dir: Path,
        media: MediaRules | None = None,
        speaking: Speaking | None = None,
    ) -> None:
        """`state_dir` holds the spool (the workspaces folder: its lock makes us its only
        writer); `media` the limits of what people may send (bot.media.rules); `speaking`
        when the bot answers in a group (bot.chats; by default at a mention)."""
        self.ready = asyncio.Event()
        self._config = config
        self._core = core
        self._state_dir = state_dir
        self._me: User | None = None
        self._commands = {command.name for command in COMMANDS}
        self._intake = pipeline.Intake(  # who is answered, and how (adapters/intake)
            core,
            config.allow_from,
            media=media,
            speaking=speaking or Speaking(ChatBook.of(state_dir)),
            download_limit=DOWNLOAD_LIMIT,
        )
        self._pacer = Pacer()  # edits of answers being written, per chat
        # Messages posted unasked (reminders, send_to) into a group: the group's rate.
        self._group_pacer = Pacer(config.group_send_interval_s)
        self.intake: Intake | None = None
        # The bot's calls, and the files people send (streamed within the limits: _fetch).
        self._http = AiohttpRequest(CONNECTION_POOL_SIZE, pool_timeout=POOL_TIMEOUT_S)
        self._bot: Bot | None = None  # while serving: for send_to
        self._sending: set[asyncio.Task[Any]] = set()  # send_to calls under way
        self._stop = asyncio.Event()  # run()'s: a send waiting for a group's pace gives up

    # ---- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set; then stop fetching updates and let running turns finish.

        The settings were checked when the configuration was loaded (settings.py)."""
        self._stop = stop
        token = self._config.token or ""
        logsafe.hide(*self._config.secrets())  # Bot API URLs carry the token
        app = self._build_app(token)
        try:
            await self._initialize(app)
            await self._serve(app, stop)
        finally:
            await self._wind_down(app)

    def _build_app(self, token: str) -> Application:
        allow_raw_calls()
        self._http = AiohttpRequest(CONNECTION_POOL_SIZE, pool_timeout=POOL_TIMEOUT_S)
        builder = (
            ApplicationBuilder()
            .token(token)
            .concurrent_updates(PerUserOrder(MAX_CONCURRENT_UPDATES))
            .request(self._http)
            .get_updates_request(AiohttpRequest(1))  # one long poll at a time
        )
        builder = builder.updater(None)  # our own loop or server: see Poller, WebhookServer
        if self._config.api_base:
            base = self._config.api_base.rstrip("/")
            builder = builder.base_url(f"{base}/bot").base_file_url(f"{base}/file/bot")
        app = builder.build()
        app.add_handler(MessageHandler(filters.UpdateType.MESSAGE, self._on_message))
        app.add_handler(CallbackQueryHandler(self._on_button))
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
        assert self._me is not None
        spool = Spool(self._state_dir / f".telegram-{self._me.id}.spool")
        intake = self.intake = Intake(app, spool, self._is_stranger, self._direct(app.bot))
        watch_in_flight(PLATFORM, intake.in_flight)
        poller = await self._start_updates(app, intake)
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
        self._bot = app.bot
        self.ready.set()
        if isinstance(poller, Poller):
            await poller.run(stop)  # returns once stopped, running turns finished, acknowledged
            return
        await stop.wait()
        await poller.stop()
        log.info("telegram: stopping; finishing running turns")
        await intake.drain()

    async def _start_updates(self, app: Application, intake: Intake) -> Poller | WebhookServer:
        """Long polling or a webhook, both our own (see the module docstring); pending updates
        are kept either way, and what the last run spooled is handled first."""
        allowed = [Update.MESSAGE, Update.CALLBACK_QUERY]  # callback queries: pressed buttons
        if self._config.mode == "polling":
            poller = Poller(app, allowed, self._config.poll_timeout_s, intake)
            await poller.start()
            return poller
        url = self._config.webhook_url or ""
        intake.restore()
        intake.release()  # Telegram redelivers by POST, whenever it likes: nothing to wait for
        server = WebhookServer(
            app.bot,
            intake,
            url=url,
            path=urlsplit(url).path,
            listen=self._config.webhook_listen,
            port=self._config.webhook_port,
        )
        await server.start(allowed)
        return server

    async def _set_commands(self, bot: Bot) -> None:
        """The command menu shown by Telegram clients; a failure is worth a warning, not a stop."""
        commands = [BotCommand(c.name, c.description) for c in COMMANDS]
        try:
            await flood_safe(lambda: bot.set_my_commands(commands))
        except TelegramError as exc:
            log.warning("telegram: setMyCommands failed: %s", exc.message)

    async def _wind_down(self, app: Application) -> None:
        """Stop the webhook, finish running turns and sends, close (polling has wound itself
        down)."""
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=SEND_WAIT_S)
        if self.intake is not None:
            await self.intake.flush()
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
        addressed = self._addressed_text(msg, private)
        if addressed is None:
            return  # a command for another bot
        text, for_us = addressed
        bot, place, user = context.bot, Place.of(msg), msg.from_user
        media = _attachments(bot, self._http, msg) if msg.text is None else []
        inbound = self._inbound(
            place, text, user.id, reply_to=quoted_of(msg, self._me.id), name=user.full_name
        )

        async def is_admin() -> bool:
            return await is_chat_admin(bot, place.chat_id, user.id)

        arrival = pipeline.Arrival(
            inbound,
            user.id,
            user.username,
            addressed=for_us,
            media=media,
            unreadable=msg.text is None and not media,  # a sticker, a location, a poll
            is_admin=is_admin,
        )
        await self._intake.take(arrival, self._chat(bot, place, user.id))

    def _direct(self, bot: Bot) -> Callable[[dict[str, Any]], Callable[[], Awaitable[None]] | None]:
        """For the intake: the turn of a raw update that is a private text message from someone
        on the allow list, run without PTB's Update (adapters/telegram/place.py); None for every
        other update, which goes through PTB's handlers (`_on_message`, `_on_button`)."""

        def turn_of(raw: dict[str, Any]) -> Callable[[], Awaitable[None]] | None:
            found = private_text(raw)
            if found is None or self._me is None:
                return None
            if not self._intake.allows(found.user_id, found.username):
                return None  # refused through PTB's path, once per interval
            return lambda: self._private_turn(bot, found)

        return turn_of

    async def _private_turn(self, bot: Bot, message: PrivateText) -> None:
        inbound = self._inbound(message.place, message.text, message.user_id)
        arrival = pipeline.Arrival(inbound, message.user_id, message.username)
        await self._intake.take(arrival, self._chat(bot, message.place, message.user_id))

    def _is_stranger(self, raw: dict[str, Any]) -> bool:
        """A raw update from a sender not on the allow list: refused without a turn, so the
        intake neither caps nor spools it."""
        message = raw.get("message")
        sender = message.get("from") if isinstance(message, dict) else None
        if not isinstance(sender, dict) or type(sender.get("id")) is not int:
            return False
        username = sender.get("username")
        username = username if isinstance(username, str) else None
        return not self._intake.allows(sender["id"], username)

    async def _on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A pressed inline button: its command text, as if its presser had typed it in the
        chat of the button's message (our buttons only come with private answers)."""
        query = update.callback_query
        if query is None or self._me is None:
            return
        with contextlib.suppress(TelegramError):
            await query.answer()  # stops the button's spinner
        msg, user = query.message, query.from_user
        if not isinstance(msg, Message) or not query.data or not query.data.startswith("/"):
            return  # too old to be answered in place, or not one of ours
        if not self._intake.allows(user.id, user.username):
            log.info("telegram: refused a button from user %s", user.id)
            return
        with contextlib.suppress(TelegramError):
            await query.edit_message_reply_markup(None)  # a question is answered once
        place = Place.of(msg)
        inbound = self._inbound(
            place, query.data, user.id, event=f"cb:{query.id}", name=user.full_name
        )
        arrival = pipeline.Arrival(inbound, user.id, user.username)
        await self._intake.take(arrival, self._chat(context.bot, place, user.id))

    def _inbound(
        self,
        place: Place,
        text: str,
        user_id: int,
        *,
        event: str | None = None,
        reply_to: Quoted | None = None,
        name: str | None = None,
    ) -> Inbound:
        """The user `user_id` (called `name`) sent `text` in `place`; `event` names a button
        press; `reply_to` what it replies to."""
        return Inbound(
            platform=PLATFORM,
            session_key=self._session_key(place, user_id),
            user_key=user_key(PLATFORM, user_id),
            text=text,
            is_private=place.private,
            # Unique per chat, so a redelivery is recognised.
            message_id=event or f"{place.chat_id}:{place.message_id}",
            reply_to=reply_to,
            chat_key=_chat_key(place),
            place=place.address(user_id),
            sender_name=name,
        )

    def _chat(self, bot: Bot, place: Place, user_id: int) -> TelegramChat:
        assert self._me is not None
        return TelegramChat(
            bot,
            place,
            user_id,
            pacer=self._pacer,
            username=self._me.username or "",
            typing_every_s=self.typing_interval_s,
            upload_limit=self.upload_limit,
        )

    def _addressed_text(self, msg: Message, private: bool) -> tuple[str, bool] | None:
        """The text for the core, and whether the message is addressed to this bot (a private
        chat, an @mention, a reply to the bot, a command); None for another bot's command.

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
                return "/help", True
            return f"/{name}{rest}", True
        if private:
            return text, True
        if self._mentions_me(msg) or self._replies_to_me(msg):
            stripped = re.sub(rf"@{re.escape(self._me.username or '')}\b", "", text, flags=re.I)
            return stripped.strip() or text, True
        return text, False

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
    def _session_key(place: Place, user_id: int) -> str:
        """A person's own conversation: in a group one per person, in a forum topic one per
        person and topic (answered in that topic: Place.thread)."""
        if place.private:
            return session_key(PLATFORM, "dm", user_id)
        if place.thread is not None:
            return session_key(PLATFORM, "group", place.chat_id, user_id, "topic", place.thread)
        return session_key(PLATFORM, "group", place.chat_id, user_id)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        error = context.error
        log.error("telegram: error while handling an update: %r", error, exc_info=error)

    # ---- outgoing --------------------------------------------------------------------------

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        """A message nobody waits on, by the chat's plain ids (bot.platform.Resender): a
        reminder, in the chat and topic it was set in (a private one to the person's own
        chat). Raises what Telegram answered if it did not take it."""
        await asyncio.wait_for(self.ready.wait(), SEND_WAIT_S)
        bot = self._bot
        assert bot is not None
        reply = reply or Reply(texts.FAILED)
        chat = int(destination["chat"])
        thread = int(destination["thread"]) if destination.get("thread") else None
        user = destination.get("user")
        if reply.private and user and chat != int(user):
            chat, thread = int(user), None
        group = chat < 0  # a group's id is negative, a person's private chat's their own
        # Many due at once arrive at the group's pace, not in a burst; at a stop, those still
        # waiting for their turn are not sent (their sender tries again after the restart).
        if group and not await self._group_pacer.wait(chat, self._stop):
            raise ConnectionError("stopping: not sent")
        sending = asyncio.ensure_future(self._send_reply(bot, chat, thread, reply))
        self._sending.add(sending)  # a stop waits for the send itself, not for its caller
        sending.add_done_callback(self._sending.discard)
        try:
            await sending
        finally:
            if group:
                self._group_pacer.done(chat)

    async def _send_reply(self, bot: Bot, chat: int, thread: int | None, reply: Reply) -> None:
        await send_text(bot, chat, reply.text, thread=thread, buttons=reply.buttons)
        await send_files(bot, chat, reply.files, self.upload_limit)


def _chat_key(place: Place) -> str | None:
    """A group's key, whoever writes in it (its settings: bot.chats); None for a private chat,
    whose settings are its person's, by their session key."""
    return None if place.private else chat_key(PLATFORM, "group", place.chat_id)


def _attachments(bot: Bot, http: AiohttpRequest, msg: Message) -> list[Candidate]:
    """What a message carries besides text, as bot.media.rules candidates (nothing downloaded yet).
    A video is listed too, so that the answer can say it is not supported; a sticker, a
    location or a poll is not a file at all (the adapter answers TEXT_ONLY)."""
    if msg.photo:
        largest = max(msg.photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        fetch = _fetch(bot, http, largest.file_id)
        return [Candidate("image/jpeg", "photo.jpg", largest.file_size, fetch)]
    if msg.document:
        doc = msg.document
        name = doc.file_name or "file"
        mime = doc.mime_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
        return [Candidate(mime, name, doc.file_size, _fetch(bot, http, doc.file_id))]
    if msg.voice:
        voice = msg.voice
        fetch = _fetch(bot, http, voice.file_id)
        seconds = _seconds(voice)
        mime = voice.mime_type or "audio/ogg"
        return [Candidate(mime, "voice.ogg", voice.file_size, fetch, voice=True, seconds=seconds)]
    if msg.audio:
        audio = msg.audio
        mime = audio.mime_type or "audio/mpeg"
        name = audio.file_name or f"audio{mimetypes.guess_extension(mime) or '.mp3'}"
        fetch = _fetch(bot, http, audio.file_id)
        return [Candidate(mime, name, audio.file_size, fetch, seconds=_seconds(audio))]
    video = msg.video or msg.video_note or msg.animation
    if video is not None:
        mime = getattr(video, "mime_type", None) or "video/mp4"
        name = getattr(video, "file_name", None) or "video.mp4"
        return [Candidate(mime, name, video.file_size, _fetch(bot, http, video.file_id))]
    return []


def _fetch(bot: Bot, http: AiohttpRequest, file_id: str) -> Callable[[int], Awaitable[bytes]]:
    """Download: getFile through PTB, then the file's URL through the bot's own HTTP, streamed
    and stopped at `limit` bytes (a size reported wrong, or not at all, is found out before the
    bot holds more than it would keep)."""

    async def download(limit: int) -> bytes:
        file = await bot.get_file(file_id)
        if file.file_size is not None and file.file_size > limit:
            raise TooLarge
        if not file.file_path:
            raise NetworkError("getFile gave no file_path")
        return await http.retrieve_within(file.file_path, limit)

    return download


def _seconds(media: Any) -> float | None:
    """A voice message's or audio's duration; PTB 22 warns that it will become a timedelta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = getattr(media, "duration", None)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value) if isinstance(value, int | float) else None


def _start_error(exc: TelegramError, where: str) -> str:
    """One line for a failed getMe; never InvalidToken's own text (it holds the token)."""
    if isinstance(exc, InvalidToken):
        return "telegram rejected the bot token (getMe: unauthorized): check [telegram] token"
    if isinstance(exc, BadRequest):
        return f"telegram getMe failed: {exc.message}"
    if isinstance(exc, NetworkError):
        return f"cannot reach the Telegram Bot API at {where}: {type(exc).__name__}"
    return f"telegram getMe failed: {type(exc).__name__}"


def _command(msg: Message) -> tuple[str, str, str] | None:
    """(name, @target or "", rest of the text) when the message starts with a bot command."""
    text = msg.text or msg.caption or ""
    entities = msg.entities if msg.text else msg.caption_entities
    if not entities or entities[0].type != MessageEntity.BOT_COMMAND or entities[0].offset != 0:
        return None
    token = text[: entities[0].length]
    name, _, target = token[1:].partition("@")
    return name, target, text[entities[0].length :]
