"""Append-only JSONL transcripts, one file per session key.

Line 1 is a metadata record; every later change of metadata is appended as another full record
and the last one wins. Messages are appended one line each and never rewritten, so persisting a
message costs O(1) and a crash can damage at most the line being written, which load skips.

WHY only the tail is kept in RAM: a turn needs the messages from the consolidation cursor on;
the consolidated past is on disk (in HISTORY.md too) and would cost RAM for every message ever
said. A metadata record says where in the file the cursor's message starts (`cursor_byte`), so a
load seeks there instead of reading the past, and it keeps the platform ids of the last user
messages consolidated (`recent_ids`), so a redelivered message is still recognised.
"""

from __future__ import annotations

import json
import logging
import os
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from memory import clock
from memory.atomic import PRIVATE_FILE_MODE
from memory.keys import decode_key, encode_key
from memory.safefs import append_all, make_private_dir, open_binary, open_fd

log = logging.getLogger(__name__)

METADATA_TYPE = "metadata"
LLM_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")
RECENT_IDS = 32  # platform ids of consolidated user messages remembered per session
FILED = -1  # index_of(): the message was consolidated (it is no longer in RAM)
_METADATA_PREFIXES = (b'{"_type": "metadata"', b'{"_type":"metadata"')
_SCAN_BLOCK = 1 << 16


def _now() -> str:
    return clock.iso()


@dataclass(eq=False)
class Session:
    """One conversation thread. Indexes are absolute (the file's message lines, counted from 0):
    `messages` holds those from `offset` on (offset ≤ last_consolidated); the rest stay on disk
    (SessionStore.read_all)."""

    key: str
    path: Path
    messages: list[dict[str, Any]] = field(default_factory=list)
    last_consolidated: int = 0
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    metadata: dict[str, Any] = field(default_factory=dict)
    offset: int = 0  # absolute index of messages[0]
    # Platform message id → absolute index of its user message, for the messages in RAM.
    message_ids: dict[str, int] = field(default_factory=dict)
    # The ids of the newest user messages already consolidated (at most RECENT_IDS).
    filed_ids: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_IDS))
    # Bumped when `messages` is replaced wholesale (a reload), so derived caches rebuild.
    epoch: int = 0
    # Byte position in the file of each message line in `messages` (same order).
    positions: array[int] = field(default_factory=lambda: array("q"))
    # history() as last built: ((epoch, offset, last_consolidated), total then, the messages).
    _history: tuple[tuple[int, int, int], int, list[dict[str, Any]]] | None = field(
        default=None, repr=False
    )

    @property
    def total(self) -> int:
        """How many messages the session has, the consolidated ones included."""
        return self.offset + len(self.messages)

    def span(self, start: int, end: int | None = None) -> list[dict[str, Any]]:
        """messages[start:end] by absolute index; start must not lie before `offset`."""
        if start < self.offset:
            raise IndexError(f"message {start} is consolidated (on disk only)")
        last = self.total if end is None else min(end, self.total)
        return self.messages[start - self.offset : max(start, last) - self.offset]

    def index_of(self, message_id: str) -> int | None:
        """The absolute index of the user message with this platform id, FILED if it was
        consolidated recently, None if unknown."""
        found = self.message_ids.get(message_id)
        if found is not None:
            return found
        return FILED if message_id in self.filed_ids else None

    def unconsolidated(self) -> list[dict[str, Any]]:
        """The messages not yet folded into MEMORY.md / HISTORY.md."""
        return self.span(self.last_consolidated)

    def history(self) -> list[dict[str, Any]]:
        """The unconsolidated messages as the LLM should see them.

        Starts at a user message (a provider rejects a conversation that opens with a tool result
        or a dangling assistant turn), drops tool results whose call is not in the slice, and keeps
        only the fields a chat completion takes.

        WHY kept between calls: a turn asks for it once per model call, and rebuilding every
        message cost O(history) each time; messages are only appended, so what was built stays
        right until the cursor moves or the session is reloaded, and appended plain messages
        (no tool call or result, which could change what is kept before them) extend it.
        """
        shape = (self.epoch, self.offset, self.last_consolidated)
        built = self._history
        if built is not None and built[0] == shape and built[2]:
            _, upto, result = built
            fresh = self.messages[upto - self.offset :]
            if all(_plain(message) for message in fresh):
                if fresh:
                    result = result + [_clean(message) for message in fresh]
                    self._history = (shape, self.total, result)
                return list(result)
        result = self._build_history()
        self._history = (shape, self.total, result)
        return list(result)

    def _build_history(self) -> list[dict[str, Any]]:
        pending = self.unconsolidated()
        first_user = next(
            (i for i, message in enumerate(pending) if message.get("role") == "user"), None
        )
        if first_user is None:
            return []
        window = pending[first_user:]
        answered = {m.get("tool_call_id") for m in window if m.get("role") == "tool"}
        result: list[dict[str, Any]] = []
        call_ids: set[str | None] = set()
        for message in window:
            clean = _clean(message)
            if message.get("role") == "assistant" and message.get("tool_calls"):
                # A turn cut short (a crash between a call and its result) leaves calls without
                # results, which providers reject: keep only the calls that were answered.
                calls = [c for c in message["tool_calls"] if _call_id(c) in answered]
                call_ids.update(_call_id(c) for c in calls)
                if calls:
                    clean["tool_calls"] = calls
                else:
                    clean.pop("tool_calls")
                    if not clean.get("content"):
                        continue
            elif message.get("role") == "tool" and message.get("tool_call_id") not in call_ids:
                continue
            result.append(clean)
        return result

    def _note(self, record: dict[str, Any], index: int) -> None:
        message_id = _message_id(record)
        if message_id is not None:
            self.message_ids[message_id] = index

    def _drop_before(self, index: int) -> None:
        """Forget the messages before absolute `index` (consolidated: they stay on disk)."""
        self._history = None  # it holds copies of them
        count = min(max(0, index - self.offset), len(self.messages))
        if not count:
            return
        for record in self.messages[:count]:
            message_id = _message_id(record)
            if message_id is not None:
                self.message_ids.pop(message_id, None)
                self.filed_ids.append(message_id)
        self.messages = self.messages[count:]
        self.positions = self.positions[count:]
        self.offset += count


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    """Only the fields a chat completion takes; a user message told the time it was written.

    WHY here: the time comes from the message's own timestamp, so every request carries the
    same bytes for it and the provider's cached prefix holds, while the file keeps only what
    the person wrote (memory.clock.told)."""
    clean = {name: message[name] for name in LLM_FIELDS if name in message}
    if message.get("role") == "user":
        prefix = clock.told(message.get("timestamp"))
        if prefix:
            clean["content"] = _told(clean.get("content"), prefix)
    return clean


