"""Telling a person's other accounts that a link was made or removed, at once and durably.

A notice is written to the person's workspace first (memory/control/notices.py), then sent in
the background through the platform's sender, the port reminders use (`bot.platform.Resender`:
the adapter's `send_to` in one process, `PushSender` in a worker), as a private message to where
that account last sent /link or /unlink from (privately: both sides of a link did). Sent, it
is marked told. If it cannot be sent (no place known yet, the platform away), it stays on
file and is said under that account's next private answer, after a restart too. In cluster
mode a notice for a person served by another worker travels in the shared link table
(bot/cluster/people.py), and that worker writes and sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable

from bot.commands.linking import PersonMoves
from bot.outbound import Reply
from bot.platform import Resender
from memory.control.notices import NoticeFile
from memory.workspace import Workspaces

log = logging.getLogger(__name__)

MAX_PLACES = 10_000  # keys whose recorded place is remembered in RAM (a miss reads the file)


class Teller:
    """The notices of every person, for the agent."""

    def __init__(
        self,
        workspaces: Workspaces,
        resolve: Callable[[str], str],
        senders: dict[str, Resender],
        moves: PersonMoves | None,
    ) -> None:
        self._workspaces = workspaces
        self._resolve = resolve
        self._senders = senders  # the reminders' senders, by platform (the same dict)
        self._moves = moves
        self._noted: OrderedDict[str, dict[str, str]] = OrderedDict()  # key → its place on file
        self._sending: set[asyncio.Task[None]] = set()

    def seen(self, own: str, person: str, platform: str, place: dict[str, str] | None) -> None:
        """`own` wrote /link or /unlink privately from `place` (plain ids): recorded in its
        person's workspace when it changed, so a notice can reach it there later."""
        if place is None:
            return
        where = {**place, "platform": platform}
        if self._noted.get(own) == where:
            self._noted.move_to_end(own)
            return
        NoticeFile(self._workspaces.get(person).root).note_place(own, where)
        self._noted[own] = where
        while len(self._noted) > MAX_PLACES:
            self._noted.popitem(last=False)

    async def tell(self, key: str, text: str) -> None:
        """A notice for `key`: on file in its person's workspace, then sent (background)."""
        person = self._resolve(key)
        moves = self._moves
        if moves is not None and not moves.here(person):
            await moves.notify(person, key, text)  # that person's worker writes and sends it
            return
        NoticeFile(self._workspaces.get(person).root).add(key, text)
        self.send_pending(person)

    def send_pending(self, person: str) -> None:
        """Send, in the background, every notice of the person not told yet."""
        task = asyncio.create_task(self._send(person))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def unsaid(self, own: str, person: str) -> list[tuple[str, str]]:
        """(id, text) of the notices for `own` still to be said (under its next answer)."""
        if not self._workspaces.exists(person):
            return []
        # By its path, opening nothing: an unsafe workspace is refused by the turn, which says so.
        pending = NoticeFile(self._workspaces.root_of(person)).pending(own)
        return [(ident, text) for ident, _, text in pending]

    def said(self, person: str, idents: list[str]) -> None:
        notices = NoticeFile(self._workspaces.get(person).root)
        for ident in idents:
            notices.told(ident)

    async def aclose(self) -> None:
        for task in list(self._sending):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._sending, return_exceptions=True)

    async def _send(self, person: str) -> None:
        if not self._workspaces.exists(person):
            return
        notices = NoticeFile(self._workspaces.get(person).root)
        places = notices.places()
        for ident, key, text in notices.pending():
            where = dict(places.get(key, {}))
            sender = self._senders.get(where.pop("platform", ""))
            if sender is None or not where:
                continue  # said under its next private answer
            try:
                await sender.send_to(where, Reply(text, private=True))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the platform away or refusing: the next answer
                log.info("could not tell %s of a link change now (%s); later", key, exc)
                continue
            if self._workspaces.exists(person):  # not wiped meanwhile
                notices.told(ident)
