"""Facts from imported conversations: their HISTORY.md entries read back and consolidated into
MEMORY.md through the consolidator's own request and checks (`MemoryWriter.learn`), oldest
conversation first, only adding lines and writing no history entry (it exists already).

WHY the entries, not the export: HISTORY.md is the truth the person owns. What `/forget`
removed is not learnt from, and an in-chat import's file is gone by the time the person says
yes. A conversation's entries are found by the "(2/3; import chatgpt:ID)" of their first line.

The cursor: a `{"learned": key}` line in `imported.jsonl` once every request of a conversation
passed its checks, so a second run continues where the first stopped. A run stopped inside a
conversation asks its requests again; what they repeat is not added twice (a fact MEMORY.md
holds, in other words too, is skipped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory.consolidation.asking import MemoryWriter, format_messages
from memory.consolidation.budget import HISTORY_ENTRY_TOKENS
from memory.importing.formats import NAMES
from memory.importing.history import PART
from memory.safefs import append_line, open_binary
from memory.store import ENTRY_STAMP, MemoryStore
from memory.threads import in_thread, polite
from memory.workspace import IMPORTED_FILE

if TYPE_CHECKING:
    from memory.workspace import Workspace

LEARNED = "learned"
GROWTH_TOKENS = 20  # what MEMORY.md is reckoned to grow by per request, for the estimate
MAX_FAILED_IN_A_ROW = 3  # requests whose answer failed the checks (or the server failed)
_STAMP = re.compile(rf"^({ENTRY_STAMP}) ")
_SPEAKER = re.compile(
    r"^(Me|" + "|".join(map(re.escape, NAMES.values())) + r")( \(cont\.\))?: ", re.M
)


@dataclass(frozen=True)
class Source:
    """One imported conversation not learnt from yet: its key, its time, where its entries
    start in HISTORY.md (bytes)."""

    key: str
    when: datetime
    offsets: tuple[int, ...]


@dataclass
class Estimate:
    """What learning from the pending conversations will ask, before any request."""

    conversations: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0  # the answer rewrites MEMORY.md whole and writes an entry
    too_long: int = 0  # messages longer than one request can carry: left out

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Learned:
    """What a run did; `stopped`: why it ended early (None: everything was learnt from)."""

    conversations: int = 0
    requests: int = 0
    facts: int = 0
    failed: int = 0
    stopped: str | None = None
    left: int = 0  # conversations still pending


def learned_keys(root: Path) -> set[str]:
    """The conversations learnt from (`imported.jsonl`'s "learned" lines)."""
    found: set[str] = set()
    try:
        file = open_binary(root / IMPORTED_FILE)
    except FileNotFoundError:
        return found
    with file:
        for raw in file:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get(LEARNED), str):
                found.add(record[LEARNED])
    return found


def pending(store: MemoryStore) -> list[Source]:
    """The imported conversations HISTORY.md holds that were not learnt from, oldest first."""
    learned = learned_keys(store.root)
    found: dict[str, tuple[datetime, list[int]]] = {}
    try:
        file = open_binary(store.history_path)
    except FileNotFoundError:
        return []
    offset = 0
    with file:
        for raw in file:
            start, offset = offset, offset + len(raw)
            if not raw.startswith(b"["):
                continue
            line = raw.decode("utf-8", "replace").rstrip("\n")
            stamp = _STAMP.match(line)
            part = PART.search(line) if stamp else None
            if stamp is None or part is None or part.group(3) in learned:
                continue
            when = datetime.strptime(stamp.group(1), "[%Y-%m-%d %H:%M]").replace(tzinfo=UTC)
            _, offsets = found.setdefault(part.group(3), (when, []))
            offsets.append(start)
    sources = [Source(key, when, tuple(at)) for key, (when, at) in found.items()]
    return sorted(sources, key=lambda source: (source.when, source.key))


def messages_of(store: MemoryStore, source: Source) -> list[dict[str, Any]]:
    """The conversation's turns as the consolidator's messages (role, content, timestamp), the
    parts of a turn cut between entries joined again."""
    messages: list[dict[str, Any]] = []
    with open_binary(store.history_path) as file:
        for offset in source.offsets:
            file.seek(offset)
            file.readline()  # the entry's first line: its stamp and title
            stamp = source.when.isoformat()
            for raw in file:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if not line.strip():
                    break  # the blank line that ends an entry
                speaker = _SPEAKER.match(line)
                if speaker is None:
                    if messages:
                        messages[-1]["content"] += "\n" + line
                    continue
                role = "user" if speaker.group(1) == "Me" else "assistant"
                text = line[speaker.end() :]
                if speaker.group(2) and messages and messages[-1]["role"] == role:
                    messages[-1]["content"] += " " + text
                else:
                    messages.append({"role": role, "content": text, "timestamp": stamp})
    return messages


