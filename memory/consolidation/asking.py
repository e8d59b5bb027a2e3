"""One attempt of a consolidation: asking the model, checking its answer, writing it.

The model is asked to call `save_memory` with a history paragraph and the complete new
MEMORY.md. Providers differ: some reject a forced tool_choice (HTTP 400), some ignore it and
answer in prose, so a second attempt uses "auto". A tool answer the checks refuse, or none at
all, is asked once more in plain text (memory/consolidation/plain.py: a paragraph and fact
lines that code merges into MEMORY.md, adding only); after LEAD_AFTER refusals in a row of the
way asked first, the other way is asked first (small models never manage the tool).

MEMORY.md has a budget (`memory_budget_tokens`, by default a share of the window: budget.py):
the request states it and the current size, and an update over it gets one request to condense.
What is refused, held or written, in which order, is memory.consolidation.checks' docstring.
Which chunk is consolidated, and when, is memory.consolidation.consolidator's.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory.consolidation.budget import HISTORY_ENTRY_TOKENS, Shares, memory_budget
from memory.consolidation.checks import (
    check_history_entry,
    check_memory_update,
    echo_fragments,
    fact_lines,
    held_because,
    keeps_said,
    kept_fact_lines,
    over_budget,
    said_names,
)
from memory.consolidation.plain import (
    PLAIN_ASK,
    PLAIN_SYSTEM,
    checked,
    duplicate,
    merged,
    parse_plain,
    plain_request,
    users_lines,
)
from memory.llm import ChatLLM, ChatResult, LLMBadRequest, LLMContextOverflow, LLMError
from memory.media import is_ref, ref_text
from memory.session import HIDDEN, OUTSIDE, QUOTED, reply_context
from memory.store import MEMORY_TEMPLATE, SECTIONS, merged_memory
from memory.text import valid_text
from memory.threads import in_thread
from memory.tokens import TokenEstimator

if TYPE_CHECKING:
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
    for message in kept(messages):
        stamp = str(message.get("timestamp") or "?")[:16]
        role = str(message.get("role") or "?").upper()
        names = _tool_names(message)
        tools = f" [tools: {', '.join(names)}]" if names else ""
        said = _content_text(reply_context(message) + _content_text(message.get("content")))
        if message.get(OUTSIDE):  # data from outside, which may carry instructions: not read
            tool = message.get("name") or "a tool"
            said = f"(what {tool} returned from outside: {len(said):,} characters, not shown)"
        elif message.get(QUOTED):  # the person's own history, kept already
            tool = message.get("name") or "a tool"
            said = f"({tool} quoted {len(said):,} characters of the history, not repeated)"
        lines.append(f"[{stamp}] {role}{tools}: {said}")
    return "\n".join(lines)


def kept(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def message_time(message: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(message.get("timestamp")))
    except ValueError:
        return None


class MemoryWriter:
    """One attempt of a consolidation: the request (the save_memory tool, or plain text), the
    checks its answer passes, and MEMORY.md and HISTORY.md written; condensed when MEMORY.md is
    over its budget. Which way a server answers is learnt here (`ways`)."""

    def __init__(self, llm: ChatLLM, estimator: TokenEstimator, shares: Shares) -> None:
        self.llm = llm
        self.estimator = estimator
        self.shares = shares  # the window's, as the bot learns it (budget.py)
        self._echoes = echo_fragments(SYSTEM_PROMPT, *_descriptions(SAVE_MEMORY_TOOL))
        self._condense_echoes = echo_fragments(CONDENSE_PROMPT)
        self._plain_echoes = echo_fragments(PLAIN_SYSTEM, PLAIN_ASK)
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
    def memory_budget(self) -> int:
        """Tokens MEMORY.md may take: as configured, else a share of the window (budget.py)."""
        return memory_budget(self.shares.budget.window, self.shares.memory)

    def memory_tokens(self, memory: str) -> int:
        """About how many tokens `memory` takes in a prompt."""
        return math.ceil(self.estimator.count_text(memory) * self.estimator.factor)

    def answer_tokens(self, current: str) -> int:
        """The answer rewrites MEMORY.md whole: its budget must hold it, plus the entry."""
        if self.shares.budget.answer <= 0:
            return 0  # not budgeted (the provider's default applies)
        memory = self.estimator.corrected(self.estimator.count_text(current), "consolidation")
        return max(self.shares.budget.answer, memory + HISTORY_ENTRY_TOKENS)

    def request_raw(self, current: str, chunk: list[dict[str, Any]]) -> int:
        return self.estimator.raw_request_tokens(self._request(current, chunk), _TOOL_TEXT)

    async def save(self, workspace: Workspace, chunk: list[dict[str, Any]]) -> bool:
        """One consolidation attempt (each way of asking in turn, see `ways`); True if applied.

        MEMORY.md is read, sent and rewritten under the workspace's memory lock, so two sessions
        of one user consolidating at once each build on the other's result. MEMORY.md is written
        before the history entry is appended: a failed write leaves no entry behind, so the
        retry cannot append the same entry twice (a rewrite of MEMORY.md is harmless to repeat).
        """
        async with workspace.memory_lock:
            current = workspace.memory.read()
            asked = await self._answer(current, chunk)
            if asked is None:
                return False
            way, (entry, memory) = asked
            held = held_because(current, memory)
            changed = memory.strip() != current.strip()
            if held is None and changed:
                memory = await self._within_budget(workspace, memory)
            when = message_time(chunk[-1])  # for an entry the model left undated

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

    async def learn(self, workspace: Workspace, chunk: list[dict[str, Any]]) -> int | None:
        """For an imported conversation (memory/importing/facts.py): the same request and
        checks as `save`, but only the fact lines MEMORY.md lacks are added, each under its
        section, and no history entry is written (the conversation's entries exist). The
        number of lines added; None when no answer passed the checks."""
        async with workspace.memory_lock:
            current = workspace.memory.read()
            asked = await self._answer(current, chunk)
            if asked is None:
                return None
            known = fact_lines(current)
            kept = []
            for line in asked[1][1].splitlines():
                fact = fact_lines(line)
                if not fact or line.lstrip().startswith("#"):
                    kept.append(line)  # headings and blank lines: where facts go
                elif not duplicate(line.strip(" -*"), known):
                    kept.append(line)
                    known.extend(fact)
            memory, added = merged_memory(current, "\n".join(kept))
            if added:
                await in_thread(lambda: workspace.memory.write(memory))
            return added

    async def _answer(
        self, current: str, chunk: list[dict[str, Any]]
    ) -> tuple[str, tuple[str, str]] | None:
        """(the way that answered, (history entry, MEMORY.md)) that passed the checks, each
        way of asking in turn (see `ways`); None when none did."""
        for way in self.ways:
            if way == TOOL_WAY:
                answer = await self._by_tool(current, chunk)
            else:
                answer = await self._in_plain_text(current, chunk)
            self._learn(way, answer is not None)
            if answer is not None:
                return way, answer
        return None

    def chunk_room(self, current: str) -> int:
        """Raw tokens of conversation lines one request can carry: instructions, MEMORY.md
        (`current`), the chunk and the answer's budget must fit in the window together."""
        raw = self.request_raw(current, [])
        fixed = self.estimator.corrected(raw, "consolidation")
        budget = self.shares.budget
        limit = budget.window - self.answer_tokens(current) - budget.margin
        factor = self.estimator.calibration("consolidation").factor
        return max(0, math.floor((limit - fixed) / max(factor, 0.1)))

    def _request(self, current: str, chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": self._request_text(current, chunk)},
        ]

    async def _by_tool(self, current: str, chunk: list[dict[str, Any]]) -> tuple[str, str] | None:
        """(history entry, new MEMORY.md) from a save_memory call that passes the checks."""
        messages = self._request(current, chunk)
        raw = self.request_raw(current, chunk)
        parsed = await self._ask(messages, raw, self.answer_tokens(current))
        if parsed is None:
            return None
        entry, memory = parsed
        problem = check_history_entry(entry, self._echoes) or keeps_said(
            entry, said_names(users_lines(chunk))
        )
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
        budget = self.answer_tokens(current)
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
                "MEMORY.md of %s kept over its budget: %s",
                workspace.user_key,
                over_budget(used, budget),
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
            result = await self.llm.chat(messages, max_tokens=self.answer_tokens(memory) or None)
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

    def _told_window(self, exc: LLMError) -> None:
        """A refusal that names the server's window is told to `on_window` (the bot is sized
        to it: resize() comes back here)."""
        if isinstance(exc, LLMContextOverflow) and exc.window:
            self.on_window(exc.window)


def _descriptions(tool: dict[str, Any]) -> list[str]:
    """Every description text of a tool schema (what a confused model copies back)."""
    function = tool["function"]
    texts = [function["description"]]
    texts += [p["description"] for p in function["parameters"]["properties"].values()]
    return texts


_TOOL_TEXT = json.dumps([SAVE_MEMORY_TOOL])
