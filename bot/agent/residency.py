"""Which sessions are held in RAM, which are in use, and letting the idle ones go.

The agent keeps a session loaded (its messages, its workspace) while people talk. Beyond
`[memory] max_loaded_sessions` the least recently used idle ones leave RAM: never one being
handled, locked, or with consolidation running or pending. A person none of whose sessions is
loaded any more leaves RAM whole: every holder of per-user state forgets them, through the same
`forget_user` that /wipe uses. While a person's files are held still (`Residents.exclusive`:
/link's merge, /memory undo, /forget, /wipe) none of their turns, consolidations or reminders runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Protocol

from bot.agent.background import BackgroundWork
from bot.agent.prompt import FrozenPrompts
from bot.reminders.desk import ReminderBook
from memory.workspace import Workspaces


class PerUser(Protocol):
    """Anything that keeps state of a person in RAM: /wipe and idle eviction call this."""

    def forget_user(self, user_key: str) -> None: ...


def forget_everywhere(holders: Iterable[PerUser], user_key: str) -> None:
    """The one way a person leaves RAM: each holder drops what it keeps of them."""
    for holder in holders:
        holder.forget_user(user_key)


class SessionWork(Protocol):
    """Work on a session kept between turns (the consolidator's): it keeps the session loaded
    while it runs or is pending, and forgets the session when it leaves RAM."""

    def busy(self, user_key: str, session_key: str) -> bool: ...
    def forget(self, user_key: str, session_key: str) -> None: ...


class LoadedSessions:
    """Session locks, the sessions each person used, and least-recently-used eviction."""

    def __init__(
        self,
        max_loaded: int,
        *,
        busy: Callable[[str, str], bool],
        drop_session: Callable[[str, str], None],
        drop_user: Callable[[str], bool],
    ) -> None:
        """`busy(user, session)`: work elsewhere holds it (consolidation, background);
        `drop_session`: let one session go; `drop_user`: let the person go once none of their
        sessions is loaded (False: they still hold something, e.g. a lock)."""
        self._max = max_loaded
        self._busy_elsewhere = busy
        self._drop_session = drop_session
        self._drop_user = drop_user
        self._locks: dict[str, asyncio.Lock] = {}
        # Session keys each user has used since start-up (a new one may have no file yet).
        self._user_sessions: dict[str, set[str]] = {}
        # (user key, session key) of the sessions loaded, least recently used first; and the
        # messages being handled for each.
        self._loaded: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._handling: Counter[tuple[str, str]] = Counter()
        self._handling_users: Counter[str] = Counter()

    def lock(self, session_key: str) -> asyncio.Lock:
        return self._locks.setdefault(session_key, asyncio.Lock())

    def note(self, user_key: str, session_key: str) -> None:
        """The person used this session (a command may run before it has a file)."""
        self._user_sessions.setdefault(user_key, set()).add(session_key)

    def known_sessions(self, user_key: str) -> set[str]:
        return set(self._user_sessions.get(user_key, ()))

    def handling_user(self, user_key: str) -> bool:
        return user_key in self._handling_users

    @contextlib.contextmanager
    def handling(self, user_key: str, session_key: str) -> Iterator[None]:
        """One message of this session is being handled; afterwards it is the most recently
        used, and the idle ones beyond the limit go."""
        loaded = (user_key, session_key)
        self._handling[loaded] += 1
        self._handling_users[user_key] += 1
        try:
            yield
        finally:
            self._handling[loaded] -= 1
            if not self._handling[loaded]:
                del self._handling[loaded]
            self._handling_users[user_key] -= 1
            if not self._handling_users[user_key]:
                del self._handling_users[user_key]
            self._loaded[loaded] = None
            self._loaded.move_to_end(loaded)
            self.evict_idle()

    def evict_idle(self) -> None:
        """Drop the least recently used idle sessions beyond the limit; busy ones move to the
        recent end instead."""
        skipped = 0
        while len(self._loaded) > self._max and skipped < len(self._loaded):
            user_key, session_key = key = next(iter(self._loaded))
            if self._busy(user_key, session_key):
                self._loaded.move_to_end(key)
                skipped += 1
                continue
            del self._loaded[key]
            self._locks.pop(session_key, None)
            self._drop_session(user_key, session_key)
            keys = self._user_sessions.get(user_key)
            if keys is not None:
                keys.discard(session_key)
                if not keys:
                    del self._user_sessions[user_key]
            if user_key not in self._handling_users:
                self._drop_user(user_key)

    def forget_user(self, user_key: str) -> None:
        """After /wipe: the sessions they used are not theirs any more (locks stay, a running
        turn may hold one; unused ones go with eviction)."""
        self._user_sessions.pop(user_key, None)
        for key in [k for k in self._loaded if k[0] == user_key]:
            del self._loaded[key]

    def _busy(self, user_key: str, session_key: str) -> bool:
        lock = self._locks.get(session_key)
        return (
            (user_key, session_key) in self._handling
            or (lock is not None and lock.locked())
            or self._busy_elsewhere(user_key, session_key)
        )


class Residents:
    """The people held in RAM: their loaded sessions (`sessions`), every holder of their state
    (`holders`), how they leave it (idle, or forgotten at once), and their files held still."""

    def __init__(
        self,
        workspaces: Workspaces,
        max_loaded: int,
        *,
        holders: tuple[PerUser, ...],
        work: SessionWork,
        background: BackgroundWork,
        prompts: FrozenPrompts,
        reminders: ReminderBook,
    ) -> None:
        """`holders`: everything that keeps state of a person in RAM (the workspaces among
        them): /wipe, /link and idle eviction alike make each forget them."""
        self._workspaces = workspaces
        self._holders = holders
        self._work = work
        self._background = background
        self._prompts = prompts
        self._reminders = reminders
        self.sessions = LoadedSessions(
            max_loaded, busy=self._busy, drop_session=self._drop_session, drop_user=self._drop_idle
        )

    def forget(self, user_key: str, *, sessions: bool = True) -> None:
        """Every holder drops what it keeps of the person; `sessions`: the sessions they used
        too (their files went, or are another person's now)."""
        forget_everywhere((*self._holders, self.sessions) if sessions else self._holders, user_key)

    @contextlib.asynccontextmanager
    async def exclusive(
        self, *user_keys: str, cancel: bool = False, reading: bool = False
    ) -> AsyncIterator[None]:
        """No turn, consolidation, MEMORY.md write or reminder send of these users runs inside
        the block.

        Takes every session lock of the users (known since start-up or with a file), after their
        background consolidation has finished (cancel=True: been cancelled), then the
        workspaces' memory locks, then their reminders' locks; locks are always taken in that
        order (as a turn takes them; the scheduler holds only the last while it sends), each
        kind sorted, and each lock once even when two users name the same session (a merge
        just moved it), so this cannot deadlock with a turn, another exclusive(), or itself.
        On the way out, what was derived from the users' files (frozen system prompts,
        message-id indexes) is dropped, to be rebuilt from the disk, unless `reading`: the
        block only read them (a backup)."""
        keys = sorted(set(user_keys))
        held: list[asyncio.Lock] = []
        locked: set[str] = set()
        try:
            with self._background.holding(keys):
                await self._take_sessions(keys, held, locked, cancel=cancel)
            async with contextlib.AsyncExitStack() as stack:
                for key in keys:
                    await stack.enter_async_context(self._workspaces.get(key).memory_lock)
                for key in keys:
                    await stack.enter_async_context(self._reminders.lock(key))
                yield
        finally:
            for key in keys if not reading else ():
                self._prompts.forget_sessions(key, locked)
            for lock in held:
                lock.release()

    async def _take_sessions(
        self, keys: list[str], held: list[asyncio.Lock], locked: set[str], *, cancel: bool
    ) -> None:
        """Every session lock of `keys`, once their background work has ended (no new
        consolidation of theirs begins meanwhile: BackgroundWork.holding)."""
        while True:
            pending = [task for key in keys for task in self._background.of(key)]
            if pending:
                for task in pending if cancel else ():
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                continue
            todo = sorted(set().union(*(self._sessions_of(key) for key in keys)) - locked)
            if not todo:
                return
            for key in todo:
                lock = self.sessions.lock(key)
                await lock.acquire()
                held.append(lock)
                locked.add(key)

    def _sessions_of(self, user_key: str) -> set[str]:
        keys = self.sessions.known_sessions(user_key)
        if self._workspaces.exists(user_key):
            keys.update(self._workspaces.get(user_key).sessions.keys())
        return keys

    # ---- bounded RAM: idle sessions leave it ------------------------------------------------

    def _busy(self, user_key: str, session_key: str) -> bool:
        return self._work.busy(user_key, session_key) or self._background.has(user_key)

    def _drop_session(self, user_key: str, session_key: str) -> None:
        self._prompts.forget_sessions(user_key, {session_key})
        self._work.forget(user_key, session_key)
        workspace = self._workspaces.cached(user_key)
        if workspace is not None:
            workspace.sessions.evict(session_key)

    def _drop_idle(self, user_key: str) -> bool:
        """The person leaves RAM once none of their sessions is loaded and nothing holds their
        memory; the holders of per-user state forget them as /wipe makes them."""
        workspace = self._workspaces.cached(user_key)
        if workspace is None:
            return True
        if workspace.memory_lock.locked() or workspace.sessions.loaded():
            return False
        self.forget(user_key, sessions=False)
        return True
