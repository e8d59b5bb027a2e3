"""The way from a platform's message to the core's answer, the same on every platform.

A platform reads a message into an `Arrival` (the Inbound the core will get, who sent it,
whether it is addressed to the bot, what it carries) and hands it to `Intake.take` with the
`Chat` it came from. The intake decides the rest:

1. In a group, a message not for the bot (the chat's /group trigger: bot.chats) is left alone:
   nothing shows, nobody is refused.
2. Someone not on the allow list is refused in a private chat, at most once per chat per
   throttle interval (adapters/intake/throttle.py), and left unanswered in a group.
3. A message of a kind the bot cannot read is answered with texts.TEXT_ONLY.
4. "typing…" shows while the media are collected (within the limits) and the core answers,
   until some of the answer shows.
5. The core raising: what showed of the answer stays, the person is told (texts.FAILED), the
   operator finds the details in the log.
6. An answer the core marks private, asked in a group, goes to the person's private chat; the
   group is told where it went, or how to open that chat.
7. The receipt: the core is told under which ids the answer was sent, so that a reply to any of
   its messages finds its text (the answer of most commands is not in the conversation).

A platform implements `Chat`: how to send, show typing, reach the person's private chat, show an
answer while it is written. It decides nothing of the above.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from adapters.intake import texts
from adapters.intake.throttle import PerChatInterval
from bot.access import is_allowed
from bot.commands.registry import in_conversation, needs_chat_admin, takes_file
from bot.inbound import Delivered, Inbound
from bot.media.rules import Candidate, MediaRules, collect
from bot.outbound import BufferedOutbound, Outbound, Reply
from bot.repeating import repeating

if TYPE_CHECKING:
    from bot.chats import Speaking
    from bot.platform import Core

log = logging.getLogger(__name__)


class Answer(Outbound, Protocol):
    """The reply port of one turn as a platform shows it (adapters/live.py's LiveAnswer, the
    terminal's printer)."""

    @property
    def shown(self) -> asyncio.Event:
        """Set once some of the answer is visible: "typing…" stops."""
        ...

    @property
    def reply(self) -> Reply:
        """The whole answer; raises RuntimeError until the core has finished it."""
        ...

    async def close(self) -> None:
        """The turn ended without finishing (failed, cancelled): stop showing."""
        ...


class Chat(Protocol):
    """What only the platform knows about the chat a message came from."""

    typing_every_s: float  # how often "typing…" is shown again while the core answers

    def answer(self) -> Answer:
        """The reply port of this message's turn."""
        ...

    async def show_typing(self) -> None: ...

    async def say(self, text: str) -> None:
        """A short plain message in the chat, answering the person's (in a group as a reply)."""
        ...

    async def refuse(self, text: str) -> None:
        """Like `say`, but tried once: never waiting out a flood limit, a failure only logged."""
        ...

    async def fail(self, text: str) -> None:
        """Say that the turn failed (`text`); a platform may add where the details are."""
        ...

    async def conclude(self) -> list[str]:
        """Send what of this turn's finished answer (`answer`'s) is not shown yet: the rest of
        its text, its files, its buttons. The platform ids of its messages, for the receipt."""
        ...

    async def send_privately(self, reply: Reply) -> bool:
        """The whole answer in the person's private chat; False if the bot may not write there."""
        ...

    def how_to_open_private(self) -> str:
        """How the person opens a private chat with the bot (said when it cannot write there)."""
        ...


@dataclass(frozen=True)
class Arrival:
    """A message as the platform read it. `inbound`: the message as the core will get it (its
    `chat_admin` is the intake's to fill in); `sender` and `username`: who sent it, as the allow
    list names people; `addressed`: a private chat, a mention of the bot, a reply to it or its
    command; `media`: what it carries besides text, not downloaded yet; `unreadable`: it carries
    something the bot cannot read at all (a sticker, a location); `is_admin`: asks the platform
    whether the sender administers the group (only asked for a command that needs it)."""

    inbound: Inbound
    sender: object
    username: str | None = None
    addressed: bool = True
    media: Sequence[Candidate] = ()
    unreadable: bool = False
    is_admin: Callable[[], Awaitable[bool]] | None = None


class Intake:
    """One platform's intake (see the module docstring); `download_limit`: the most the platform
    lets a bot download, `speaking`: when the bot speaks in a group (None: no groups)."""

    def __init__(
        self,
        core: Core,
        allow_from: Sequence[str],
        *,
        media: MediaRules | None = None,
        speaking: Speaking | None = None,
        download_limit: int | None = None,
        refusals: PerChatInterval | None = None,
    ) -> None:
        self.core = core
        self.allow_from = allow_from
        self.media = media or MediaRules()
        self.speaking = speaking
        self.download_limit = download_limit
        self.refusals = refusals or PerChatInterval()

    def allows(self, sender: object, username: str | None = None) -> bool:
        return is_allowed(self.allow_from, sender, username)

    def wanted(self, inbound: Inbound, *, addressed: bool) -> bool:
        """Whether a message is for the bot: always in a private chat, in a group by its trigger."""
        if inbound.chat_key is None or self.speaking is None:
            return True
        return self.speaking.wanted(inbound.chat_key, addressed=addressed, text=inbound.text)

    async def take(self, arrival: Arrival, chat: Chat) -> None:
        """Everything between a message and its answer (see the module docstring)."""
        inbound = arrival.inbound
        if not self.wanted(inbound, addressed=arrival.addressed):
            return
        if not self.allows(arrival.sender, arrival.username):
            await self._refuse(inbound, arrival.sender, chat)
            return
        if arrival.unreadable:
            await chat.say(texts.TEXT_ONLY)
            return
        if inbound.chat_key is not None and arrival.is_admin and needs_chat_admin(inbound.text):
            inbound = replace(inbound, chat_admin=await arrival.is_admin())
        ids = await self._turn(inbound, arrival.media, chat)
        await self._receipt(inbound, ids)

    async def _refuse(self, inbound: Inbound, sender: object, chat: Chat) -> None:
        if not inbound.is_private:
            log.debug("%s: ignored user %s in a group (not allowed)", inbound.platform, sender)
            return
        if self.refusals.allow(inbound.session_key):
            log.info("%s: refused user %s (not on the allow list)", inbound.platform, sender)
            await chat.refuse(texts.REFUSAL)

    async def _turn(self, inbound: Inbound, media: Sequence[Candidate], chat: Chat) -> list[str]:
        """The core's answer, shown and sent; the ids of its messages in this chat (none when
        the turn failed, had nothing to send, or went privately)."""
        out = chat.answer()
        try:
            async with repeating(chat.show_typing, chat.typing_every_s, until=out.shown):
                if media:
                    found = await collect(
                        media, self.media, self.download_limit, importing=takes_file(inbound.text)
                    )
                    inbound = replace(inbound, attachments=found)
                await self.core.handle(inbound, out)
            reply = out.reply
        except Exception:
            await out.close()
            log.exception("%s: the turn for %s failed", inbound.platform, inbound.session_key)
            await chat.fail(texts.FAILED)
            return []
        except asyncio.CancelledError:
            await out.close()
            raise
        if not reply.text and not reply.files:
            return []  # a redelivered message that a later message's answer covered
        if reply.private and not inbound.is_private:
            if await chat.send_privately(reply):
                await chat.say(texts.SENT_PRIVATELY)
            else:
                await chat.say(texts.private_only(chat.how_to_open_private()))
            return []  # the group saw only where the answer went
        return await chat.conclude()

    async def answer(self, inbound: Inbound, out: BufferedOutbound) -> Reply:
        """The core's whole answer in one go (a slash command's), or the failure's apology."""
        try:
            await self.core.handle(inbound, out)
            return out.reply
        except Exception:
            log.exception("%s: the turn for %s failed", inbound.platform, inbound.session_key)
            return Reply(texts.FAILED)

    async def _receipt(self, inbound: Inbound, ids: list[str]) -> None:
        """Tell the core under which ids the answer to a message was sent, so that a reply to
        one of them finds its text. Nothing to tell without ids, or for a command whose answer
        is not in the conversation."""
        if not ids or inbound.message_id is None or not in_conversation(inbound.text):
            return
        receipt = replace(
            inbound,
            text="",
            message_id=f"sent:{ids[0]}",
            attachments=(),
            reply_to=None,
            destination=None,
            delivered=Delivered(inbound.message_id, tuple(ids)),
        )
        try:
            await self.core.handle(receipt, BufferedOutbound())
        except Exception:  # the answer is sent; a reply to it quotes what the platform shows
            log.exception(
                "%s: the receipt of an answer in %s failed", inbound.platform, inbound.session_key
            )
