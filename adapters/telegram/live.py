"""Telegram answers: sending within the Bot API's rules, and showing an answer as it is written.

Every message goes out the same way: the plain text split to 4096 UTF-16 code units, each chunk
rendered as Telegram HTML (adapters/telegram/markup.py: valid for any text, a partial answer
too), sent as plain text if Telegram rejects the markup anyway, flood limits waited out.

While an answer is written (adapters/live.py) it shows in one of two ways:
- In a private chat, as a draft (`sendMessageDraft`, Bot API 9.5): the chat shows the text
  growing; a draft is not kept, so each part is then sent as a message. Where drafts fail (an
  older Bot API server, a refusal) the answer goes on as below.
- In groups: the first text is sent as a message, which is then edited as the text grows, at
  most about once a second per chat ("message is not modified" is no failure; a flood limit
  is waited out). Past 4096 characters the answer goes on in a new message.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, RetryAfter, TelegramError

from adapters.live import LiveAnswer, Pacer
from adapters.telegram.bot_api import flood_safe, raw_call, retry_seconds
from adapters.telegram.markup import markdown_to_html
from bot.formatting import split_message
from bot.outbound import Button

log = logging.getLogger(__name__)

LIMIT = 4096  # characters per message, counted by Telegram in UTF-16 code units
_draft_ids = itertools.count(1)  # a draft's id: non-zero, one per message being written


def telegram_chunks(text: str) -> list[str]:
    """Chunks within Telegram's limit, which counts UTF-16 code units (emoji count twice)."""
    chunks: list[str] = []
    for chunk in split_message(text, LIMIT):
        if _utf16_len(chunk) > LIMIT:
            chunks.extend(split_message(chunk, LIMIT // 2))
        else:
            chunks.append(chunk)
    return [chunk for chunk in chunks if chunk.strip()]


async def send_chunk(
    bot: Bot, chat_id: int, chunk: str, markup: bool, extra: dict[str, Any]
) -> int:
    """One chunk as a message: rendered, else (markup refused) as plain text; its id."""
    if markup:
        html = markdown_to_html(chunk)
        try:
            return await _send_message(bot, chat_id, html, {"parse_mode": ParseMode.HTML, **extra})
        except BadRequest as exc:
            if not is_markup_error(exc):
                raise
            log.warning("telegram rejected the markup (%s); sending plain text", exc.message)
    return await _send_message(bot, chat_id, chunk, extra)


async def _send_message(bot: Bot, chat_id: int, text: str, extra: dict[str, Any]) -> int:
    """sendMessage, flood limits waited out; the id of the message, read from the raw answer
    (a Message object built for one field cost more than the call itself)."""
    data = {"chat_id": chat_id, "text": text, **extra}
    result = await flood_safe(lambda: raw_call(bot, "sendMessage", data))
    if not isinstance(result, dict) or type(result.get("message_id")) is not int:
        raise TelegramError(f"sendMessage returned {type(result).__name__}, not a message")
    return result["message_id"]


def keyboard(buttons: tuple[Button, ...]) -> InlineKeyboardMarkup:
    """Buttons as an inline keyboard whose presses come back with the button's command."""
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(b.label, callback_data=b.command) for b in buttons]]
    )


