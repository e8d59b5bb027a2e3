"""Who is whom, for the agent: /link and /unlink (the merge and the split of two people's
files), the moving of a person's files between cluster workers, and /wipe.

Every change is made with the person's files held still (bot.agent.residency.Residents), then
every holder of their state in RAM forgets them, to read the changed files again. A reminder
moving between keys is announced early before the change and put right after it, so a crash
leaves it early, never late (bot/reminders/index.py). docs/memory.md, "One memory on every
platform".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from functools import partial

from bot.agent.residency import Residents
from bot.agent.telling import Teller
from bot.chats import ChatBook
from bot.commands.linking import Codes, LinkPort, PersonMoves
from bot.commands.registry import parse_command
from bot.inbound import Inbound
from bot.outbound import Outbound, PassingOutbound
from bot.platform import Resender
from bot.reminders.desk import ReminderBook
from memory.control.link import (
    Merged,
    absorb,
    finish_pending,
    finish_shipping,
    merge,
    shipping_root,
    split,
)
from memory.control.notices import NoticeFile
from memory.control.wipe import delete, hide, sweep_wiped
from memory.links import LinkError, LinkTable, with_link, without_link
from memory.workspace import Workspaces

log = logging.getLogger(__name__)


class People:
    """The link table and its codes, the moves between workers (cluster mode), the notices to
    a person's other accounts, and the changes of who is whom."""

    def __init__(
        self,
        workspaces: Workspaces,
        residents: Residents,
        reminders: ReminderBook,
        chats: ChatBook,
        senders: dict[str, Resender],
        *,
        links: LinkTable,
        codes: Codes,
        moves: PersonMoves | None,
        writer: bool,
    ) -> None:
        """`links`, `codes`: the folder's (memory.links), or in cluster mode the cluster's,
        whose `moves` carry a person's files between workers. `senders`: the reminders', by
        platform, through which the other accounts are told of a link change."""
        self._workspaces = workspaces
        self._residents = residents
        self._reminders = reminders
        self._chats = chats
        self.links = links
        self.codes = codes
        self._moves = moves
        self.teller = Teller(workspaces, links.resolve, senders, moves)
        self._arriving: dict[str, asyncio.Task[None]] = {}  # arrive_soon's, by person
        self._change_lock = asyncio.Lock()  # one change of who is whom at a time (_changing)
        self._unsettled: dict[str, asyncio.Event] = {}  # accounts of the change being made
        if writer:
            sweep_wiped(workspaces.base_dir)  # what a crash mid-/wipe left behind
        if writer and moves is None:  # (a worker's: once the cluster's table is read)
            finish_pending(workspaces, links)  # what a crash mid-/link left undone
        if moves is not None:
            moves.when_arriving(self.arrive_soon)

    async def receive(self, inbound: Inbound, out: Outbound) -> tuple[Inbound, Outbound]:
        """A message as the person's: the key becomes its person's (the one place a platform's
        key becomes the key of the workspace it reads and writes: workspace, limits, usage,
        /privacy, confirmations all follow it; the session key stays the platform chat's), their
        arrived files taken first, and what their other accounts did said under the answer."""
        own = inbound.user_key
        while (changing := self._unsettled.get(own)) is not None:
            await changing.wait()  # a /link or /unlink of this account is being made
        inbound = replace(inbound, user_key=self.links.resolve(own))
        if self._moves is not None and self._moves.arriving(inbound.user_key):
            await self._take_arrivals(inbound.user_key)
        if inbound.is_private and inbound.place and _names_link(inbound.text):
            # Where this account can be told of a link change later (both sides of a link
            # send /link privately; a private chat's place rarely changes).
            self.teller.seen(own, inbound.user_key, inbound.platform, inbound.place)
        told = self.teller.unsaid(own, inbound.user_key) if inbound.is_private else []
        if told:
            person, idents = inbound.user_key, [ident for ident, _ in told]
            out = _WithNotices(out, told, lambda: self.teller.said(person, idents))
        return inbound, out

    def port(self, own: str) -> LinkPort:
        """What the link commands of the account `own` may do."""
        return LinkPort(
            own_key=own,
            members=lambda: self.links.members(own),
            resolve=self.links.resolve,
            codes=self.codes,
            join=lambda into: self.join(own, into),
            leave=self.leave,
            tell=self.teller.tell,
        )

    async def aclose(self) -> None:
        await self.teller.aclose()

    # ---- /link and /unlink (memory/links.py, memory/control/link.py) ------------------------

    async def join(self, member: str, into: str) -> Merged:
        """Join `member` (linked to nobody) to the person of `into`: its files are merged into
        that workspace with no turn of either running, then every holder of state in RAM
        forgets both, to read the merged files again. LinkError (nothing changed) when the
        table no longer allows it: checked again under the locks, since another change (the
        other side's /link confirm at the same moment) may have been made while this waited."""
        async with self._changing(member, into):
            home = self.links.resolve(into)
            _may_join(self.links, member, home)
            if self._moves is not None:
                change = partial(with_link, member=member, into=home)
                return await self._ship(self._moves, member, home, "join", change)
            async with self._residents.exclusive(member, home):
                _may_join(self.links, member, self.links.resolve(into))
                moving = self._reminders_moving((member, home))
                merged = await asyncio.to_thread(merge, self._workspaces, self.links, member, home)
                self._residents.forget(member)
                self._residents.forget(home, sessions=False)
                self._reminders_moved(moving)
        log.info("linked %s to the workspace of %s", member, home)
        return merged

    async def leave(self, member: str) -> list[str]:
        """Take `member` out of its person (it gets back what it had before the link); the keys
        left sharing it ([] when it was unlinked meanwhile)."""
        async with self._changing(member):
            home = self.links.resolve(member)
            others = [key for key in self.links.members(member) if key != member]
            if not others:
                return []  # unlinked meanwhile (by another account's /unlink)
            if self._moves is not None and member == home:
                heir = others[0]  # the workspace goes to the heir's worker
                change = partial(without_link, member=member, heir=heir)
                await self._ship(self._moves, member, heir, "split", change)
                return others
            async with self._residents.exclusive(home):
                moving = self._reminders_moving(self.links.members(member))
                stays = self._moves is not None  # cluster: its folder may be another worker's
                await asyncio.to_thread(
                    partial(split, reminders=not stays), self._workspaces, self.links, member
                )
                self._residents.forget(home)
                self._residents.forget(member)
                self._reminders_moved(moving)
        log.info("unlinked %s from the workspace of %s", member, home)
        return others

    @contextlib.asynccontextmanager
    async def unchanging(self) -> AsyncIterator[None]:
        """No change of who is whom (/link, /unlink, /wipe) is made during the block: a backup
        reading one person's folder after another sees each merge either whole or not at all.
        Taken before any person's files (as a change takes them), so it cannot deadlock."""
        async with self._change_lock:
            yield

    @contextlib.asynccontextmanager
    async def _changing(self, *keys: str) -> AsyncIterator[None]:
        """One change of who is whom at a time (every change reads the table, then writes it);
        meanwhile messages of the accounts it concerns wait in `receive` to be resolved, so none
        is taken for a person that is about to change."""
        async with self._change_lock:
            accounts = {key for own in keys for key in self.links.members(own)}
            settled = asyncio.Event()
            for key in accounts:
                self._unsettled[key] = settled
            try:
                yield
            finally:
                for key in accounts:
                    if self._unsettled.get(key) is settled:
                        del self._unsettled[key]
                settled.set()

    # Cluster mode: the worker of a key's partition stops writing it, packs its workspace and
    # changes the table in one write (from then on the ingresses send the key's messages to the
    # partition of `person`); the worker of that partition merges the files in before it
    # serves the person again (`_take_arrivals`).

    async def _ship(
        self,
        moves: PersonMoves,
        key: str,
        person: str,
        action: str,
        links: Callable[[dict[str, str]], dict[str, str]],
    ) -> Merged:
        async with self._residents.exclusive(key):
            moving = self._reminders_moving((key,))
            # Out of the way first (memory.control.link.finish_shipping puts a crash right).
            root = self._workspaces.root_of(key)
            hidden = shipping_root(self._workspaces, key, action)
            with contextlib.suppress(FileNotFoundError):
                os.rename(root, hidden)
            self._residents.forget(key)
            try:
                await moves.ship(hidden, person, links)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.rename(hidden, root)  # not shipped: the key keeps its memory here
                raise
            await asyncio.to_thread(delete, hidden)
            self._reminders_moved(moving)
        log.info("%s: its workspace goes to the worker of %s", key, person)
        return Merged()

    def finish_shipping(self) -> None:
        """Cluster mode, once the cluster's table is read and before serving (in a thread: the
        table changes through the loop): what a crash mid-/link or mid-shipment left (_ship)."""
        finish_pending(self._workspaces, self.links)
        finish_shipping(self._workspaces, self.links)

    async def _take_arrivals(self, person: str) -> None:
        moves = self._moves
        assert moves is not None
        async with self._residents.exclusive(person):
            if not moves.arriving(person):
                return  # another message of theirs took them first
            moving = self._reminders_moving((person,))
            arrived = await moves.arrivals(person)
            for name, data in arrived:
                if name.startswith("notice:"):  # for one of the person's keys: on file first
                    notice = json.loads(data)
                    root = self._workspaces.get(person).root
                    NoticeFile(root).add(notice["to"], notice["text"])
                elif data:
                    await asyncio.to_thread(absorb, self._workspaces, data, person)
            self._residents.forget(person, sessions=False)
            self._reminders_moved(moving)
            await moves.arrived(person, [name for name, _ in arrived])
        self.teller.send_pending(person)
        log.info("took %d arrival(s) for %s (workspaces, notices)", len(arrived), person)

    def arrive_soon(self, person: str) -> None:
        """Cluster mode: files or notices for a person of this worker arrived in the shared
        table: taken now (each person once at a time), not at their next message."""
        if person in self._arriving:
            return
        task = asyncio.get_running_loop().create_task(self._take_arrivals(person))
        self._arriving[person] = task

        def done(task: asyncio.Task[None]) -> None:
            self._arriving.pop(person, None)
            if not task.cancelled() and task.exception() is not None:
                log.warning("arrivals for %s: %s; taken at their next message", person,
                            task.exception())  # fmt: skip

        task.add_done_callback(done)

    def _reminders_moving(self, keys: Iterable[str]) -> list[str]:
        """Before a merge or split moves reminders between keys: each key that may hold them
        afterwards gets the soonest time of them all in the index, so a crash mid-way leaves it
        early, never late (bot/reminders/index.py); `_reminders_moved` puts it right."""
        keys = list(dict.fromkeys(keys))
        times = [due for key in keys if (due := self._reminders.earliest(key)) is not None]
        for key in keys if times else ():
            self._reminders.announce(key, min(times))
        return keys

    def _reminders_moved(self, keys: list[str]) -> None:
        for key in keys:
            self._reminders.refresh(key)

    # ---- /wipe ----------------------------------------------------------------------------

    async def erase(self, user_key: str) -> bool:
        """/wipe: the user's folder (every session of theirs, groups included) and everything
        kept about them in memory; pending consolidation is cancelled, running turns finish
        first. The next message of theirs starts as a stranger's would."""
        async with self._changing(user_key), self._residents.exclusive(user_key, cancel=True):
            hidden = hide(self._workspaces.root_of(user_key))  # from here on they have nothing
            self._residents.forget(user_key)
            # A shared workspace: every linked key is free (off the loop: in cluster mode the
            # change is a round trip to NATS, which waits for the loop).
            await asyncio.to_thread(self.links.drop_person, user_key)
            self._chats.forget_owner(user_key)  # their private chats' personas
            await self._chats.saved()  # (off the disk too: the chats' log rewritten without them)
        if hidden is not None:
            await asyncio.to_thread(delete, hidden)
        return hidden is not None


def _may_join(links: LinkTable, member: str, home: str) -> None:
    """LinkError unless `member` is a key of its own and `home` another person's."""
    if member == home or links.is_linked(member):
        raise LinkError(f"{member} is linked already ({', '.join(links.members(member))})")


def _names_link(text: str) -> bool:
    command = parse_command(text)
    return command is not None and command.name in ("link", "unlink")


class _WithNotices(PassingOutbound):
    """An Outbound that says, under the answer, what happened elsewhere (a link made or
    removed by another platform's account of the person)."""

    def __init__(
        self, out: Outbound, notices: list[tuple[str, str]], said: Callable[[], None]
    ) -> None:
        super().__init__(out)
        self._notices = [text for _, text in notices]
        self._said = said  # marked told once the answer is given

    async def finish(self) -> None:
        await self._out.add_text("\n\n" + "\n".join(self._notices))
        await self._out.finish()
        self._said()