def _told(content: Any, prefix: str) -> Any:
    if isinstance(content, str):
        return prefix + content
    if not isinstance(content, list):
        return content
    first = content[0] if content else None
    text = first.get("text") if isinstance(first, dict) else None
    if isinstance(first, dict) and first.get("type") == "text" and isinstance(text, str):
        return [{**first, "text": prefix + text}, *content[1:]]
    return [{"type": "text", "text": prefix}, *content]


def as_written(record: dict[str, Any]) -> dict[str, Any]:
    """A message read from a file as the person wrote it: a user message stored before the
    time was added when the prompt is built loses the "[Current time: …]" line its text
    began with (the prompt adds the same line back from its timestamp). Changed in place."""
    if record.get("role") != "user":
        return record
    content = record.get("content")
    if isinstance(content, str):
        record["content"] = clock.without_told(content)
    elif isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        if content[0].get("type") == "text" and isinstance(text, str):
            record["content"] = [{**content[0], "text": clock.without_told(text)}, *content[1:]]
    return record


def as_written_line(raw: bytes) -> bytes:
    """One line of a session file, its user message as the person wrote it (as_written);
    any other line as it is."""
    if b"[Current time: " not in raw:
        return raw
    try:
        record = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(record, dict) or record.get("role") != "user":
        return raw
    before = record.get("content")
    after = as_written(record).get("content")
    return raw if after == before else _line(record).rstrip(b"\n")


