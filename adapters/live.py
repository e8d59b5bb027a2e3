"""Showing an answer while it is written, within a platform's limits (Telegram, Discord).

The core hands an answer's text over in pieces (bot.outbound). `LiveText` keeps the text and,
in a task of its own, shows it through the platform's `Surface` every `interval_s` at most: the
text is split with the one splitter (bot.formatting) at the platform's limit; every part but the
last is complete (the answer went on past the limit) and is *settled* once, in its final form;
the last part is *previewed*, again and again as it grows. A part never changes once a later
part exists (the splitter cuts within the first `limit` characters of what is left), so the
parts settled while streaming are exactly the first parts of the final answer, and the adapter
sends the rest of them (`unsettled`) when the answer is complete.

The text is shown first when the task first runs: an answer handed over whole (a command's, or
any answer with [agent] stream = false), whose finish follows its text without a pause, is never
previewed, only sent. A call to the platform is never cancelled half way (the message it sends
would be sent twice); `close` lets it finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from bot.formatting import split_message
from bot.outbound import BufferedOutbound, Button, Notice, OutFile, Reply

log = logging.getLogger(__name__)

INTERVAL_S = 0.5  # the longest a preview lags behind the text (a draft; edits are paced more)
EDIT_INTERVAL_S = 1.1  # edits of one chat at most this often: "about once a second", kept


class Surface(Protocol):
    """Where a platform shows the answer being written."""

    async def ready(self) -> None:
        """Wait until the next change may be shown (an edit waits for its chat's pace)."""

    async def preview(self, part: str) -> None:
        """Show `part`, the last part of the text, as it is now."""

    async def settle(self, part: str) -> None:
        """`part` is complete: show it in its final form, in place of its preview."""


class LiveText:
    """An answer's text as it grows, shown through a Surface (see the module docstring)."""

    def __init__(self, surface: Surface, limit: int, interval_s: float = INTERVAL_S) -> None:
        self.surface = surface
        self.limit = limit
        self.interval_s = interval_s
        self.text = ""
        self.settled = 0  # parts shown in their final form
        self.shown = asyncio.Event()  # some of the answer is visible (the typing indicator stops)
        self.failed = False
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, piece: str) -> None:
        if not piece or self._closing.is_set():
            return
        self.text += piece
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    def unsettled(self, text: str) -> list[str]:
        """The parts of the whole answer `text` that are not shown in their final form yet."""
        return split_message(text, self.limit)[self.settled :]

    async def close(self) -> None:
        """Stop showing: a call under way is let finish, a pause is cut short."""
        self._closing.set()
        self._changed.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        try:
            while True:
                await self._changed.wait()
                if self._closing.is_set():
                    return
                await self.surface.ready()
                if self._closing.is_set():
                    return
                self._changed.clear()
                await self._show()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), self.interval_s)
        except Exception as exc:  # the answer is still sent whole at the end
            self.failed = True
            log.warning("could not show the answer as it was written: %s", exc)

    async def _show(self) -> None:
        parts = split_message(self.text, self.limit)
        while self.settled < len(parts) - 1:
            await self.surface.settle(parts[self.settled])
            self.settled += 1
            self.shown.set()
        if parts and parts[-1].strip():
            await self.surface.preview(parts[-1])
            self.shown.set()


class Pacer:
    """At most one edit per chat every `interval_s`, across every answer written in it (two
    people answered at once in a group share the chat's pace)."""

    def __init__(self, interval_s: float = EDIT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._next: dict[int, float] = {}  # chat → earliest time of its next edit

    async def wait(self, chat: int, stop: asyncio.Event | None = None) -> bool:
        """Take the chat's next slot (a reservation: callers at once get successive slots).
        False if `stop` was set before the slot came (a message many places behind in a
        group's queue does not hold a stop up: its sender says it was not sent)."""
        now = time.monotonic()
        at = max(now, self._next.get(chat, 0.0))
        self._next[chat] = at + self.interval_s
        if len(self._next) > 10_000:  # forget chats whose pace has long passed
            self._next = {c: t for c, t in self._next.items() if t > now}
        if stop is None:
            if at > now:
                await asyncio.sleep(at - now)
            return True
        if at <= now:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), at - now)
        return not stop.is_set()

    def done(self, chat: int) -> None:
        """An edit of the chat has been answered: the next waits a whole interval from now.
        Counted from the answer, not the request, the platform sees its edits of one chat at
        least `interval_s` apart even when a request waited in a queue (a loaded machine, a
        slow network) and the next did not."""
        self._next[chat] = max(self._next.get(chat, 0.0), time.monotonic() + self.interval_s)


class LiveAnswer:
    """The reply port for one turn on a platform that shows answers as they are written: the
    answer is collected whole (`reply`, as BufferedOutbound does) and, unless it is a private
    answer asked in a group (never shown there: the adapter sends it privately), its text is
    shown through `surface` as it comes. The adapter sends what is left once it is finished."""

    def __init__(self, surface: Surface, limit: int, *, in_group: bool) -> None:
        self.in_group = in_group
        self.buffer = BufferedOutbound()
        self.live = LiveText(surface, limit)
        self.finished = False  # finish was called: the answer is whole

    @property
    def shown(self) -> asyncio.Event:
        """Set once some of the answer is visible: the typing indicator stops."""
        return self.live.shown

    async def begin(self, *, private: bool = False) -> None:
        await self.buffer.begin(private=private)

    async def add_text(self, text: str) -> None:
        await self.buffer.add_text(text)
        if not (self.buffer.private and self.in_group):
            self.live.add(text)

    async def attach_file(self, file: OutFile) -> None:
        await self.buffer.attach_file(file)

    async def offer(self, buttons: tuple[Button, ...]) -> None:
        await self.buffer.offer(buttons)

    async def notice(self, what: Notice) -> None:
        await self.buffer.notice(what)

    async def finish(self) -> None:
        await self.live.close()
        await self.buffer.finish()
        self.finished = True

    async def close(self) -> None:
        """The turn failed: stop showing (what is shown stays; the adapter apologises)."""
        await self.live.close()

    @property
    def reply(self) -> Reply:
        return self.buffer.reply
