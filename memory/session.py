"""Append-only JSONL transcripts, one file per session key.

Line 1 is a metadata record; every later change of metadata is appended as another full record
and the last one wins. Messages are appended one line each and never rewritten, so persisting a
message costs O(1) and a crash can damage at most the line being written, which load skips.

WHY only the tail is kept in RAM: a turn needs the messages from the consolidation cursor on;
the consolidated past is on disk (in HISTORY.md too) and would cost RAM for every message ever
said. A metadata record says where in the file the cursor's message starts (`cursor_byte`), so a
load seeks there instead of reading the past, and it keeps the platform ids of the last user
messages consolidated (`recent_ids`), so a redelivered message is still recognised.

Three more kinds of record change no message line and are appended like them (bot/agent/
conversation.py writes them): `withdrawn` (/undo: the user message of a turn and everything
after it, up to the record, leave the conversation), `superseded` (/retry: the answer after a
turn's user message, up to the record, leaves it) and `sent` (the platform ids under which the
answer to a user message was sent, so a reply to it finds its text here). A record names its
turn by the user message's `turn` id, never by a position, which /forget would shift. Withdrawn
and superseded messages stay on disk; in RAM they carry HIDDEN, so neither the prompt, the token
estimate nor consolidation sees them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
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
from memory.threads import polite

log = logging.getLogger(__name__)

METADATA_TYPE = "metadata"
WITHDRAWN = "withdrawn"  # record type, and why a message is hidden: /undo took it back
SUPERSEDED = "superseded"  # record type, and why a message is hidden: /retry replaced it
SENT = "sent"  # record type: the platform ids of an answer
HIDDEN = "_hidden"  # in RAM only: why a message left the conversation (WITHDRAWN, SUPERSEDED)
TURN = "turn"  # a user message's id, by which the records above name its turn
REPLY_TO = "reply_to"  # a user message's context: what the person replied to (reply_context)
REMINDER_MARK = "reminder"  # an assistant message that is a reminder sent, not an answer
# A tool result from outside the bot (a web page, search results): the model of the turn reads
# it, consolidation only its length (memory/consolidation/asking.py): it can carry instructions.
OUTSIDE = "outside"
# A tool result quoting the person's own history (search_history's hits): the model of the turn
# reads it, consolidation and raw archives only its length. The entries are kept already, and
# archived again each search nested the last (a real model that searched every turn filled
# HISTORY.md with archives quoting archives).
QUOTED = "quoted"
LLM_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")
RECENT_IDS = 32  # platform ids of consolidated user messages remembered per session
FILED = -1  # index_of(): the message was consolidated (it is no longer in RAM)
_METADATA_PREFIXES = (b'{"_type": "metadata"', b'{"_type":"metadata"')
_SCAN_BLOCK = 1 << 16
# A session file that reads its past from here on is loaded in a thread (session_for): reading
# 20,000 messages took ~0.3 s, during which nobody else was answered.
LOAD_IN_THREAD_BYTES = 1 << 20
MIN_MESSAGE_LINE = len(b'{"role":"x"}\n')  # the shortest line a message can have


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
    # A platform id the bot sent an answer under → the absolute index of that answer (in RAM).
    sent: dict[str, int] = field(default_factory=dict)
    # The platform id of a /retry → that of the user message it answered again, until the
    # receipt of its answer comes (record_sent).
    retried: dict[str, str] = field(default_factory=dict)
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

    def last_turn(self) -> int | None:
        """The absolute index of the newest user message still in the conversation (not
        consolidated, not withdrawn), or None."""
        for index in range(self.total - 1, max(self.offset, self.last_consolidated) - 1, -1):
            message = self.messages[index - self.offset]
            if message.get("role") == "user" and not message.get(HIDDEN):
                return index
        return None

    def answer_of(self, index: int) -> int | None:
        """The absolute index of the answer to the user message at `index`: the last assistant
        message without tool calls before the next user message, or None."""
        found = None
        for at in range(index + 1, self.total):
            message = self.messages[at - self.offset]
            if message.get("role") == "user":
                break
            if message.get("role") == "assistant" and not message.get("tool_calls"):
                found = at
        return found

    def _hide(self, start: int, why: str) -> None:
        """Messages from absolute `start` on (those in RAM) leave the conversation."""
        for message in self.messages[max(0, start - self.offset) :]:
            message.setdefault(HIDDEN, why)
        self._history = None
        self.epoch += 1  # every cache derived from the messages (token sums) rebuilds

    def _turn_index(self, turn: Any) -> int | None:
        """The absolute index of the user message with this turn id (searched from the newest:
        records name recent turns), or None if it is not in RAM."""
        if not isinstance(turn, str):
            return None
        for at in range(len(self.messages) - 1, -1, -1):
            message = self.messages[at]
            if message.get(TURN) == turn and message.get("role") == "user":
                return self.offset + at
        return None

    def _apply_record(self, record: dict[str, Any]) -> None:
        """A withdrawn, superseded or sent record read after the messages it names."""
        kind = record.get("_type")
        if kind in (WITHDRAWN, SUPERSEDED):
            index = self._turn_index(record.get(TURN))
            if index is not None:
                self._hide(index if kind == WITHDRAWN else index + 1, kind)
        elif kind == SENT:
            asked = self.message_ids.get(str(record.get("to")))
            answer = None if asked is None else self.answer_of(asked)
            ids = record.get("ids")
            if answer is not None and isinstance(ids, list):
                self.sent.update((str(i), answer) for i in ids)

    def history(self, since: int | None = None) -> list[dict[str, Any]]:
        """The unconsolidated messages (from absolute index `since`, when later than the
        cursor: the newest part of a backlog) as the LLM should see them.

        Starts at a user message (a provider rejects a conversation that opens with a tool result
        or a dangling assistant turn), drops tool results whose call is not in the slice, and keeps
        only the fields a chat completion takes. Reminders sent before that first user message (a
        new chat, or just after /new) are told in it (_reminders_told), so the model knows
        what the person answers.

        WHY kept between calls: a turn asks for it once per model call, and rebuilding every
        message cost O(history) each time; messages are only appended, so what was built stays
        right until the cursor moves or the session is reloaded, and appended plain messages
        (no tool call or result, which could change what is kept before them) extend it.
        """
        if since is not None and since > self.last_consolidated:
            return self._build_history(self.span(since))  # a backlog's tail: not kept
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

    def _build_history(self, pending: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        pending = self.unconsolidated() if pending is None else pending
        pending = [message for message in pending if not message.get(HIDDEN)]
        first_user = next(
            (i for i, message in enumerate(pending) if message.get("role") == "user"), None
        )
        if first_user is None:
            return []
        reminders = [message for message in pending[:first_user] if message.get(REMINDER_MARK)]
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
        if reminders:
            opening = result[0]  # the first user message: never left out
            result[0] = {
                **opening,
                "content": _told(opening.get("content"), _reminders_told(reminders)),
            }
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
        if self.sent:
            self.sent = {i: at for i, at in self.sent.items() if at >= self.offset}


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    """Only the fields a chat completion takes; a user message told the time it was written,
    then what it replied to (reply_context), then its text.

    WHY here: the time comes from the message's own timestamp, so every request carries the
    same bytes for it and the provider's cached prefix holds, while the file keeps only what
    the person wrote (memory.clock.told)."""
    clean = {name: message[name] for name in LLM_FIELDS if name in message}
    if message.get("role") == "user":
        context = reply_context(message)
        if context:
            clean["content"] = _told(clean.get("content"), context)
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


def reply_context(message: dict[str, Any]) -> str:
    """What a user message replied to, as the model is told it before the message ("" for
    none). Built from the stored `reply_to` alone, so every request carries the same bytes."""
    reply = message.get(REPLY_TO) if message.get("role") == "user" else None
    if not isinstance(reply, dict) or not isinstance(reply.get("text"), str):
        return ""
    who = reply.get("who")
    name = str(reply.get("name") or "someone")
    whose = {"bot": "your", "self": "their own"}.get(str(who), f"{name}'s")
    if reply.get("above"):  # already in the conversation: a pointer, not the text again
        return f'[In reply to {whose} message above that begins "{reply["text"]}"]\n'
    what = f"quoting {whose} message" if reply.get("quote") else f"in reply to {whose} message"
    quoted = "\n".join(f"> {line}" for line in reply["text"].splitlines() or [""])
    return f"[{what[0].upper()}{what[1:]}:]\n{quoted}\n\n"


def _reminders_told(reminders: list[dict[str, Any]]) -> str:
    """The reminders sent before a conversation's first user message, as the model is told them
    before that message: as an assistant turn of their own they would open the conversation,
    which providers refuse. Built from the stored notes alone (their text and time), so every
    request carries the same bytes."""
    told = []
    for note in reminders:
        moment = clock.parse(note.get("timestamp"))
        when = f" at {moment.strftime(clock.HISTORY_STAMP)} UTC" if moment is not None else ""
        lines = str(note.get("content") or "").splitlines() or [""]
        told.append(
            f"[You sent them this reminder{when}:]\n" + "\n".join(f"> {line}" for line in lines)
        )
    return "\n\n".join(told) + "\n\n"


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
        record["total"] = session.total  # the messages before this record, to check it by
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

    async def load(self, key: str) -> Session:
        """get(), with a large file read in a thread (a backlog: the event loop serves
        everyone else meanwhile)."""
        session = self._cache.get(key)
        if session is not None:
            return session
        path = self.path_for(key)
        try:
            large = path.stat().st_size > LOAD_IN_THREAD_BYTES
        except OSError:
            large = False
        if large:
            import asyncio  # (not at the top: the reading commands run without an event loop)

            loaded = await asyncio.to_thread(_load, key, path)
            return self._cache.setdefault(key, loaded)
        return self.get(key)

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
        everything = Session(key=session.key, path=session.path)
        _read_tail(everything, data, 0, 0, session.path)
        return everything.messages

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

    def withdraw(self, session: Session, index: int) -> None:
        """/undo: the user message at absolute `index` and everything after it leave the
        conversation (one appended record; the lines stay on disk)."""
        self._append_record(session, WITHDRAWN, index)
        session._hide(index, WITHDRAWN)

    def supersede(self, session: Session, index: int) -> None:
        """/retry: what follows the user message at absolute `index` leaves the conversation."""
        self._append_record(session, SUPERSEDED, index)
        session._hide(index + 1, SUPERSEDED)

    def _append_record(self, session: Session, kind: str, index: int) -> None:
        turn = session.span(index, index + 1)[0].get(TURN)
        if not isinstance(turn, str):
            raise ValueError("that message has no turn id (written by an older version)")
        self._append_line(session, _line({"_type": kind, TURN: turn, "timestamp": _now()}))

    def record_sent(self, session: Session, message_id: str, ids: list[str]) -> bool:
        """The answer to the user message with platform id `message_id` (or to the /retry of
        one, Session.retried) was sent as `ids` (platform ids); False if that message is not in
        RAM or has no answer (a command's)."""
        message_id = session.retried.pop(message_id, message_id)
        asked = session.message_ids.get(message_id)
        answer = None if asked is None else session.answer_of(asked)
        if answer is None or not ids:
            return False
        self._append_line(session, _line({"_type": SENT, "to": message_id, "ids": ids}))
        session.sent.update((i, answer) for i in ids)
        return True

    @staticmethod
    def sent_answer(session: Session, platform_id: str) -> tuple[str, bool] | None:
        """The text of the answer the bot sent as `platform_id` while it is in RAM, and
        whether it is still in the conversation (not withdrawn or superseded); None if not in
        RAM (consolidated: sent_on_disk reads it, or never sent from this session)."""
        index = session.sent.get(platform_id)
        if index is None or index < session.offset:
            return None
        message = session.span(index, index + 1)[0]
        shown = index >= session.last_consolidated and not message.get(HIDDEN)
        return text_of(message.get("content")), shown

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
        # (A record other than a message is never the first line: its messages come first.)
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
            record, at = last
            _apply_metadata(session, record, path)
            session.offset = session.last_consolidated
            recent = record.get("recent_ids")
            if isinstance(recent, list):
                session.filed_ids.extend(str(i) for i in recent[-RECENT_IDS:])
            file.seek(start)
            _read_tail(session, file.read(), start, session.offset, path)
            if not _tail_agrees(session, record, at):
                log.warning(
                    "session %s: its cursor disagrees with the file; read whole", path.name
                )
                session = Session(key=key, path=path)
                start = None
        if last is None or start is None:
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


def _tail_agrees(session: Session, record: dict[str, Any], at: int) -> bool:
    """Whether the messages read from the record's cursor_byte are the ones it calls
    unconsolidated: as many before the record as it counted ("total"; older records have no
    count: then the past before cursor_byte must at least have room for the messages it
    claims). A cursor that says a position before messages it claims are consolidated would
    put those messages back into the conversation under the wrong numbers."""
    total = record.get("total")
    if _natural(total):
        assert isinstance(total, int)
        before = sum(1 for position in session.positions if position < at)
        return before == total - session.last_consolidated
    return int(record.get("cursor_byte") or 0) >= session.last_consolidated * MIN_MESSAGE_LINE


def _read_tail(session: Session, data: bytes, base: int, index: int, path: Path) -> None:
    """The messages from the cursor on; metadata records here are older than the last one."""
    for position, record in _records(data, base, path):
        if record.get("_type") in CONVERSATION_RECORDS:
            session._apply_record(record)
        elif "_type" not in record:
            session._note(record, index)
            session.messages.append(record)
            session.positions.append(position)
            index += 1


def _read_whole(session: Session, data: bytes, keep_from: int, path: Path) -> int | None:
    """A file without a usable cursor_byte (older, or rewritten): every line is parsed, and
    only the messages from `keep_from` on are kept. Returns the cursor to read again from when
    the records replayed put it before `keep_from` (else None)."""
    index = 0
    session.offset = keep_from  # messages[0] will be message `keep_from`
    for position, record in _records(data, 0, path):
        if record.get("_type") == METADATA_TYPE:
            _apply_metadata(session, record, path)
        elif record.get("_type") in CONVERSATION_RECORDS:
            session._apply_record(record)
        elif index >= keep_from:
            session._note(record, index)
            session.messages.append(record)
            session.positions.append(position)
            index += 1
        else:
            message_id = _message_id(record)
            if message_id is not None:
                session.filed_ids.append(message_id)
            index += 1
    cursor = min(max(0, session.last_consolidated), index)
    if cursor < keep_from:
        return cursor
    session.last_consolidated = cursor
    session._drop_before(cursor)
    return None


CONVERSATION_RECORDS = frozenset({WITHDRAWN, SUPERSEDED, SENT})


# One non-blank line of a session file (read_lines): where it starts, its bytes, the record it
# holds (a message as written, metadata, or a conversation record), or None with why it holds
# none ("torn last line", "unreadable line", "a line that is not a message"; else ""). A plain
# tuple: a long session makes one per message while it loads (a NamedTuple took 10 ms more
# than the 65 ms of parsing 20,000 lines).
Line = tuple[int, bytes, dict[str, Any] | None, str]


def read_lines(data: bytes, base: int = 0) -> Iterator[Line]:
    """Every non-blank line of a session file's bytes (`data`, which starts at byte `base`), in
    file order: the one reader of the transcripts (loading here, /forget rewriting them), so
    both agree on what a line holds and both survive a torn or hand-edited one."""
    lines = data.split(b"\n")  # only "\n" ends a line; U+2028 etc. are content
    last_line = len(lines) - 1
    position = base
    for number, raw in enumerate(polite(lines)):  # (SessionStore.load reads in a thread)
        at = position
        position += len(raw) + 1
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            why = "torn last line" if number == last_line else "unreadable line"
            yield at, raw, None, why
            continue
        kind = record.get("_type")
        if kind == METADATA_TYPE or kind in CONVERSATION_RECORDS:
            yield at, raw, record, ""
        elif kind is None and isinstance(record.get("role"), str):
            yield at, raw, as_written(record), ""
        else:
            yield at, raw, None, "a line that is not a message"


def _records(data: bytes, base: int, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(byte position, record) of each message line and of each record the session knows
    (metadata, withdrawn, superseded, sent; a message has no `_type`), in file order; any other
    line is skipped with a warning."""
    for at, _, record, why in read_lines(data, base):
        if record is None:
            log.warning("session %s: skipping %s at byte %d", path.name, why, at)
        else:
            yield at, record


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


# ---- an answer's text by the platform id it was sent as ------------------------------------


def text_of(content: Any) -> str:
    """A message's text (the text parts of one with parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def sent_on_disk(path: Path, platform_id: str) -> str | None:
    """The text of the answer a `sent` record in the file names `platform_id` for, read from
    the disk (it was consolidated): the record is found by its bytes, then the answer after
    the user message it names. WHY by bytes: the whole file is never parsed for one reply."""
    try:
        with open_binary(path) as file, _mapped(file) as data:
            needle = _json_bytes(platform_id)
            at = data.rfind(needle)
            while at >= 0:
                start, record = _line_at(data, at)
                if record.get("_type") == SENT and platform_id in (record.get("ids") or ()):
                    return _answer_before(data, start, str(record.get("to")))
                at = data.rfind(needle, 0, start)
    except FileNotFoundError:
        pass
    return None


def _json_bytes(value: str) -> bytes:
    """`value` as a JSON string, spelt as _line writes it."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@contextlib.contextmanager
def _mapped(file: BinaryIO) -> Iterator[mmap.mmap | bytes]:
    """The file's bytes without reading them all into RAM (an empty file: b"")."""
    if os.fstat(file.fileno()).st_size == 0:
        yield b""
        return
    with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        yield data


def _line_at(data: mmap.mmap | bytes, at: int) -> tuple[int, dict[str, Any]]:
    """(start, parsed record or {}) of the line holding byte `at`."""
    start = data.rfind(b"\n", 0, at) + 1
    end = data.find(b"\n", at)
    try:
        record = json.loads(data[start : len(data) if end < 0 else end])
    except ValueError:
        record = None
    return start, record if isinstance(record, dict) else {}


def _answer_before(data: mmap.mmap | bytes, limit: int, message_id: str) -> str | None:
    """The answer to the user message `message_id`, which lies before byte `limit`."""
    needle = _json_bytes(message_id)
    at = data.rfind(needle, 0, limit)
    while at >= 0:
        start, record = _line_at(data, at)
        if record.get("role") == "user" and _message_id(record) == message_id:
            break
        at = data.rfind(needle, 0, start)
    else:
        return None
    answer = None
    position = data.find(b"\n", at) + 1
    while 0 < position < limit:
        _, record = _line_at(data, position)
        if record.get("role") == "user":
            break
        if record.get("role") == "assistant" and not record.get("tool_calls"):
            answer = text_of(record.get("content"))
        position = data.find(b"\n", position) + 1
    return answer
