"""Consolidation: fold old turns into MEMORY.md and HISTORY.md so the prompt stays in the window.

The model is asked to call `save_memory` with a history paragraph and the complete new
MEMORY.md. Providers differ: some reject a forced tool_choice (HTTP 400), some ignore it and
answer in prose, so a second attempt uses "auto". A tool answer the checks refuse, or none at
all, is asked once more in plain text (memory/consolidation/plain.py: a paragraph and fact
lines that code merges into MEMORY.md, adding only); after LEAD_AFTER refusals in a row of the
way asked first, the other way is asked first (small models never manage the tool). A session
whose chunk keeps failing both ways is raw-archived after `max_failures` attempts so the prompt
cannot grow without bound; the JSONL keeps every message regardless.

MEMORY.md has a budget (`memory_budget_tokens`, by default a share of the window: budget.py):
the request states it and the current size, and an update over it gets one request to condense.
What is refused, held or written, in which order, is memory.consolidation.checks' docstring.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory import clock
from memory.consolidation.boundary import pick_boundary, valid_ends
from memory.consolidation.budget import HISTORY_ENTRY_TOKENS, Budget, Shares, memory_budget
from memory.consolidation.checks import (
    check_history_entry,
    check_memory_update,
    echo_fragments,
    held_because,
    kept_fact_lines,
)
from memory.consolidation.plain import (
    PLAIN_ASK,
    PLAIN_SYSTEM,
    checked,
    merged,
    parse_plain,
    plain_request,
)
from memory.llm import ChatLLM, ChatResult, LLMBadRequest, LLMContextOverflow, LLMError
from memory.media import is_ref, ref_text
from memory.session import HIDDEN, reply_context
from memory.store import MEMORY_TEMPLATE, SECTIONS
from memory.text import valid_text
from memory.threads import in_thread
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, SpanCounts, TokenEstimator

if TYPE_CHECKING:
    from memory.session import Session
    from memory.workspace import Workspace

log = logging.getLogger(__name__)

SAVE_MEMORY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "save_memory",
        "description": "Save what this part of the conversation taught you about the user.",
        "parameters": {
            "type": "object",
            "properties": {
                "history_entry": {
                    "type": "string",
                    "description": (
                        "One paragraph starting with [YYYY-MM-DD HH:MM] that summarises what "
                        "happened, with the names, numbers and keywords someone would grep for."
                    ),
                },
                "memory_update": {
                    "type": "string",
                    "description": (
                        "The complete new MEMORY.md: every fact already there that still holds, "
                        "plus the new ones, under its ## sections."
                    ),
                },
            },
            "required": ["history_entry", "memory_update"],
        },
    },
}

SYSTEM_PROMPT = (
    "You are a memory consolidation agent. You read a part of a conversation between a user "
    "and an assistant and call the save_memory tool exactly once.\n"
    "- history_entry: one paragraph starting with the timestamp [YYYY-MM-DD HH:MM] of the "
    "conversation, saying what happened and what was decided, with the concrete names, numbers "
    "and keywords someone would later search for.\n"
    "- memory_update: the complete new MEMORY.md. Keep every existing fact that still holds, "
    "add durable facts about the user (who they are, preferences, projects, important notes), "
    "correct facts the conversation contradicts, and keep the sections "
    + ", ".join(f"## {name}" for name in SECTIONS)
    + ". If nothing new was learned, return the current memory unchanged."
)

_FORCED_CHOICE = {"type": "function", "function": {"name": "save_memory"}}
# The two ways of asking: the seed's save_memory tool call, and plain text (plain.py).
TOOL_WAY, TEXT_WAY = "save_memory", "plain text"
LEAD_AFTER = 2  # refusals in a row of the way asked first, before the other way leads
PLAIN_ANSWER_TOKENS = 400  # a paragraph and a dozen fact lines

CONDENSE_PROMPT = (
    "You shorten a user's MEMORY.md so that it fits its size budget. Answer with the complete "
    "shortened MEMORY.md and nothing else. Keep the sections "
    + ", ".join(f"## {name}" for name in SECTIONS)
    + ". Keep each fact on its own line: shorten the wording, drop repetition and what "
    "matters least, and never invent anything."
)
_FENCE = re.compile(r"^```[\w-]*\n(.*?)\n?```$", re.S)


@dataclass(frozen=True)
class MemoryEvent:
    """What the person should hear about their memory after a consolidation (plain data: the
    bot words it). "held": an update was held back (`dropped` of `facts` fact lines);
    "over_budget": MEMORY.md was written over its budget (`tokens` of `budget`)."""

    kind: str
    tokens: int = 0
    budget: int = 0
    dropped: int = 0
    facts: int = 0


def _content_text(content: Any) -> str:
    """Message content as one line of text (parts joined, line breaks folded).

    One line per message keeps HISTORY.md entries intact: a blank line inside a message must
    not read as the end of an entry, nor a line starting with "[2024-…" as the start of one.
    """
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif is_ref(part):
                pieces.append(ref_text(part))  # a picture as "[image: caption]"
            elif isinstance(part, dict):
                pieces.append(f"[{part.get('type', 'part')}]")
            else:
                pieces.append(str(part))
        text = " ".join(piece for piece in pieces if piece)
    else:
        text = json.dumps(content, ensure_ascii=False, default=str)
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()


def _tool_names(message: dict[str, Any]) -> list[str]:
    names = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        names.append(str(name or "?"))
    return names


def format_messages(messages: list[dict[str, Any]]) -> str:
    """One line per message: `[{timestamp[:16]}] {ROLE} [tools: a, b]: {content}`, a reply
    with what it replied to; withdrawn and superseded messages are left out."""
    lines = []
    for message in _kept(messages):
        stamp = str(message.get("timestamp") or "?")[:16]
        role = str(message.get("role") or "?").upper()
        names = _tool_names(message)
        tools = f" [tools: {', '.join(names)}]" if names else ""
        said = _content_text(reply_context(message) + _content_text(message.get("content")))
        lines.append(f"[{stamp}] {role}{tools}: {said}")
    return "\n".join(lines)


def _kept(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages still in the conversation (not withdrawn by /undo nor replaced by /retry)."""
    return [message for message in messages if not message.get(HIDDEN)]


