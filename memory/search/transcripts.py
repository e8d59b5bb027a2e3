"""The person's own words from consolidated conversations, searchable like HISTORY.md.

WHY: a consolidation's history entry is a model's summary; a weak model's keeps nothing ("The
user chatted."), and then the past is unfindable although every message is still in the
transcripts (sessions/*.jsonl). So /recall and the search tool also search the consolidated
part of each transcript, ranked after HISTORY.md's entries (memory/search/transcripts.search).

How, without a second search: the user messages before each transcript's `last_consolidated`
cursor are written, one entry per message ("[YYYY-MM-DD HH:MM] what they said", line breaks
folded), to a derived text in HISTORY.md's layout (`.transcripts.index` in the workspace), which
the one engine searches (memory/search/engine.py) with its scan cache and, from 4 MB on, its word
index (memory/search/history_index.py), built in the background as for HISTORY.md. Only the
person's own messages: no answers, tool results or quoted replies. Withdrawn ones (/undo) are
left out, as the conversation leaves them out.

Kept current by appending (and made by appending: a crash mid-way leaves no state, so it is
made again): transcripts only grow, so per transcript a state file
(`.transcripts.state.index`) remembers which file it was (device, inode), how far it was read
(the first unconsolidated message) and how many messages lay before; each search reads only
what was consolidated since. A transcript rewritten (/forget: a new inode), shortened or gone, or
a derived text that is not the one the state describes (a crash between the two writes), makes
it rebuilt whole. Both files are derived (names ending in .index: /export leaves them
out) and safe to delete; /forget deletes them (`drop`), so a forgotten phrase is in no file.
Transcripts are read with memory.session.read_lines, the one reader of them. Blocking: call off
the event loop (the work is polite to it: memory/threads.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memory import clock
from memory.atomic import atomic_write_text
from memory.safefs import append_all, open_binary, open_fd
from memory.search import history_index, meaning
from memory.search.engine import SearchResult, search_history
from memory.session import METADATA_TYPE, TURN, WITHDRAWN, read_lines, text_of
from memory.threads import polite

log = logging.getLogger(__name__)

DERIVED = ".transcripts.index"
STATE = ".transcripts.state.index"
READ_BYTES = 4 * 2**20  # of a transcript read at a time
_FOLD = re.compile(r"\s*[\r\n]+\s*")
# One of a fixed few locks per workspace (by its path): two refreshes of one never interleave,
# and RAM does not grow with the number of people who ever searched.
_LOCKS = [threading.Lock() for _ in range(64)]


def derived_path(root: Path) -> Path:
    """The derived text of a workspace's consolidated messages (per workspace)."""
    return root / DERIVED


def _lock(root: Path) -> threading.Lock:
    return _LOCKS[zlib.crc32(str(root).encode("utf-8", "surrogateescape")) % len(_LOCKS)]


@dataclass
class _Read:
    """Where one transcript was read up to: the file (device, inode), the byte of its first
    message not yet consolidated, and the number of messages before that byte."""

    dev: int
    ino: int
    done: int = 0
    messages: int = 0


@dataclass
class _State:
    size: int = 0  # of the derived text the state describes
    ino: int = 0
    read: dict[str, _Read] = field(default_factory=dict)


def drop(root: Path) -> None:
    """Delete the derived text, its state and its word index (/forget: the transcripts were
    rewritten). Waits for a refresh under way, so none writes the old words back after."""
    with _lock(root):
        for name in (DERIVED, STATE):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(root / name)
        history_index.drop(derived_path(root))


def refresh(root: Path, sessions_dir: Path) -> Path | None:
    """Bring the derived text up to the transcripts' cursors; its path, or None when no
    message is consolidated yet (or it cannot be written: the search then leaves it out)."""
    with _lock(root):
        try:
            return _refresh(root, sessions_dir)
        except OSError as exc:
            log.warning("consolidated transcripts of %s not searchable: %s", root, exc)
            return None


