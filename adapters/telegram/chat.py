"""A Telegram chat as the shared intake drives it (adapters/intake/pipeline.py `Chat`), and the
one way text and files are sent: split the plain text, render each chunk as Telegram HTML (plain
if Telegram rejects the markup), wait out flood limits; a file over the upload limit is named."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from telegram import Bot, InputFile, ReplyParameters
from telegram.constants import ChatAction
from telegram.error import BadRequest, Forbidden, TelegramError

from adapters.live import Pacer
from adapters.telegram.bot_api import flood_safe
from adapters.telegram.live import (
    ChatSurface,
    TelegramAnswer,
    keyboard,
    send_chunk,
    telegram_chunks,
)
from adapters.telegram.place import Place
from bot.outbound import Button, OutFile, Reply, too_large_notice

log = logging.getLogger(__name__)

UPLOAD_LIMIT = 50 * 1000 * 1000  # bytes a bot may send as a document through the Bot API


class TelegramChat:
    """The chat of one message (`place`) from `user_id`: where its turn is answered."""

    def __init__(
        self,
        bot: Bot,
        place: Place,
        user_id: int,
        *,
        pacer: Pacer,
        username: str,
        typing_every_s: float,
        upload_limit: int = UPLOAD_LIMIT,
    ) -> None:
        """`username`: the bot's own (its private chat's link); `pacer`: the edits' pace."""
        self.bot = bot
        self.place = place
        self.user_id = user_id
        self.pacer = pacer
        self.username = username
        self.typing_every_s = typing_every_s
        self.upload_limit = upload_limit
        self._answer: TelegramAnswer | None = None

    def answer(self) -> TelegramAnswer:
        """Shown while it is written: as a draft in a private chat, in a group as a reply to the
        message (in its forum topic)."""
        place = self.place
        surface = ChatSurface(
            self.bot,
            place.chat_id,
            self.pacer,
            drafts=place.private,
            thread=place.thread,
            reply_to=None if place.private else place.message_id,
        )
        self._answer = TelegramAnswer(surface, in_group=not place.private)
        return self._answer

    async def show_typing(self) -> None:
        with contextlib.suppress(TelegramError):
            await self.bot.send_chat_action(
                self.place.chat_id, ChatAction.TYPING, message_thread_id=self.place.thread
            )

    async def say(self, text: str) -> None:
        place = self.place
        await send_text(
            self.bot,
            place.chat_id,
            text,
            reply_to=None if place.private else place.message_id,
            thread=place.thread,
            markup=False,
        )

    async def refuse(self, text: str) -> None:
        """One try: a refusal is not worth waiting out a flood limit for, nor retrying."""
        try:
            await self.bot.send_message(self.place.chat_id, text)
        except TelegramError as exc:
            log.info(
                "telegram: refusal to chat %s not sent (%s)", self.place.chat_id, type(exc).__name__
            )

    async def fail(self, text: str) -> None:
        await self.say(text)

    async def conclude(self) -> list[str]:
        assert self._answer is not None
        await self._answer.conclude()
        files, place = self._answer.reply.files, self.place
        await send_files(self.bot, place.chat_id, files, self.upload_limit, thread=place.thread)
        return [f"{self.place.chat_id}:{i}" for i in self._answer.surface.ids]

    async def send_privately(self, reply: Reply) -> bool:
        """The answer, its buttons and files, in the person's private chat (which Telegram
        refuses until the person has pressed Start there)."""
        try:
            await send_text(self.bot, self.user_id, reply.text, buttons=reply.buttons)
            await send_files(self.bot, self.user_id, reply.files, self.upload_limit)
        except (Forbidden, BadRequest) as exc:
            log.info("telegram: cannot write to user %s privately (%s)", self.user_id, exc.message)
            return False
        return True

    def how_to_open_private(self) -> str:
        return f"Open one with me (https://t.me/{self.username}), press Start, then ask again."


async def send_files(
    bot: Bot,
    chat_id: int,
    files: tuple[OutFile, ...],
    upload_limit: int,
    *,
    thread: int | None = None,
) -> None:
    """Each file as a document, an answer read aloud as a voice message (in the forum topic of
    its text); one over the Bot API's upload limit is named instead."""
    for file in files:
        size = file.size()
        if size > upload_limit:
            notice = too_large_notice(file, size, upload_limit, "Telegram")
            await send_text(bot, chat_id, notice, markup=False)
            continue
        if file.voice and await _send_voice(bot, chat_id, file, thread):
            continue
        await _send_document(bot, chat_id, InputFile(file.read(), filename=file.name))


async def _send_voice(bot: Bot, chat_id: int, file: OutFile, thread: int | None) -> bool:
    """sendVoice (OGG/Opus); False when the person accepts no voice messages (a privacy setting
    of theirs), so that it goes as a file instead. Refused otherwise, it is logged and left:
    the answer's text is sent already, and is the answer."""
    voice = InputFile(file.read(), filename=file.name)
    try:
        await flood_safe(lambda: bot.send_voice(chat_id, voice, message_thread_id=thread))
    except BadRequest as exc:
        if "VOICE_MESSAGES_FORBIDDEN" in exc.message.upper():
            log.info("telegram: chat %s takes no voice messages; sending a file", chat_id)
            return False
        log.warning("telegram: the voice of an answer was refused: %s", exc.message)
    except TelegramError as exc:
        log.warning("telegram: the voice of an answer was not sent: %s", type(exc).__name__)
    return True


async def _send_document(bot: Bot, chat_id: int, document: InputFile) -> None:
    await flood_safe(lambda: bot.send_document(chat_id, document))


async def send_text(
    bot: Bot,
    chat_id: int,
    text: str,
    *,
    reply_to: int | None = None,
    thread: int | None = None,
    markup: bool = True,
    buttons: tuple[Button, ...] = (),
) -> None:
    """Split the plain text, then render and send each chunk; the first one is the reply, the
    last one carries the buttons (an inline keyboard whose presses come back as callback
    queries with the button's command)."""
    chunks = telegram_chunks(text)
    for number, chunk in enumerate(chunks):
        extra: dict[str, Any] = {}
        if buttons and number == len(chunks) - 1:
            extra["reply_markup"] = keyboard(buttons)
        if thread is not None:
            extra["message_thread_id"] = thread
        if number == 0 and reply_to is not None:
            extra["reply_parameters"] = ReplyParameters(reply_to, allow_sending_without_reply=True)
        await send_chunk(bot, chat_id, chunk, markup, extra)