def _plain(message: dict[str, Any]) -> bool:
    """Neither a tool call nor a tool result: what history() keeps of it depends on it alone."""
    return message.get("role") != "tool" and not message.get("tool_calls")


def _call_id(call: Any) -> str | None:
    return call.get("id") if isinstance(call, dict) else None


def _message_id(record: dict[str, Any]) -> str | None:
    """The platform id of a user message (what a redelivery carries again)."""
    if record.get("role") != "user" or record.get("message_id") is None:
        return None
    return str(record["message_id"])


def _metadata_record(session: Session, cursor_byte: int | None = None) -> dict[str, Any]:
    record = {
        "_type": METADATA_TYPE,
        "key": session.key,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "last_consolidated": session.last_consolidated,
        "metadata": session.metadata,
    }
    if cursor_byte is not None:
        record["cursor_byte"] = cursor_byte
    if session.filed_ids:
        record["recent_ids"] = list(session.filed_ids)
    return record


def _line(record: dict[str, Any]) -> bytes:
    # json.dumps escapes "\n", so a record is always exactly one line.
    try:
        return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: as a "\ud800" escape it reloads intact
        return (json.dumps(record) + "\n").encode("ascii")


class SessionStore:
    """The sessions of one workspace, cached so each loaded key has exactly one Session object
    (the agent evicts idle ones: `evict`)."""

    def __init__(self, sessions_dir: Path) -> None:
        self.sessions_dir = Path(sessions_dir)
        self._cache: dict[str, Session] = {}

    def path_for(self, key: str) -> Path:
        """sessions/<encode_key(key)>.jsonl, which cannot lie outside the sessions folder."""
        return self.sessions_dir / f"{encode_key(key)}.jsonl"

    def get(self, key: str) -> Session:
        """The session for `key`: loaded from its file once, or new (written on first change)."""
        session = self._cache.get(key)
        if session is None:
            path = self.path_for(key)
            session = _load(key, path) if path.exists() else Session(key=key, path=path)
            self._cache[key] = session
        return session

    def loaded(self) -> list[str]:
        """The keys of the sessions held in RAM."""
        return list(self._cache)

    def evict(self, key: str) -> None:
        """Drop the cached Session; the next get() loads it from the disk."""
        self._cache.pop(key, None)

    def reload(self, session: Session) -> None:
        """Re-read `session` from its file into the same object (after the file was rewritten)."""
        fresh = _load(session.key, session.path) if session.path.exists() else None
        fresh = fresh or Session(key=session.key, path=session.path)
        epoch = session.epoch
        for name in Session.__dataclass_fields__:
            setattr(session, name, getattr(fresh, name))
        session.epoch = epoch + 1

    def read_all(self, session: Session) -> list[dict[str, Any]]:
        """Every message of the session, the consolidated ones too, read from the disk."""
        if not session.path.exists():
            return list(session.messages)
        with open_binary(session.path) as file:
            data = file.read()
        return [record for _, record in _message_lines(data, 0, session.path)]

    def append(self, session: Session, message: dict[str, Any]) -> None:
        """Persist one message as one appended line, then add it to `session.messages`."""
        if not isinstance(message.get("role"), str):
            raise ValueError("a session message needs a string 'role'")
        record = dict(message)
        if "timestamp" not in record:  # (not setdefault: it would read the clock every time)
            record["timestamp"] = _now()
        line = _line(record)  # serialise first: a bad message changes nothing
        position = self._append_line(session, line)
        session._note(record, session.total)
        session.messages.append(record)
        session.positions.append(position)
        session.updated_at = record["timestamp"] if isinstance(record["timestamp"], str) else _now()

    def set_last_consolidated(self, session: Session, index: int) -> None:
        """Move the consolidation cursor (first message not yet consolidated); the messages
        before it leave RAM once the move is on disk."""
        if not session.offset <= index <= session.total:
            raise ValueError(f"last_consolidated {index} outside {session.offset}..{session.total}")
        session.last_consolidated = index
        session.updated_at = _now()
        filed = [m for m in (_message_id(r) for r in session.span(session.offset, index)) if m]
        recent = deque(session.filed_ids, maxlen=RECENT_IDS)
        recent.extend(filed)
        saved = session.filed_ids
        session.filed_ids = recent  # written with the record; the RAM copy follows below
        try:
            self._append_line(session, None)
        finally:
            session.filed_ids = saved
        session._drop_before(index)

    def save_metadata(self, session: Session) -> None:
        """Append the session's metadata record as it is now (the cursor unchanged)."""
        self._append_line(session, None)

    def keys(self) -> list[str]:
        """Session keys with a file in this workspace, sorted."""
        try:
            paths = [p for p in self.sessions_dir.iterdir() if p.name.endswith(".jsonl")]
        except FileNotFoundError:
            return []
        found = []
        for path in paths:
            key = decode_key(path.name[: -len(".jsonl")])
            if key is None:
                key = _key_from_file(path)
            if key is not None:
                found.append(key)
        return sorted(found)

    def _append_line(self, session: Session, line: bytes | None) -> int:
        """One whole O_APPEND write (or none: OSError): the header first for a new file, a "\\n"
        after a torn line. `line` None: a metadata record, built here where it is known at which
        byte the cursor's message starts. Returns the byte position of the line written. A
        session file that is a link is refused (LinkRefusedError)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        try:
            fd = open_fd(session.path, flags, PRIVATE_FILE_MODE)
        except FileNotFoundError:  # first write of the workspace: make the folder once
            make_private_dir(self.sessions_dir)
            fd = open_fd(session.path, flags, PRIVATE_FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            prefix = b""
            if size == 0 and line is not None:
                # Only a fresh session has nothing before its cursor: the cursor is the header.
                prefix = _line(_metadata_record(session, 0 if session.total == 0 else None))
            elif size and os.pread(fd, 1, size - 1) != b"\n":
                prefix = b"\n"
            start = size + len(prefix)
            if line is None:
                line = _line(_metadata_record(session, _cursor_byte(session, start)))
            append_all(fd, prefix + line)
            return start
        finally:
            os.close(fd)


def _cursor_byte(session: Session, next_line: int) -> int | None:
    """Where the cursor's message starts in the file (`next_line` when it is yet to come)."""
    index = session.last_consolidated - session.offset
    if 0 <= index < len(session.positions):
        return session.positions[index]
    return next_line if index == len(session.messages) else None


