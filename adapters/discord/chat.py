"""A Discord channel as the shared intake drives it (adapters/intake/pipeline.py `Chat`), and how
an answer becomes Discord messages: its text split to the limit, files and buttons on the last,
mentions disabled; a refused send is logged, never raised (one lost message must not end a turn).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Awaitable
from typing import Any

import discord

from adapters.discord.conversation import platform_id
from adapters.discord.live import MESSAGE_LIMIT, NO_MENTIONS, ChannelSurface, DiscordAnswer
from adapters.live import Pacer
from bot.formatting import split_message
from bot.outbound import Button, Reply, too_large_notice

log = logging.getLogger(__name__)

UPLOAD_LIMIT = 10 * 1024 * 1024  # bytes per attachment without boosts (an interaction says its own)
TYPING_EVERY_S = 8.0  # one indicator lasts up to 10 s


class DiscordChat:
    """The channel of one message: where its turn is answered (in a guild as replies to it)."""

    typing_every_s = TYPING_EVERY_S

    def __init__(self, message: discord.Message, pacer: Pacer, *, in_guild: bool) -> None:
        self.message = message
        self.pacer = pacer
        self.in_guild = in_guild
        self._answer: DiscordAnswer | None = None

    def answer(self) -> DiscordAnswer:
        surface = ChannelSurface(
            self.message.channel, self.message.channel.id, self.pacer, self._reference()
        )
        self._answer = DiscordAnswer(surface, in_group=self.in_guild)
        return self._answer

    async def show_typing(self) -> None:
        """A refused indicator raises: "typing…" stops, which is not worth failing a turn for."""
        await self.message.channel.typing()

    async def say(self, text: str) -> None:
        for chunk, extra in messages_of(Reply(text), UPLOAD_LIMIT):
            reference = self._reference()
            if reference is not None:
                extra["reference"] = reference
            await send_logged(
                self.message.channel.send(chunk, allowed_mentions=NO_MENTIONS, **extra)
            )

    async def refuse(self, text: str) -> None:
        await send_logged(self.message.channel.send(text, allowed_mentions=NO_MENTIONS))

    async def fail(self, text: str) -> None:
        await self.say(text)

    async def conclude(self) -> list[str]:
        answer = self._answer
        assert answer is not None
        try:
            await answer.conclude(messages_of(answer.reply, UPLOAD_LIMIT))
        except discord.HTTPException as exc:
            log.warning("discord: could not send a message: %s", reason(exc))
        channel = self.message.channel.id
        return [platform_id(channel, i) for i in answer.surface.ids]

    async def send_privately(self, reply: Reply) -> bool:
        try:
            for chunk, extra in messages_of(reply, UPLOAD_LIMIT):
                await self.message.author.send(chunk, allowed_mentions=NO_MENTIONS, **extra)
        except discord.HTTPException:
            return False
        return True

    def how_to_open_private(self) -> str:
        return "Use the slash command instead: only you will see its answer."

    def _reference(self) -> discord.MessageReference | None:
        return self.message.to_reference(fail_if_not_exists=False) if self.in_guild else None


def messages_of(reply: Reply, upload_limit: int) -> list[tuple[str, dict[str, Any]]]:
    """The messages of an answer: its text split to the limit; the last one carries the files
    (a file over `upload_limit` is named in the text instead) and the buttons."""
    files, notices = [], []
    for file in reply.files:
        size = file.size()
        if size > upload_limit:
            notices.append(too_large_notice(file, size, upload_limit, "Discord"))
        else:
            files.append(discord.File(io.BytesIO(file.read()), filename=file.name))
    text = "\n\n".join(part for part in (reply.text, *notices) if part)
    chunks = split_message(text, MESSAGE_LIMIT) or ["(nothing to show)"]
    messages: list[tuple[str, dict[str, Any]]] = [(chunk, {}) for chunk in chunks]
    last = messages[-1][1]
    if files:
        last["files"] = files
    if reply.buttons:
        last["view"] = _view(reply.buttons)
    return messages


def _view(buttons: tuple[Button, ...]) -> discord.ui.View:
    """Buttons whose custom_id is their command. The view is stopped before it is sent, so
    discord.py does not keep it: a press arrives as an interaction (the adapter's on_button),
    which works after a restart too and needs no state in the adapter."""
    view = discord.ui.View(timeout=None)
    for number, button in enumerate(buttons):
        style = discord.ButtonStyle.danger if number == 0 else discord.ButtonStyle.secondary
        view.add_item(
            discord.ui.Button(label=button.label[:80], custom_id=button.command, style=style)
        )
    view.stop()
    return view


async def send_logged(sending: Awaitable[Any]) -> Any:
    """Send, logging (not raising) when Discord refuses: one lost message must not end a turn.
    What Discord answered (the message sent), None if it refused."""
    try:
        return await sending
    except discord.HTTPException as exc:
        log.warning("discord: could not send a message: %s", reason(exc))
        return None


def reason(exc: BaseException) -> str:
    """The first line of an error, for a log line."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
