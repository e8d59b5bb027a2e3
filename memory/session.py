"""Append-only JSONL transcripts, one file per session key.

Line 1 is a metadata record; every later change of metadata is appended as another full record
and the last one wins. Messages are appended one line each and never rewritten, so persisting a
message costs O(1) and a crash can damage at most the line being written, which load skips.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory import clock
from memory.atomic import PRIVATE_FILE_MODE
from memory.keys import decode_key, encode_key
from memory.safefs import append_all, make_private_dir, open_binary, open_fd, read_bytes

log = logging.getLogger(__name__)

METADATA_TYPE = "metadata"
LLM_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _now() -> str:
    return clock.iso()


@dataclass(eq=False)
class Session:
    """One conversation thread; `messages` mirrors the file's message lines in order."""

    key: str
    path: Path
    messages: list[dict[str, Any]] = field(default_factory=list)
    last_consolidated: int = 0
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    metadata: dict[str, Any] = field(default_factory=dict)

    def unconsolidated(self) -> list[dict[str, Any]]:
        """The messages not yet folded into MEMORY.md / HISTORY.md."""
        return self.messages[self.last_consolidated :]

    def history(self) -> list[dict[str, Any]]:
        """The unconsolidated messages as the LLM should see them.

        Starts at a user message (a provider rejects a conversation that opens with a tool result
        or a dangling assistant turn), drops tool results whose call is not in the slice, and keeps
        only the fields a chat completion takes.
        """
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
            clean = {name: message[name] for name in LLM_FIELDS if name in message}
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


def _call_id(call: Any) -> str | None:
    return call.get("id") if isinstance(call, dict) else None


def _metadata_record(session: Session) -> dict[str, Any]:
    return {
        "_type": METADATA_TYPE,
        "key": session.key,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "last_consolidated": session.last_consolidated,
        "metadata": session.metadata,
    }


def _line(record: dict[str, Any]) -> bytes:
    # json.dumps escapes "\n", so a record is always exactly one line.
    try:
        return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: as a "\ud800" escape it reloads intact
        return (json.dumps(record) + "\n").encode("ascii")


class SessionStore:
    """The sessions of one workspace, cached so each key has exactly one Session object."""

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

    def append(self, session: Session, message: dict[str, Any]) -> None:
        """Persist one message as one appended line, then add it to `session.messages`."""
        if not isinstance(message.get("role"), str):
            raise ValueError("a session message needs a string 'role'")
        record = dict(message)
        record.setdefault("timestamp", _now())
        line = _line(record)  # serialise first: a bad message changes nothing
        self._append_line(session, line)
        session.messages.append(record)
        session.updated_at = record["timestamp"] if isinstance(record["timestamp"], str) else _now()

    def set_last_consolidated(self, session: Session, index: int) -> None:
        """Move the consolidation cursor (first message not yet consolidated)."""
        if not 0 <= index <= len(session.messages):
            raise ValueError(f"last_consolidated {index} outside 0..{len(session.messages)}")
        session.last_consolidated = index
        self._append_metadata(session)

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

    def _append_metadata(self, session: Session) -> None:
        session.updated_at = _now()
        self._append_line(session, _line(_metadata_record(session)), is_metadata=True)

    def _append_line(self, session: Session, line: bytes, is_metadata: bool = False) -> None:
        """One whole O_APPEND write (or none: OSError): the header first for a new file, a "\\n"
        after a torn line. A session file that is a link is refused (LinkRefusedError)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        try:
            fd = open_fd(session.path, flags, PRIVATE_FILE_MODE)
        except FileNotFoundError:  # first write of the workspace: make the folder once
            make_private_dir(self.sessions_dir)
            fd = open_fd(session.path, flags, PRIVATE_FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            if size == 0 and not is_metadata:
                data = _line(_metadata_record(session)) + line
            elif size == 0:
                data = line
            elif os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + line
            else:
                data = line
            append_all(fd, data)
        finally:
            os.close(fd)


def _load(key: str, path: Path) -> Session:
    """Read a session file, skipping (with a warning) any line that is not a valid record."""
    session = Session(key=key, path=path)
    lines = read_bytes(path).split(b"\n")  # only "\n" ends a line; U+2028 etc. are content
    last_line = len(lines) - 1
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            where = "torn last line" if number - 1 == last_line else "unreadable line"
            log.warning("session %s: skipping %s %d", path.name, where, number)
            continue
        if record.get("_type") == METADATA_TYPE:
            _apply_metadata(session, record, path)
        elif isinstance(record.get("role"), str):
            session.messages.append(record)
        else:
            log.warning("session %s: skipping line %d (not a message)", path.name, number)
    session.last_consolidated = min(max(0, session.last_consolidated), len(session.messages))
    last = clock.parse(session.messages[-1].get("timestamp")) if session.messages else None
    if last is not None and last > (clock.parse(session.updated_at) or last):
        session.updated_at = session.messages[-1]["timestamp"]
    return session


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