# ---- loading ----------------------------------------------------------------------------------


def _load(key: str, path: Path) -> Session:
    """Read a session file, skipping (with a warning) any line that is not a valid record.

    With a trustworthy `cursor_byte` in the last metadata record, only the bytes from there
    on are read; otherwise the file is read once, keeping only the messages from the cursor on.
    """
    session = Session(key=key, path=path)
    with open_binary(path) as file:
        size = os.fstat(file.fileno()).st_size
        last = _last_metadata(file, size)
        start = _seek_point(file, last, size, key)
        if last is not None and start is not None:
            record, _ = last
            _apply_metadata(session, record, path)
            session.offset = session.last_consolidated
            recent = record.get("recent_ids")
            if isinstance(recent, list):
                session.filed_ids.extend(str(i) for i in recent[-RECENT_IDS:])
            file.seek(start)
            _read_tail(session, file.read(), start, session.offset, path)
        else:
            file.seek(0)
            keep_from = last[0].get("last_consolidated") if last is not None else None
            if not isinstance(keep_from, int) or isinstance(keep_from, bool):
                keep_from = 0
            data = file.read()
            again = _read_whole(session, data, keep_from, path)
            if again is not None:
                session = Session(key=key, path=path)
                _read_whole(session, data, again, path)
    newest = clock.parse(session.messages[-1].get("timestamp")) if session.messages else None
    if newest is not None and newest > (clock.parse(session.updated_at) or newest):
        session.updated_at = session.messages[-1]["timestamp"]
    return session


def _read_tail(session: Session, data: bytes, base: int, index: int, path: Path) -> None:
    """The messages from the cursor on; metadata records here are older than the last one."""
    for position, record in _message_lines(data, base, path):
        session._note(record, index)
        session.messages.append(record)
        session.positions.append(position)
        index += 1