def _refresh(root: Path, sessions_dir: Path) -> Path | None:
    target = derived_path(root)
    state = _load_state(root / STATE)
    files = _transcripts(sessions_dir)
    whole = not _current(target, state) or any(
        name not in files
        or (files[name].st_dev, files[name].st_ino) != (read.dev, read.ino)
        or files[name].st_size < read.done
        for name, read in state.read.items()
    )
    if whole:  # made again from nothing, by appending: a crash leaves no state, so again
        state = _State()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(root / STATE)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        history_index.drop(target)  # of the text replaced
    fd = open_fd(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    added = 0
    try:
        for name, st in sorted(files.items()):
            read = state.read.setdefault(name, _Read(st.st_dev, st.st_ino))
            if read.done < st.st_size:
                for piece in _consolidated(sessions_dir / name, read):
                    append_all(fd, piece)
                    added += len(piece)
        size, ino = os.fstat(fd).st_size, os.fstat(fd).st_ino
    finally:
        os.close(fd)
    if whole or added or state.read.keys() != files.keys():
        state.size, state.ino = size, ino
        _save_state(root / STATE, state)
    return target if size else None


def existing(root: Path) -> Path | None:
    """The derived text as it is, if it holds anything (read only)."""
    target = derived_path(root)
    try:
        return target if target.stat().st_size else None
    except FileNotFoundError:
        return None


def _transcripts(sessions_dir: Path) -> dict[str, os.stat_result]:
    out: dict[str, os.stat_result] = {}
    try:
        names = os.listdir(sessions_dir)
    except FileNotFoundError:
        return out
    for name in names:
        if name.endswith(".jsonl") and not name.startswith("."):
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(sessions_dir / name)
                if os.path.isfile(sessions_dir / name) and not os.path.islink(sessions_dir / name):
                    out[name] = st
    return out


def _current(target: Path, state: _State) -> bool:
    """Whether the derived text is the one the state describes (else: rebuilt)."""
    try:
        st = target.stat()
    except FileNotFoundError:
        return False
    return bool(state.ino) and (st.st_size, st.st_ino) == (state.size, state.ino)


def _consolidated(path: Path, read: _Read) -> Iterator[bytes]:
    """Entries of the user messages consolidated since ``read`` (which then moves on), a block
    of the transcript at a time (RAM: a block, and the messages not consolidated yet).

    Reads from ``read.done`` to the last whole line: the messages, the metadata records (the
    last says where the cursor is) and the withdrawn records (/undo) that hide messages. A
    message before a cursor seen is written at once: only one after it can still be withdrawn
    (/undo refuses a filed exchange), so those wait in ``pending``."""
    cursor: int | None = None
    number = read.messages
    pending: list[tuple[int, int, str, Any, str]] = []  # (position, number, stamp, turn, text)
    first_open: int | None = None  # position of the message at the cursor
    opened: list[tuple[int, int]] = []  # (number, position) of the messages from the cursor on
    done = read.done
    with open_binary(path) as f:
        f.seek(done)
        carry = b""
        while block := f.read(READ_BYTES):
            data = carry + block
            cut = data.rfind(b"\n") + 1  # a line being written is read next time
            data, carry = data[:cut], data[cut:]
            for at, _, record, _ in read_lines(data, done):
                if record is None:
                    continue
                kind = record.get("_type")
                if kind == METADATA_TYPE:
                    value = record.get("last_consolidated")
                    if isinstance(value, int) and not isinstance(value, bool):
                        cursor = value
                elif kind == WITHDRAWN:
                    turn = record.get(TURN)
                    hit = [
                        i for i, p in enumerate(pending) if isinstance(turn, str) and p[3] == turn
                    ]
                    if hit:  # the turn's message and all after it, up to this record
                        del pending[hit[-1] :]
                elif kind is None:
                    opened.append((number, at))
                    if record.get("role") == "user":
                        text = _FOLD.sub(" ", text_of(record.get("content"))).strip()
                        if text:
                            pending.append((at, number, _stamp(record), record.get(TURN), text))
                    number += 1
            done += len(data)
            if cursor is not None and cursor > read.messages:
                filed = [p for p in pending if p[1] < cursor]
                pending = pending[len(filed) :]
                opened = [o for o in opened if o[0] >= cursor]
                if filed:
                    yield b"".join(f"{p[2]} {p[4]}\n\n".encode("utf-8", "replace") for p in filed)
    if cursor is None or cursor <= read.messages:  # nothing more was consolidated
        return
    first_open = opened[0][1] if opened else None
    if first_open is None:  # every message read is consolidated
        read.done, read.messages = done, number
    else:
        read.done, read.messages = first_open, cursor


def _stamp(message: dict[str, Any]) -> str:
    moment = clock.parse(message.get("timestamp"))
    return f"[{clock.history_stamp(moment or datetime(1970, 1, 1))}]"


def _load_state(path: Path) -> _State:
    try:
        raw = json.loads(path.read_bytes())
        read = {
            str(name): _Read(*(int(v) for v in values))
            for name, values in polite(raw["read"].items())
        }
        return _State(int(raw["size"]), int(raw["ino"]), read)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return _State()  # none, or not one this code wrote: rebuilt


def _save_state(path: Path, state: _State) -> None:
    read = {name: [r.dev, r.ino, r.done, r.messages] for name, r in state.read.items()}
    atomic_write_text(path, json.dumps({"size": state.size, "ino": state.ino, "read": read}))


def search(
    history: Path,
    sessions_dir: Path,
    query: str,
    *,
    limit: int = 5,
    offset: int = 0,
    regex: bool = False,
    now: datetime | None = None,
    update: bool = True,
) -> SearchResult:
    """HISTORY.md's matching entries, then the consolidated messages' (each hit of those has
    ``conversation`` set), paged together; ``total`` counts both. Blocking: off the loop.

    ``update=False`` (the operator's `lightgrep recall`, beside a running bot that alone writes
    the workspace): the derived text as the bot last left it, nothing written."""
    first = search_history(
        history, query, limit=limit, offset=offset, regex=regex, now=now, meaning=meaning.current
    )
    derived = refresh(history.parent, sessions_dir) if update else existing(history.parent)
    if derived is None:
        return first
    shown = len(first.hits)
    second = search_history(
        derived,
        query,
        limit=max(limit - shown, 1),
        offset=max(0, offset - first.total),
        regex=regex,
        now=now,
    )
    for hit in second.hits:
        hit.conversation = True
    hits = first.hits + (second.hits[: limit - shown] if shown < limit else [])
    return SearchResult(hits, first.total + second.total)
