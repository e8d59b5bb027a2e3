"""A conversation of another service as dated HISTORY.md entries, written once.

Each conversation becomes one or more entries stamped at its own time (a later part at the time
of its first message), its title in the first line, cut between turns so an entry stays under
MAX_ENTRY_CHARS (one turn longer than that is cut at a line or a space). Every entry goes
through `MemoryStore.append_history`, the one writer of HISTORY.md.

`imported.jsonl` in the workspace records each conversation: `begun` before its first entry,
`done` after its last. A re-import skips what is done; a conversation begun and not done (the
import was stopped or crashed mid-way) is finished: the parts HISTORY.md already holds are
recognised by the "(2/3; import chatgpt:ID)" at the end of their first line, and skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from memory.importing.formats import NAMES, Conversation, Turn
from memory.safefs import append_line, open_binary
from memory.store import ENTRY_STAMP, MemoryStore
from memory.workspace import IMPORTED_FILE

MAX_ENTRY_CHARS = 3000
PART = re.compile(r"\((\d+)/(\d+); import (\S+)\)$")
_STAMPED = re.compile(ENTRY_STAMP)


@dataclass
class Imported:
    """What an import did so far (the progress shown, and the answer)."""

    conversations: int = 0  # written now
    entries: int = 0
    skipped: int = 0  # imported before


class Ledger:
    """The ids of the conversations imported into one workspace (`imported.jsonl`)."""

    def __init__(self, root: Path) -> None:
        self.path = root / IMPORTED_FILE
        self.done: set[str] = set()
        self.begun: set[str] = set()
        try:
            file = open_binary(self.path)
        except FileNotFoundError:
            return
        with file:
            for raw in file:
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue  # a torn last line: that conversation is finished again
                if isinstance(record, dict) and isinstance(record.get("done"), str):
                    self.done.add(record["done"])
                elif isinstance(record, dict) and isinstance(record.get("begun"), str):
                    self.begun.add(record["begun"])
        self.begun -= self.done

    def record(self, kind: str, key: str, **more: object) -> None:
        line = json.dumps({kind: key, **more}, ensure_ascii=False) + "\n"
        append_line(self.path, line.encode("utf-8"))
        (self.done if kind == "done" else self.begun).add(key)


def key_of(service: str, conversation: Conversation) -> str:
    return f"{service}:{conversation.id}"


def import_conversations(
    store: MemoryStore,
    service: str,
    conversations: Iterable[Conversation],
    progress: Callable[[Imported], None] | None = None,
    *,
    stop: Callable[[], bool] | None = None,
) -> Imported:
    """Append the entries of each conversation not imported before; `stop` (asked between
    conversations) ends early, everything written so far being whole and recorded."""
    ledger = Ledger(store.root)
    result = Imported()
    for conversation in conversations:
        key = key_of(service, conversation)
        if key in ledger.done:
            result.skipped += 1
        else:
            present = _parts_present(store.history_path, key) if key in ledger.begun else set()
            if key not in ledger.begun:
                ledger.record("begun", key)
            parts = entries(service, conversation, key)
            for number, (when, text) in enumerate(parts, 1):
                if number not in present:
                    store.append_history(text, when)
                    result.entries += 1
            ledger.record("done", key, parts=len(parts))
            result.conversations += 1
        if progress is not None:
            progress(result)
        if stop is not None and stop():
            break
    return result


def entries(service: str, conversation: Conversation, key: str) -> list[tuple[datetime, str]]:
    """(its time, its text) of each entry of `conversation`, in order."""
    speakers = {"user": "Me", "assistant": NAMES.get(service, service)}
    title = conversation.title.replace('"', "'")
    budget = MAX_ENTRY_CHARS - len(title) - len(key) - 80  # the first line's
    groups: list[list[tuple[datetime | None, str]]] = [[]]
    size = 0
    for turn in conversation.turns:
        for piece in _pieces(turn, speakers[turn.role], budget):
            if groups[-1] and size + len(piece) + 1 > budget:
                groups.append([])
                size = 0
            groups[-1].append((turn.when, piece))
            size += len(piece) + 1
    total = len(groups)
    out = []
    for number, group in enumerate(groups, 1):
        first = next((when for when, _ in group if when), None)
        when = conversation.when if number == 1 or first is None else max(first, conversation.when)
        head = (
            f'{NAMES.get(service, service)} conversation "{title}" ({number}/{total}; import {key})'
        )
        out.append((when, "\n".join([head, *(piece for _, piece in group)])))
    return out


def _pieces(turn: Turn, speaker: str, budget: int) -> list[str]:
    """The turn as "Speaker: text", in pieces of at most `budget` characters."""
    text = f"{speaker}: {turn.text}"
    pieces = []
    while len(text) > budget:
        cut = text.rfind("\n", budget // 2, budget)
        if cut < 0:
            cut = text.rfind(" ", budget // 2, budget)
        if cut < 0:
            cut = budget
        pieces.append(text[:cut].rstrip())
        text = f"{speaker} (cont.): {text[cut:].lstrip()}"
    pieces.append(text)
    return pieces


def _parts_present(history: Path, key: str) -> set[int]:
    """The part numbers of `key` that HISTORY.md holds (after an import stopped mid-way)."""
    found: set[int] = set()
    try:
        file = open_binary(history)
    except FileNotFoundError:
        return found
    with file:  # a line at a time: HISTORY.md may be large
        for raw in file:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            match = PART.search(line) if _STAMPED.match(line) else None
            if match and match.group(3) == key:
                found.add(int(match.group(1)))
    return found