def _as_object(arguments: Any) -> dict[str, Any] | None:
    """The arguments as a dict: given as a dict, a JSON string (maybe twice encoded), or a list.

    Parsed with strict=False: some servers' grammars let raw newlines and tabs into strings."""
    for _ in range(3):
        if isinstance(arguments, dict):
            return arguments
        if isinstance(arguments, list):
            arguments = next((a for a in arguments if isinstance(a, dict | str)), None)
        elif isinstance(arguments, str):
            try:
                arguments = json.loads(arguments, strict=False)
            except ValueError:
                return None
        else:
            return None
    return arguments if isinstance(arguments, dict) else None


def parse_save_memory(result: ChatResult) -> tuple[str, str] | None:
    """(history_entry, memory_update) from the reply's save_memory call; None if unusable."""
    call = next((c for c in result.tool_calls if c.name == "save_memory"), None)
    if call is None:
        return None
    args = _as_object(call.arguments)
    if args is None:
        return None
    entry, memory = args.get("history_entry"), args.get("memory_update")
    if not isinstance(entry, str) or not isinstance(memory, str):
        return None
    if not entry.strip() or not memory.strip():
        return None
    # A "\\ud83d" escape in the JSON decodes to a lone surrogate that no file write could take.
    entry, memory = valid_text(entry), valid_text(memory)
    # A blank line ends a HISTORY.md entry: keep the paragraph in one piece.
    entry = re.sub(r"\n\s*\n", "\n", entry.strip())
    return entry, memory.strip() + "\n"