def _read_whole(session: Session, data: bytes, keep_from: int, path: Path) -> int | None:
    """A file without a usable cursor_byte (older, or rewritten): every line is parsed, and
    only the messages from `keep_from` on are kept. Returns the cursor to read again from when
    the records replayed put it before `keep_from` (else None)."""
    index = 0
    for position, record in _message_lines(data, 0, path, session):
        if index >= keep_from:
            session._note(record, index)
            session.messages.append(record)
            session.positions.append(position)
        else:
            message_id = _message_id(record)
            if message_id is not None:
                session.filed_ids.append(message_id)
        index += 1
    cursor = min(max(0, session.last_consolidated), index)
    if cursor < keep_from:
        return cursor
    session.last_consolidated = cursor
    session.offset = keep_from
    session._drop_before(cursor)
    return None


def _message_lines(
    data: bytes, base: int, path: Path, session: Session | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(byte position, record) of each message line; metadata records go to `session` (when
    given); other lines are skipped with a warning."""
    lines = data.split(b"\n")  # only "\n" ends a line; U+2028 etc. are content
    last_line = len(lines) - 1
    position = base
    for number, raw in enumerate(lines):
        at = position
        position += len(raw) + 1
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            where = "torn last line" if number == last_line else "unreadable line"
            log.warning("session %s: skipping %s at byte %d", path.name, where, at)
            continue
        if record.get("_type") == METADATA_TYPE:
            if session is not None:
                _apply_metadata(session, record, path)
        elif isinstance(record.get("role"), str):
            yield at, as_written(record)
        else:
            log.warning("session %s: skipping a line at byte %d (not a message)", path.name, at)


def _last_metadata(file: BinaryIO, size: int) -> tuple[dict[str, Any], int] | None:
    """The newest metadata record and its byte position, read backwards from the end (so a
    long consolidated past is not read)."""
    end = size
    carry = b""
    while end > 0:
        start = max(0, end - _SCAN_BLOCK)
        file.seek(start)
        chunk = file.read(end - start) + carry
        lines = chunk.split(b"\n")
        carry = lines.pop(0) if start > 0 else b""
        positions = []
        at = start + (len(carry) + 1 if start > 0 else 0)
        for raw in lines:
            positions.append(at)
            at += len(raw) + 1
        for raw, at in zip(reversed(lines), reversed(positions), strict=True):
            if raw.startswith(_METADATA_PREFIXES):
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict) and record.get("_type") == METADATA_TYPE:
                    return record, at
        end = start
    return None


def _seek_point(
    file: BinaryIO, last: tuple[dict[str, Any], int] | None, size: int, key: str
) -> int | None:
    """The byte to read from, if the last record's cursor_byte can be trusted: a line start
    no later than the record itself, in a record of this key with a valid cursor."""
    if last is None:
        return None
    record, at = last
    cursor_byte, cursor = record.get("cursor_byte"), record.get("last_consolidated")
    if record.get("key") not in (None, key):
        return None
    if not _natural(cursor_byte) or not _natural(cursor):
        return None
    assert isinstance(cursor_byte, int)  # for the type checker: _natural checked it
    if cursor_byte > at or cursor_byte > size:
        return None
    if cursor_byte > 0:
        file.seek(cursor_byte - 1)
        if file.read(1) != b"\n":
            return None
    return cursor_byte


def _apply_metadata(session: Session, record: dict[str, Any], path: Path) -> None:
    if record.get("key") not in (None, session.key):
        log.warning("session %s: metadata names another key; ignored", path.name)
        return
    cursor = record.get("last_consolidated")
    if isinstance(cursor, int) and not isinstance(cursor, bool):
        session.last_consolidated = cursor
    for name in ("created_at", "updated_at"):
        if isinstance(record.get(name), str):
            setattr(session, name, record[name])
    if isinstance(record.get("metadata"), dict):
        session.metadata = record["metadata"]


def _key_from_file(path: Path) -> str | None:
    """The key recorded in a session file's first metadata record (for hashed file names)."""
    try:
        with open_binary(path) as file:
            record = json.loads(file.readline())
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and isinstance(record.get("key"), str):
        return record["key"]
    return None


def _natural(value: object) -> bool:
    """An int of 0 or more (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