def chunks(
    writer: MemoryWriter, room: int, messages: list[dict[str, Any]]
) -> tuple[list[tuple[list[dict[str, Any]], int]], int]:
    """`messages` cut into runs that fit one request (`room`: MemoryWriter.chunk_room), each
    with its raw tokens, and how many messages were too long for any request (left out).
    Counted without the estimator's caches: safe in a thread."""
    runs: list[tuple[list[dict[str, Any]], int]] = []
    run: list[dict[str, Any]] = []
    used = too_long = 0
    for message in messages:
        size = writer.estimator.count_text(format_messages([message]), False) + 1
        if size > room:
            too_long += 1
            continue
        if run and used + size > room:
            runs.append((run, used))
            run, used = [], 0
        run.append(message)
        used += size
    if run:
        runs.append((run, used))
    return runs, too_long


async def estimate(workspace: Workspace, writer: MemoryWriter) -> Estimate:
    """The requests and tokens learning from every pending conversation would take. Each
    request reads MEMORY.md and its answer rewrites it whole, so MEMORY.md's growth is counted:
    GROWTH_TOKENS more per request (a fact or two), up to its budget. Counted in a thread: an
    export of 20 MB is seconds of counting."""
    store = workspace.memory
    current = store.read()
    room = writer.chunk_room(current)
    fixed = writer.request_raw(current, [])
    now = writer.memory_tokens(current)
    ceiling = max(now, writer.memory_budget)

    def count() -> Estimate:
        found = Estimate()
        for source in polite(pending(store), 1):
            grown = min(now + GROWTH_TOKENS * found.requests, ceiling) - now
            # MEMORY.md is in the request and in the answer's share: a room smaller by twice
            runs, too_long = chunks(writer, max(1, room - 2 * grown), messages_of(store, source))
            found.conversations += 1
            found.too_long += too_long
            for _, raw in runs:
                grown = min(now + GROWTH_TOKENS * found.requests, ceiling) - now
                found.requests += 1
                found.prompt_tokens += (
                    writer.estimator.corrected(fixed + raw, "consolidation") + grown
                )
                found.completion_tokens += now + grown + HISTORY_ENTRY_TOKENS
        return found

    return await in_thread(count)


async def learn(
    workspace: Workspace,
    writer: MemoryWriter,
    *,
    stop: Callable[[], str | None] = lambda: None,
    progress: Callable[[Learned], None] | None = None,
) -> Learned:
    """Learn from each pending conversation, oldest first. `stop` is asked before each request:
    a reason ends the run there (a limit reached); the cursor keeps what was done."""
    store = workspace.memory
    result = Learned()
    sources = await in_thread(partial(pending, store))
    failed_in_a_row = 0
    for number, source in enumerate(sources):
        messages = await in_thread(partial(messages_of, store, source))
        current = store.read()
        used, budget = writer.memory_tokens(current), writer.memory_budget
        if used >= budget:  # only adding: no room to learn more without condensing
            result.stopped = (
                f"MEMORY.md is at its budget ({used:,} of {budget:,} tokens); after the person "
                "has tidied it (/memory, /forget) the same command goes on"
            )
            result.left = len(sources) - number
            return result
        room = writer.chunk_room(current)
        runs, _ = await in_thread(partial(chunks, writer, room, messages))
        whole = True
        for run, _ in runs:
            why = stop()
            if why is None and failed_in_a_row >= MAX_FAILED_IN_A_ROW:
                why = f"{failed_in_a_row} answers in a row failed the checks or did not come"
            if why is not None:
                result.stopped, result.left = why, len(sources) - number
                return result
            added = await writer.learn(workspace, run)
            result.requests += 1
            if added is None:
                result.failed += 1
                failed_in_a_row += 1
                whole = False
            else:
                result.facts += added
                failed_in_a_row = 0
        if whole:
            line = json.dumps({LEARNED: source.key}, ensure_ascii=False) + "\n"
            await in_thread(partial(append_line, store.root / IMPORTED_FILE, line.encode("utf-8")))
        result.conversations += 1
        if progress is not None:
            progress(result)
    return result
