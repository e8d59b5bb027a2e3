"""Discord answers shown as they are written (adapters/live.py): the first text is sent as a
message (a reply in a guild), then edited as the text grows, at most about once a second per
channel; past 2000 characters the answer goes on in a new message. discord.py waits out rate
limits itself. Files and buttons come with the finished answer."""

from __future__ import annotations

import logging
from typing import Any

import discord

from adapters.live import LiveAnswer, Pacer

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 2000  # characters per Discord message
NO_MENTIONS = discord.AllowedMentions.none()  # the model can never ping anyone


class ChannelSurface:
    """Where one answer is written in one channel (a Surface of adapters/live.py)."""

    def __init__(
        self,
        channel: discord.abc.Messageable,
        channel_id: int,
        pacer: Pacer,
        reference: discord.MessageReference | None = None,
    ) -> None:
        self.channel = channel
        self.channel_id = channel_id
        self.pacer = pacer
        self.reference = reference  # the first message of the answer replies to it (guilds)
        self.message: discord.Message | None = None  # the message being edited
        self.showing: str | None = None
        self.sent = 0
        self.ids: list[int] = []  # the ids of the messages of this answer, in order

    async def ready(self) -> None:
        if self.message is not None:
            await self.pacer.wait(self.channel_id)

    async def preview(self, part: str) -> None:
        if part == self.showing:
            return
        if self.message is None:
            self.message = await self._send(part)
        else:
            try:
                await self.message.edit(content=part, allowed_mentions=NO_MENTIONS)
            finally:
                self.pacer.done(self.channel_id)
        self.showing = part

    async def settle(self, part: str) -> None:
        await self.place([(part, {})])

    async def place(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """Messages in their final form: the first in place of the one being written (its
        files, which an edit does not carry here, follow in a message of their own)."""
        for number, (chunk, extra) in enumerate(messages):
            if number == 0 and self.message is not None:
                options = dict(extra)
                files = options.pop("files", None)
                if chunk != self.showing or options:
                    await self.pacer.wait(self.channel_id)
                    try:
                        await self.message.edit(
                            content=chunk, allowed_mentions=NO_MENTIONS, **options
                        )
                    finally:
                        self.pacer.done(self.channel_id)
                if files:
                    await self.channel.send(files=files, allowed_mentions=NO_MENTIONS)
            else:
                await self._send(chunk, **extra)
        self.message, self.showing = None, None

    async def _send(self, chunk: str, **extra: Any) -> discord.Message:
        if self.sent == 0 and self.reference is not None:
            extra["reference"] = self.reference
        message = await self.channel.send(chunk, allowed_mentions=NO_MENTIONS, **extra)
        self.sent += 1
        self.ids.append(message.id)
        return message


class DiscordAnswer(LiveAnswer):
    """The reply port for one Discord message turn; `conclude` sends the rest."""

    def __init__(self, surface: ChannelSurface, *, in_group: bool) -> None:
        super().__init__(surface, MESSAGE_LIMIT, in_group=in_group)
        self.surface = surface

    async def conclude(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """`messages`: the whole answer's, split as the adapter sends them (files and buttons
        on the last); those not shown in their final form yet are sent."""
        await self.surface.place(messages[self.live.settled :])
