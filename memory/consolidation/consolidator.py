"""Consolidation: fold old turns into MEMORY.md and HISTORY.md so the prompt stays in the window.

This module is the loop: which chunk of a session is consolidated (up to a valid boundary, in
pieces when one turn is too big for a request), down to a target, one session at a time. A
session whose chunk keeps failing is raw-archived after `max_failures` attempts so the prompt
cannot grow without bound; the JSONL keeps every message regardless. Each attempt (the request,
its checks, the writing) is memory/consolidation/asking.py's; when to consolidate is the bot's
(bot/agent/consolidating.py).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from memory import clock
from memory.consolidation.asking import MemoryWriter, format_messages, kept, message_time
from memory.consolidation.boundary import pick_boundary, valid_ends
from memory.consolidation.budget import Budget, Shares
from memory.llm import ChatLLM
from memory.session import HIDDEN
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, SpanCounts, TokenEstimator

if TYPE_CHECKING:
    from memory.session import Session
    from memory.workspace import Workspace

log = logging.getLogger(__name__)


class MemoryConsolidator:
    """Keeps each session's prompt under the window by consolidating its oldest turns.

    `answer_tokens` and `margin_tokens` are the answer's share of the window and the room kept
    for estimate error (see memory.consolidation.budget): a prompt "fits" when prompt + answer +
    margin does. `shares`: the bot's own (then the figures before are not used), so that a
    window learnt later is seen here without being told twice.
    """

    def __init__(
        self,
        llm: ChatLLM,
        estimator: TokenEstimator,
        context_window_tokens: int = 0,
        *,
        answer_tokens: int = 0,
        margin_tokens: int = 0,
        max_rounds: int = 5,
        max_failures: int = 3,
        memory_budget_tokens: int = 0,
        shares: Shares | None = None,
    ) -> None:
        self.llm = llm
        self.estimator = estimator
        budget = Budget(context_window_tokens, answer_tokens, margin_tokens)
        self.shares = shares or Shares(budget, max(0, memory_budget_tokens))
        self.max_rounds = max_rounds
        self.max_failures = max_failures
        self._last_consolidated: dict[tuple[str, str], str] = {}  # (user, session) → when
        # Keyed by (user key, session key): two users never share a lock or a failure count.
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._failures: dict[tuple[str, str], int] = {}
        # Told "consolidated" or "raw_archive" after each chunk (the bot counts them).
        self.on_outcome: Callable[[str], None] = lambda outcome: None
        # A span done in pieces: (start, end, pieces done), so a retry never repeats a piece.
        self._pieces_done: dict[tuple[str, str], tuple[int, int, int]] = {}
        # Each message's tokens as a line of the request, counted once per message.
        self._lines = SpanCounts(self._line_tokens)
        # One attempt: the request, the checks, the writing (asking.py).
        self.writer = MemoryWriter(llm, estimator, self.shares)

    @property
    def budget(self) -> Budget:
        return self.shares.budget

    @property
    def window(self) -> int:
        return self.budget.window

    @window.setter
    def window(self, tokens: int) -> None:
        self.shares.budget = replace(self.budget, window=tokens)

    @property
    def memory_budget(self) -> int:
        """Tokens MEMORY.md may take: as configured, else a share of the window (budget.py)."""
        return self.writer.memory_budget

    def memory_tokens(self, memory: str) -> int:
        """About how many tokens `memory` takes in a prompt."""
        return self.writer.memory_tokens(memory)

    def _id(self, workspace: Workspace, session: Session) -> tuple[str, str]:
        return (workspace.user_key, session.key)

    def _lock(self, workspace: Workspace, session: Session) -> asyncio.Lock:
        return self._locks.setdefault(self._id(workspace, session), asyncio.Lock())

    def busy(self, user_key: str, session_key: str) -> bool:
        """Whether a consolidation of this session runs or is pending (a failed attempt to be
        retried, a span done in part): its state must not be dropped."""
        key = (user_key, session_key)
        lock = self._locks.get(key)
        running = lock is not None and lock.locked()
        return running or key in self._failures or key in self._pieces_done

    def last_consolidated_at(self, user_key: str, session_key: str) -> str | None:
        """When this session was last consolidated since start-up (UTC, ISO), if it was."""
        return self._last_consolidated.get((user_key, session_key))

    def forget(self, user_key: str, session_key: str) -> None:
        """Drop what is kept about an idle session (its lock, when it was last consolidated)."""
        self._locks.pop((user_key, session_key), None)
        self._last_consolidated.pop((user_key, session_key), None)

    def forget_user(self, user_key: str) -> None:
        """Drop everything kept about a person (/wipe, or they left RAM): locks, failure
        counts, pieces done, when their sessions were consolidated."""
        for table in (self._locks, self._failures, self._pieces_done, self._last_consolidated):
            for key in [k for k in table if k[0] == user_key]:
                del table[key]

    def failures(self, workspace: Workspace, session: Session) -> int:
        """Consecutive failed attempts on this session (for /status and tests)."""
        return self._failures.get(self._id(workspace, session), 0)

    def fixed_tokens(self, system_prompt: str) -> int:
        """The part of every turn's prompt that consolidation cannot shrink (system, tools)."""
        return self.estimator.corrected(
            MESSAGE_OVERHEAD + self.estimator.count_text(system_prompt) + REPLY_PRIMING
        )

    def target_tokens(self, system_prompt: str) -> int:
        return self.budget.target(self.fixed_tokens(system_prompt))

    # -- the loop -------------------------------------------------------------------------------

    async def maybe_consolidate(
        self,
        workspace: Workspace,
        session: Session,
        system_prompt: Callable[[], str],
        *,
        force: bool = False,
        due: Callable[[int], bool] | None = None,
    ) -> int:
        """Consolidate when the prompt is due, down to the target (≤ max_rounds).

        `due`: whether a prompt of so many tokens is consolidated now (the bot's policy,
        bot/agent/consolidating.py); by default, when it does not fit the window. `force`: the
        provider rejected a prompt we estimated as fitting; shed at least half of the
        conversation anyway. Returns the number of rounds that advanced the cursor. A failed
        round stops the loop: the next turn tries again (and the failure count leads to a raw
        archive eventually).
        """
        if self.window <= 0:
            return 0
        async with self._lock(workspace, session):
            await self.estimator.warm(session)  # a backlog is counted in a thread, once
            await self._lines.warm(session)
            prompt = system_prompt()
            estimate = self.estimator.prompt_tokens(prompt, session)
            if not (due or self._unsendable)(estimate) and not force:
                return 0
            fixed = self.fixed_tokens(prompt)
            target = self.budget.target(fixed)
            if force:
                target = min(target, fixed + (estimate - fixed) // 2)
            rounds = 0
            while rounds < self.max_rounds and estimate > target:
                start = session.last_consolidated
                to_shed = math.ceil((estimate - target) / self.estimator.factor)
                base = session.offset  # session.messages[0] is message `base`
                sums = self.estimator.messages.sums(session)  # by index into session.messages

                def tokens(s: int, e: int, sums: list[int] = sums) -> int:
                    return sums[e] - sums[s]

                end = pick_boundary(session.messages, start - base, to_shed, tokens)
                if end is None:
                    log.info("the prompt is over the window but only the newest turn is left")
                    break
                if not await self._consolidate_span(workspace, session, end + base):
                    break
                rounds += 1
                estimate = self.estimator.prompt_tokens(system_prompt(), session)
            return rounds

    def _unsendable(self, prompt_tokens: int) -> bool:
        return not self.budget.fits(prompt_tokens)

    def within_reach(self, memory: str, prompt: str, session: Session) -> bool:
        """Whether the rounds of one maybe_consolidate (max_rounds requests) shed what the
        prompt is over its target; else it is a backlog (a migrated transcript, a long outage),
        to be worked through in the background while the person is answered from the newest
        messages (tail_start)."""
        estimate = self.estimator.prompt_tokens(prompt, session)
        to_shed = (estimate - self.target_tokens(prompt)) / self.estimator.factor
        return to_shed <= self.max_rounds * self._chunk_room(memory)

    def tail_start(self, session: Session, prompt: str) -> int:
        """The first message of the newest turns that fit the window's target beside `prompt`
        (a user message; the newest one if even that turn alone is over)."""
        base = session.offset
        starts = [e + base for e in valid_ends(session.messages, session.last_consolidated - base)]
        if not starts:
            return session.last_consolidated
        target = self.target_tokens(prompt)
        found = bisect.bisect_left(
            starts, True, key=lambda s: self.estimator.prompt_tokens(prompt, session, s) <= target
        )
        return starts[min(found, len(starts) - 1)]

    async def _consolidate_span(self, workspace: Workspace, session: Session, end: int) -> bool:
        """Consolidate up to `end`, or less when that chunk would not fit one request; a first
        turn too big for any request goes in pieces. True if the cursor advanced."""
        start = session.last_consolidated
        if min(end, session.total) <= start:
            return False  # someone else already got there
        room = self._chunk_room(workspace.memory.read())
        ends = [e for e in _valid_ends(session, start) if e <= end]
        fitting = self._fitting(session, start, ends, room)
        if fitting is not None:
            return await self._consolidate_chunk(workspace, session, fitting)
        return await self._consolidate_pieces(workspace, session, ends[0], room)

    def _fitting(self, session: Session, start: int, ends: list[int], room: int) -> int | None:
        """The largest of `ends` (ascending) whose chunk from `start` fits one request."""
        found = bisect.bisect_right(ends, room, key=lambda e: self._lines.tokens(session, start, e))
        return ends[found - 1] if found else None

    async def _consolidate_chunk(self, workspace: Workspace, session: Session, end: int) -> bool:
        start = session.last_consolidated
        chunk = kept(session.span(start, end))
        if not chunk:  # only withdrawn or superseded messages: nothing to file
            workspace.sessions.set_last_consolidated(session, end)
            return True
        if await self.writer.save(workspace, chunk):
            self._succeeded(workspace, session, end)
            return True
        if not self._failed_too_often(workspace, session):
            return False
        self._raw_archive(workspace, session, chunk, end)
        return True

    async def _consolidate_pieces(
        self, workspace: Workspace, session: Session, end: int, room: int
    ) -> bool:
        """messages[start:end] is one turn too big for a request: one request per piece that
        fits; a message too big on its own is archived verbatim, with a note saying why."""
        key = self._id(workspace, session)
        start = session.last_consolidated
        pieces = self._pieces(kept(session.span(start, end)), room)
        done = self._pieces_done.get(key, (start, end, 0))
        first = done[2] if done[:2] == (start, end) else 0
        for index in range(first, len(pieces)):
            piece, too_big = pieces[index]
            if too_big:
                note = (
                    f"(kept verbatim: about {self._line_tokens(piece[0]):,} tokens, more than "
                    f"a consolidation request can hold, about {room:,})"
                )
                workspace.memory.append_history(
                    f"[RAW] 1 messages\n{note}\n{format_messages(piece)}",
                    when=message_time(piece[0]),
                )
                log.warning("a message too long to summarise was archived verbatim")
                self.on_outcome("raw_archive")
            elif not await self.writer.save(workspace, piece):
                self._pieces_done[key] = (start, end, index)
                if not self._failed_too_often(workspace, session):
                    return False
                rest = [m for p, _ in pieces[index:] for m in p]
                self._pieces_done.pop(key, None)
                self._raw_archive(workspace, session, rest, end)
                return True
            self._pieces_done[key] = (start, end, index + 1)
        self._pieces_done.pop(key, None)
        self._succeeded(workspace, session, end)
        return True

    def _pieces(
        self, messages: list[dict[str, Any]], room: int
    ) -> list[tuple[list[dict[str, Any]], bool]]:
        """Consecutive runs of messages each fitting `room`; (run, too big for any request)."""
        pieces: list[tuple[list[dict[str, Any]], bool]] = []
        run: list[dict[str, Any]] = []
        used = 0
        for message in messages:
            size = self._line_tokens(message)
            if run and used + size > room:
                pieces.append((run, False))
                run, used = [], 0
            if size > room:
                pieces.append(([message], True))
                continue
            run.append(message)
            used += size
        if run:
            pieces.append((run, False))
        return pieces

    def _failed_too_often(self, workspace: Workspace, session: Session) -> bool:
        key = self._id(workspace, session)
        self._failures[key] = self._failures.get(key, 0) + 1
        if self._failures[key] >= self.max_failures:
            return True
        log.warning(
            "consolidation failed (%d of %d before a raw archive)",
            self._failures[key],
            self.max_failures,
        )
        return False

    async def archive_all(self, workspace: Workspace, session: Session) -> None:
        """For /new: consolidate everything not yet consolidated, however it ends.

        In as few requests as fit the window (one when it all fits), up to max_failures
        attempts each, then a raw archive; the cursor ends at len(messages).
        """
        async with self._lock(workspace, session):
            await self._lines.warm(session)
            while session.last_consolidated < session.total:
                start, end = session.last_consolidated, session.total
                room = self._chunk_room(workspace.memory.read())
                fits = self._lines.tokens(session, start, end) <= room
                if not fits:
                    ends = _valid_ends(session, start)
                    fitting = self._fitting(session, start, ends, room)
                    fits = fitting is not None
                    end = fitting if fitting is not None else ends[0] if ends else end
                await self._archive_span(workspace, session, end, room, fits)

    async def _archive_span(
        self, workspace: Workspace, session: Session, end: int, room: int, fits: bool
    ) -> None:
        """Attempts until the cursor reaches `end` (a raw archive after max_failures); back to
        the caller, to measure the span again, when a refusal told a smaller window."""
        budget = self.budget
        while session.last_consolidated < end and self.budget == budget:
            if fits:
                await self._consolidate_chunk(workspace, session, end)
            else:
                await self._consolidate_pieces(workspace, session, end, room)

    # -- sizes ----------------------------------------------------------------------------------

    def _line_tokens(self, message: dict[str, Any], remember: bool = True) -> int:
        """Raw tokens of one message as the consolidation request shows it (one line; none
        for a message withdrawn or superseded, which is never filed)."""
        if message.get(HIDDEN):
            return 0
        return self.estimator.count_text(format_messages([message]), remember) + 1

    def _chunk_room(self, current: str) -> int:
        return self.writer.chunk_room(current)

    # -- one attempt ----------------------------------------------------------------------------

    def _succeeded(self, workspace: Workspace, session: Session, end: int) -> None:
        workspace.sessions.set_last_consolidated(session, end)
        self._failures.pop(self._id(workspace, session), None)
        self._last_consolidated[(workspace.user_key, session.key)] = clock.iso()
        self.on_outcome("consolidated")

    def _raw_archive(
        self, workspace: Workspace, session: Session, chunk: list[dict[str, Any]], end: int
    ) -> None:
        """Give up on summarising: keep the chunk verbatim in HISTORY.md and move on."""
        entry = f"[RAW] {len(chunk)} messages\n{format_messages(chunk)}"
        workspace.memory.append_history(entry)  # dated now, like every undated entry
        workspace.sessions.set_last_consolidated(session, end)
        self._failures.pop(self._id(workspace, session), None)
        log.warning("consolidation kept failing: %d messages archived raw", len(chunk))
        self.on_outcome("raw_archive")


def _valid_ends(session: Session, start: int) -> list[int]:
    """Boundary.valid_ends by absolute index (the session holds its tail only)."""
    base = session.offset
    return [end + base for end in valid_ends(session.messages, start - base)]