def _message_time(message: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(message.get("timestamp")))
    except ValueError:
        return None


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
        self._echoes = echo_fragments(SYSTEM_PROMPT, *_descriptions(SAVE_MEMORY_TOOL))
        self._condense_echoes = echo_fragments(CONDENSE_PROMPT)
        self._plain_echoes = echo_fragments(PLAIN_SYSTEM, PLAIN_ASK)
        # Each message's tokens as a line of the request, counted once per message.
        self._lines = SpanCounts(self._line_tokens)
        # Which way this server answers: the seed's first, until it has been refused
        # LEAD_AFTER times in a row while the other way worked (one consolidator per server).
        self.ways: tuple[str, str] = (TOOL_WAY, TEXT_WAY)
        self._refused_in_a_row = 0
        # Told the way of each chunk consolidated (the bench counts them).
        self.on_way: Callable[[str], None] = lambda way: None
        # Told the window a server named refusing a request as too long (the agent plans
        # again from it, as from a turn's refusal).
        self.on_window: Callable[[int], object] = lambda tokens: None
        # Told what the person should hear about their memory (bot/agent/consolidating.py
        # keeps it until their next answer): an update held back, MEMORY.md over its budget.
        self.on_event: Callable[[str, MemoryEvent], object] = lambda user_key, event: None

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
        return memory_budget(self.window, self.shares.memory)

    def memory_tokens(self, memory: str) -> int:
        """About how many tokens `memory` takes in a prompt."""
        return math.ceil(self.estimator.count_text(memory) * self.estimator.factor)

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
    ) -> int:
        """Consolidate while the prompt does not fit, down to the target (≤ max_rounds).

        `force`: the provider rejected a prompt we estimated as fitting; shed at least half of
        the conversation anyway. Returns the number of rounds that advanced the cursor. A failed
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
            if self.budget.fits(estimate) and not force:
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
        chunk = _kept(session.span(start, end))
        if not chunk:  # only withdrawn or superseded messages: nothing to file
            workspace.sessions.set_last_consolidated(session, end)
            return True
        if await self._save(workspace, chunk):
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
        pieces = self._pieces(_kept(session.span(start, end)), room)
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
                    when=_message_time(piece[0]),
                )
                log.warning("a message too long to summarise was archived verbatim")
                self.on_outcome("raw_archive")
            elif not await self._save(workspace, piece):
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

    def _told_window(self, exc: LLMError) -> None:
        """A refusal that names the server's window is told to `on_window` (the bot is sized
        to it: resize() comes back here)."""
        if isinstance(exc, LLMContextOverflow) and exc.window:
            self.on_window(exc.window)

    # -- sizes ----------------------------------------------------------------------------------

    def _line_tokens(self, message: dict[str, Any], remember: bool = True) -> int:
        """Raw tokens of one message as the consolidation request shows it (one line; none
        for a message withdrawn or superseded, which is never filed)."""
        if message.get(HIDDEN):
            return 0
        return self.estimator.count_text(format_messages([message]), remember) + 1

    def _answer_tokens(self, current: str) -> int:
        """The answer rewrites MEMORY.md whole: its budget must hold it, plus the entry."""
        if self.budget.answer <= 0:
            return 0  # not budgeted (the provider's default applies)
        memory = self.estimator.corrected(self.estimator.count_text(current), "consolidation")
        return max(self.budget.answer, memory + HISTORY_ENTRY_TOKENS)

    def _chunk_room(self, current: str) -> int:
        """Raw tokens of conversation lines one consolidation request can carry: instructions,
        MEMORY.md, the chunk and the answer's budget must fit in the window together."""
        raw = self._request_raw(current, [])
        fixed = self.estimator.corrected(raw, "consolidation")
        limit = self.window - self._answer_tokens(current) - self.budget.margin
        factor = self.estimator.calibration("consolidation").factor
        return max(0, math.floor((limit - fixed) / max(factor, 0.1)))

    def _request(self, current: str, chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": self._request_text(current, chunk)},
        ]

    def _request_raw(self, current: str, chunk: list[dict[str, Any]]) -> int:
        return self.estimator.raw_request_tokens(self._request(current, chunk), _TOOL_TEXT)

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

    async def _save(self, workspace: Workspace, chunk: list[dict[str, Any]]) -> bool:
        """One consolidation attempt (each way of asking in turn, see `ways`); True if applied.

        MEMORY.md is read, sent and rewritten under the workspace's memory lock, so two sessions
        of one user consolidating at once each build on the other's result. MEMORY.md is written
        before the history entry is appended: a failed write leaves no entry behind, so the
        retry cannot append the same entry twice (a rewrite of MEMORY.md is harmless to repeat).
        """
        async with workspace.memory_lock:
            current = workspace.memory.read()
            for way in self.ways:
                if way == TOOL_WAY:
                    answer = await self._by_tool(current, chunk)
                else:
                    answer = await self._in_plain_text(current, chunk)
                self._learn(way, answer is not None)
                if answer is not None:
                    break
            else:
                return False
            entry, memory = answer
            held = held_because(current, memory)
            changed = memory.strip() != current.strip()
            if held is None and changed:
                memory = await self._within_budget(workspace, memory)
            when = _message_time(chunk[-1])  # for an entry the model left undated

            def write() -> None:
                if held is not None:
                    workspace.memory.keep_held(memory)
                elif changed:
                    workspace.memory.write(memory)
                workspace.memory.append_history(entry, when=when)

            try:
                # In a thread (its fsyncs would stall every turn), still under the memory lock.
                await in_thread(write)
            except OSError as exc:
                log.error("could not write the consolidated memory: %s", exc)
                return False
            if held is not None:
                self._held(workspace, current, memory, held)
            log.info("consolidated %d messages (%s)", len(chunk), way)
            self.on_way(way)
            return True

    async def _by_tool(self, current: str, chunk: list[dict[str, Any]]) -> tuple[str, str] | None:
        """(history entry, new MEMORY.md) from a save_memory call that passes the checks."""
        messages = self._request(current, chunk)
        raw = self._request_raw(current, chunk)
        parsed = await self._ask(messages, raw, self._answer_tokens(current))
        if parsed is None:
            return None
        entry, memory = parsed
        problem = check_history_entry(entry, self._echoes)
        if problem is None:
            problem, memory = check_memory_update(current, memory, self._echoes)
        if problem is not None:
            log.warning("consolidation answer not written: %s", problem)
            return None
        return entry, memory

    async def _in_plain_text(
        self, current: str, chunk: list[dict[str, Any]]
    ) -> tuple[str, str] | None:
        """(history entry, MEMORY.md with the new facts added) from a plain-text answer that
        passes the checks (plain.py)."""
        messages = plain_request(chunk)
        budget = self._answer_tokens(current)
        try:
            result = await self.llm.chat(
                messages, max_tokens=min(budget, PLAIN_ANSWER_TOKENS) if budget else None
            )
        except LLMError as exc:
            log.warning("consolidation call in plain text failed: %s", exc)
            self._told_window(exc)
            return None
        if result.prompt_tokens:
            raw = self.estimator.raw_request_tokens(messages)
            self.estimator.observe_usage(raw, result.prompt_tokens, "plain")
        answer = parse_plain(valid_text(result.content or ""))
        if answer is None:
            log.warning("consolidation answer not written: the plain-text answer has no summary")
            return None
        problem, answer = checked(answer, self._plain_echoes, chunk)
        memory = merged(current, answer.facts)
        if problem is None:
            problem, memory = check_memory_update(current, memory, self._plain_echoes)
        if problem is not None:
            log.warning("consolidation answer not written (plain text): %s", problem)
            return None
        return re.sub(r"\s*\n\s*", " ", answer.summary), memory

    def _learn(self, way: str, worked: bool) -> None:
        """After LEAD_AFTER refusals in a row of the way asked first, the other way, once it
        has worked, is asked first from then on."""
        lead, other = self.ways
        if way == lead:
            self._refused_in_a_row = 0 if worked else self._refused_in_a_row + 1
        elif worked and self._refused_in_a_row >= LEAD_AFTER:
            log.info(
                "consolidation: %s is asked first from now on (%s was refused %d times)",
                other,
                lead,
                self._refused_in_a_row,
            )
            self.ways = (other, lead)
            self._refused_in_a_row = 0

    def _held(self, workspace: Workspace, current: str, memory: str, why: str) -> None:
        kept, facts = kept_fact_lines(current, memory)
        log.warning(
            "memory update of %s held: %s; MEMORY.md unchanged, the update kept as a held "
            "version (/memory history)",
            workspace.user_key,
            why,
        )
        self.on_event(workspace.user_key, MemoryEvent("held", dropped=facts - kept, facts=facts))

    async def _within_budget(self, workspace: Workspace, memory: str) -> str:
        """`memory`, condensed by one more request when it is over the budget. Still over (or
        the condensed text refused): written as it is, and the person is told."""
        budget = self.memory_budget
        used = self.memory_tokens(memory)
        if used <= budget:
            return memory
        condensed = await self._condense(memory, used, budget)
        if condensed is not None:
            problem, condensed = check_memory_update(memory, condensed, self._condense_echoes)
            if problem is not None:
                log.warning("condensed memory not used: %s", problem)
            elif self.memory_tokens(condensed) < used:
                memory, used = condensed, self.memory_tokens(condensed)
        if used > budget:
            log.warning(
                "MEMORY.md of %s kept over its budget: about %d of %d tokens",
                workspace.user_key,
                used,
                budget,
            )
            self.on_event(workspace.user_key, MemoryEvent("over_budget", used, budget))
        return memory

    async def _condense(self, memory: str, used: int, budget: int) -> str | None:
        """One request to shorten `memory` to `budget` tokens; its answer, or None."""
        messages = [
            {"role": "system", "content": CONDENSE_PROMPT},
            {
                "role": "user",
                "content": (
                    f"This MEMORY.md takes about {used:,} tokens; its budget is {budget:,}. "
                    f"Shorten it to fit.\n\n{memory.strip()}"
                ),
            },
        ]
        try:
            result = await self.llm.chat(messages, max_tokens=self._answer_tokens(memory) or None)
        except LLMError as exc:
            log.warning("the request to condense the memory failed: %s", exc)
            return None
        text = valid_text((result.content or "").strip())
        fenced = _FENCE.match(text)
        text = fenced.group(1).strip() if fenced else text
        return text + "\n" if text else None

    async def _ask(
        self, messages: list[dict[str, Any]], raw: int, answer_tokens: int
    ) -> tuple[str, str] | None:
        for choice in (_FORCED_CHOICE, "auto"):
            try:
                result = await self.llm.chat(
                    messages,
                    tools=[SAVE_MEMORY_TOOL],
                    tool_choice=choice,
                    max_tokens=answer_tokens or None,
                )
            except LLMBadRequest as exc:
                if choice == "auto" or isinstance(exc, LLMContextOverflow):
                    log.warning("consolidation request rejected: %s", exc)
                    self._told_window(exc)
                    return None
                log.info("provider rejected the forced tool choice; retrying with auto")
                continue
            except LLMError as exc:
                log.warning("consolidation call failed: %s", exc)
                return None
            if result.prompt_tokens:
                self.estimator.observe_usage(raw, result.prompt_tokens, "consolidation")
            if any(c.name == "save_memory" for c in result.tool_calls):
                parsed = parse_save_memory(result)
                if parsed is None:
                    log.warning("save_memory called with missing or empty arguments")
                return parsed
            log.info("reply without a save_memory call (tool_choice=%s)", choice)
        return None

    def _request_text(self, current: str, chunk: list[dict[str, Any]]) -> str:
        return (
            "## Current MEMORY.md\n"
            f"{current.strip() or MEMORY_TEMPLATE.strip()}\n\n"
            "## Conversation to process\n"
            f"{format_messages(chunk)}\n\n"
            f"## Memory budget\nMEMORY.md may take about {self.memory_budget:,} tokens; it "
            f"takes about {self.memory_tokens(current):,} now. Keep the update within the "
            "budget: shorten the wording before dropping a fact that still holds.\n\n"
            "Call save_memory with the history entry and the complete updated MEMORY.md."
        )


def _descriptions(tool: dict[str, Any]) -> list[str]:
    """Every description text of a tool schema (what a confused model copies back)."""
    function = tool["function"]
    texts = [function["description"]]
    texts += [p["description"] for p in function["parameters"]["properties"].values()]
    return texts


_TOOL_TEXT = json.dumps([SAVE_MEMORY_TOOL])


def _valid_ends(session: Session, start: int) -> list[int]:
    """Boundary.valid_ends by absolute index (the session holds its tail only)."""
    base = session.offset
    return [end + base for end in valid_ends(session.messages, start - base)]