def is_markup_error(exc: BadRequest) -> bool:
    message = exc.message.lower()
    return any(word in message for word in ("parse", "entit", "tag"))


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class ChatSurface:
    """Where one answer is written in one chat (a Surface of adapters/live.py)."""

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        pacer: Pacer,
        *,
        drafts: bool,
        thread: int | None = None,
        reply_to: int | None = None,
    ) -> None:
        self.bot = bot
        self.chat_id = chat_id
        self.pacer = pacer
        self.drafting = drafts
        self.thread = thread
        self.reply_to = reply_to  # the first message of the answer replies to it (groups)
        self.message: int | None = None  # the id of the message being edited
        self.showing: str | None = None  # the chunk it (or the draft) shows
        self.draft_id = next(_draft_ids)
        self.sent = 0  # messages of this answer sent so far
        self.ids: list[int] = []  # their message ids, in order

    async def ready(self) -> None:
        if self.message is not None:
            await self.pacer.wait(self.chat_id)

    async def preview(self, part: str) -> None:
        chunks = telegram_chunks(part)
        if not chunks or chunks[0] == self.showing:
            return
        if self.drafting and await self._draft(chunks[0]):
            return
        if self.message is None:
            self.message = await self._send(chunks[0])
        else:
            await self._edit(self.message, chunks[0])
        self.showing = chunks[0]

    async def settle(self, part: str) -> None:
        await self.place(telegram_chunks(part))

    async def place(self, chunks: list[str], buttons: tuple[Button, ...] = ()) -> None:
        """Chunks in their final form: the first in place of the one being written, the last
        with the buttons. The next text starts a new message (and a new draft)."""
        for number, chunk in enumerate(chunks):
            last = number == len(chunks) - 1
            markup = keyboard(buttons) if buttons and last else None
            if number == 0 and self.message is not None:
                if chunk != self.showing or markup is not None:
                    await self.pacer.wait(self.chat_id)
                    await self._edit(self.message, chunk, markup)
            else:
                await self._send(chunk, markup)
        self.message, self.showing = None, None
        self.draft_id = next(_draft_ids)

    async def _draft(self, chunk: str) -> bool:
        """Show `chunk` as the draft; False if drafts do not work here (then it is edits)."""
        html = markdown_to_html(chunk)
        call = self.bot.send_message_draft
        try:
            await call(self.chat_id, self.draft_id, html, self.thread, parse_mode=ParseMode.HTML)
        except RetryAfter as exc:  # a preview is not worth a retry: the next one will come
            await asyncio.sleep(retry_seconds(exc))
            return True
        except BadRequest as exc:
            if not is_markup_error(exc):
                return self._no_drafts(exc)
            await call(self.chat_id, self.draft_id, chunk, self.thread)
        except TelegramError as exc:
            return self._no_drafts(exc)
        self.showing = chunk
        return True

    def _no_drafts(self, exc: TelegramError) -> bool:
        log.info("telegram: no drafts in chat %s (%s); editing instead", self.chat_id, exc)
        self.drafting = False
        return False

    async def _send(self, chunk: str, markup: InlineKeyboardMarkup | None = None) -> int:
        extra: dict[str, Any] = {}
        if markup is not None:
            extra["reply_markup"] = markup
        if self.thread is not None:
            extra["message_thread_id"] = self.thread
        if self.sent == 0 and self.reply_to is not None:
            extra["reply_parameters"] = ReplyParameters(
                self.reply_to, allow_sending_without_reply=True
            )
        message = await send_chunk(self.bot, self.chat_id, chunk, True, extra)
        self.sent += 1
        self.ids.append(message)
        return message

    async def _edit(
        self, message: int, chunk: str, markup: InlineKeyboardMarkup | None = None
    ) -> None:
        """Edit to `chunk` (rendered; plain if the markup is refused). Paced by the caller."""
        html = markdown_to_html(chunk)

        async def edit(text: str, mode: str | None) -> None:
            try:
                await self.bot.edit_message_text(
                    text, self.chat_id, message, parse_mode=mode, reply_markup=markup
                )
            finally:
                self.pacer.done(self.chat_id)

        try:
            await flood_safe(lambda: edit(html, ParseMode.HTML))
        except BadRequest as exc:
            if _not_modified(exc):
                return
            if not is_markup_error(exc):
                raise
            log.warning("telegram rejected the markup (%s); editing as plain text", exc.message)
            try:
                await flood_safe(lambda: edit(chunk, None))
            except BadRequest as again:
                if not _not_modified(again):
                    raise


def _not_modified(exc: BadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


class TelegramAnswer(LiveAnswer):
    """The reply port for one Telegram turn (adapters/live.py); `conclude` sends the rest."""

    def __init__(self, surface: ChatSurface, *, in_group: bool) -> None:
        super().__init__(surface, LIMIT, in_group=in_group)
        self.surface = surface

    async def conclude(self) -> None:
        """Send what is not shown in its final form yet: the rest of the text, its buttons."""
        reply = self.reply
        chunks = [c for part in self.live.unsettled(reply.text) for c in telegram_chunks(part)]
        await self.surface.place(chunks, reply.buttons)
