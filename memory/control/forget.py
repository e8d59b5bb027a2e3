"""Forgetting: remove every trace of a phrase from one user's workspace.

What matches, case-insensitively and with any whitespace between its words:
- MEMORY.md: each line holding the phrase is removed (no version of the old text is kept);
- earlier MEMORY.md versions (`.memory_versions/`): the same lines are removed from each;
- HISTORY.md: each entry holding it is removed whole;
- transcripts (`sessions/*.jsonl`): each message that says it (in its text, its media's
  captions and names, its tool calls' arguments or its tool result; never its role, time or
  ids, see `said`), consolidated or not, is removed whole. Unconsolidated ones too: a message
  left in the prompt would be seen by the model and learnt again by the next consolidation. The
  `last_consolidated` cursor is moved back by the consolidated messages removed, and the
  searchable copy of the consolidated ones (memory/search/transcripts.py) is deleted;
- what linked accounts had before their link (`.pre-link/`, memory.control.link_snapshots):
  the same, in each copy's MEMORY.md and HISTORY.md, so /unlink never gives it back;
- stored media (`media/`): each file whose name (words may be joined by "-", "_" or ".") or
  text holds it is deleted, and so is each picture, voice message or file that only removed
  messages refer to (a picture whose caption holds the phrase goes with its message).

This is the one exception to "transcripts and HISTORY.md are append-only": each file that changes
is replaced whole and atomically (memory.atomic), so a crash at any instant leaves every file as
it was or as it should become, and loadable; running the same forget again finishes the work.
The caller makes sure nothing else writes this workspace meanwhile (the bot holds the user's
locks; the operator command holds the folder lock).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory.atomic import atomic_write_text, remove_stale_temp_files
from memory.media import MEDIA_DIR, is_ref, referenced_files
from memory.safefs import LinkRefusedError, read_bytes
from memory.search import history_index, meaning, transcripts
from memory.session import CONVERSATION_RECORDS, METADATA_TYPE, REPLY_TO, as_written, read_lines
from memory.store import ENTRY_STAMP, HISTORY_FILE, MEMORY_FILE
from memory.workspace import PRE_LINK_DIR, Workspace

log = logging.getLogger(__name__)

MIN_PHRASE_CHARS = 3
MAX_PHRASE_CHARS = 500  # a phrase, not a document (its question waits in RAM for a "yes")
# A HISTORY.md entry starts at the top of the file or after a blank line, with its stamp.
_ENTRY_START = re.compile(r"\n[ \t]*\n(?=" + ENTRY_STAMP + ")")


class ForgetError(ValueError):
    """A phrase that cannot be forgotten safely; the message is meant for the person."""


@dataclass
class Findings:
    """What matches a phrase (before) or what was removed (after)."""

    phrase: str
    memory_lines: list[str] = field(default_factory=list)
    history_entries: list[str] = field(default_factory=list)
    version_lines: int = 0
    versions: int = 0  # version files holding the phrase
    messages: int = 0
    sessions: int = 0  # transcripts holding the phrase
    media: list[str] = field(default_factory=list)
    reminders: list[str] = field(default_factory=list)  # what each reminder removed said
    pre_link: int = 0  # lines and entries of what linked accounts had before (link_snapshots)

    @property
    def total(self) -> int:
        return (
            len(self.memory_lines)
            + len(self.history_entries)
            + self.version_lines
            + self.messages
            + len(self.media)
            + len(self.reminders)
            + self.pre_link
        )

    def counts(self) -> list[str]:
        """One phrase per place, e.g. "2 lines of MEMORY.md"; places without a match left out."""
        parts = []
        if self.memory_lines:
            parts.append(_plural(len(self.memory_lines), "line") + " of MEMORY.md")
        if self.history_entries:
            parts.append(_plural(len(self.history_entries), "entry", "entries") + " of HISTORY.md")
        if self.version_lines:
            parts.append(
                f"{_plural(self.version_lines, 'line')} in "
                f"{_plural(self.versions, 'earlier memory version')}"
            )
        if self.messages:
            parts.append(
                f"{_plural(self.messages, 'message')} in {_plural(self.sessions, 'conversation')}"
            )
        if self.media:
            parts.append(_plural(len(self.media), "media file"))
        if self.reminders:
            parts.append(_plural(len(self.reminders), "reminder"))
        if self.pre_link:
            parts.append(
                f"{_plural(self.pre_link, 'line')} of the memory kept of before a /link "
                "(for /unlink)"
            )
        return parts


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else (plural or word + 's')}"


def phrase_pattern(words: str) -> re.Pattern[str]:
    """The phrase, any case, any whitespace between its words; refused when too short to be
    anything but everywhere, or longer than a phrase."""
    parts = words.split()
    if len("".join(parts)) < MIN_PHRASE_CHARS:
        raise ForgetError(
            f"Tell me what to forget, at least {MIN_PHRASE_CHARS} characters, "
            "e.g. `/forget my old address`."
        )
    if len(words.strip()) > MAX_PHRASE_CHARS:
        raise ForgetError(
            f"That is longer than I can look for at once (at most {MAX_PHRASE_CHARS} "
            "characters): forget it a phrase at a time, e.g. its most telling words."
        )
    return re.compile(r"\s+".join(re.escape(part) for part in parts), re.IGNORECASE)


def find(workspace: Workspace, words: str) -> Findings:
    """What forgetting `words` would remove; reads only."""
    return _run(workspace, words, apply=False)


def forget(workspace: Workspace, words: str) -> Findings:
    """Remove every match of `words`; returns what was removed."""
    return _run(workspace, words, apply=True)


def _run(workspace: Workspace, words: str, *, apply: bool) -> Findings:
    pattern = phrase_pattern(words)
    found = Findings(" ".join(words.split()))
    if apply:
        # A crash mid-replace leaves temp files (old or new text) that nothing else would sweep.
        for folder in (workspace.root, workspace.sessions_dir, workspace.memory.versions_dir):
            remove_stale_temp_files(folder)
    found.memory_lines = _forget_lines(workspace.memory_path, pattern, apply)
    for path in workspace.memory.versions():
        removed = _forget_lines(path, pattern, apply)
        if removed:
            found.versions += 1
            found.version_lines += len(removed)
    found.history_entries = _forget_entries(workspace.history_path, pattern, apply)
    for kept in _pre_link_copies(workspace.root):  # what /unlink would give back
        if apply:
            remove_stale_temp_files(kept)
        found.pre_link += len(_forget_lines(kept / MEMORY_FILE, pattern, apply))
        found.pre_link += len(_forget_entries(kept / HISTORY_FILE, pattern, apply))
    refs = _Refs()
    for key in list(workspace.sessions.keys()):  # a SessionStore, not a dict
        removed_messages = _forget_messages(workspace, key, pattern, apply, refs)
        if removed_messages:
            found.sessions += 1
            found.messages += removed_messages
    if apply:  # the searchable copy of the consolidated messages (rebuilt at the next search)
        transcripts.drop(workspace.root)
    orphaned = refs.removed - refs.kept
    found.media = _forget_media(workspace.root / MEDIA_DIR, pattern, apply, orphaned)
    matching = workspace.reminders.matching(pattern)
    found.reminders = [reminder.what for reminder in matching]
    if matching and apply:
        workspace.reminders.remove({reminder.id for reminder in matching})
    return found


def _pre_link_copies(root: Path) -> list[Path]:
    """The copies of what linked accounts had before their link (memory.control.link_snapshots)."""
    try:
        return sorted(p for p in (root / PRE_LINK_DIR).iterdir() if not p.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []


# ---- MEMORY.md and its versions: lines ------------------------------------------------------


def _read(path: Path) -> str | None:
    """The file's text; None when it is absent or a link (never read, never rewritten)."""
    try:
        return read_bytes(path).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except LinkRefusedError as exc:
        log.error("forget: %s %s; left alone", path, exc.strerror)
        return None


def _forget_lines(path: Path, pattern: re.Pattern[str], apply: bool) -> list[str]:
    text = _read(path)
    if text is None:
        return []
    lines = text.splitlines(keepends=True)
    removed = [line.rstrip("\r\n") for line in lines if pattern.search(line)]
    if removed and apply:
        atomic_write_text(path, "".join(line for line in lines if not pattern.search(line)))
    return removed


# ---- HISTORY.md: entries --------------------------------------------------------------------


def history_entries(text: str) -> list[str]:
    """HISTORY.md cut into its entries (whatever precedes the first stamp counts as one)."""
    return [entry for entry in _ENTRY_START.split(text) if entry.strip()]


def _forget_entries(path: Path, pattern: re.Pattern[str], apply: bool) -> list[str]:
    text = _read(path)
    if text is None:
        return []
    entries = history_entries(text)
    removed = [entry.strip() for entry in entries if pattern.search(entry)]
    if removed and apply:
        kept = [entry.strip("\n") for entry in entries if not pattern.search(entry)]
        atomic_write_text(path, "\n\n".join(kept) + "\n" if kept else "")
        history_index.drop(path)  # its words of the removed entries go with it
        meaning.prune(path)  # and their vectors
    return removed


# ---- transcripts: messages ------------------------------------------------------------------


@dataclass
class _Refs:
    """The media files that removed messages and kept messages refer to (all transcripts)."""

    removed: set[str] = field(default_factory=set)
    kept: set[str] = field(default_factory=set)


# What a media reference holds that the person gave it (the rest names the stored file).
_SAID_IN_REFS = ("name", "caption")


def _strings(value: Any) -> Iterator[str]:
    """Every string value inside a value (tool-call arguments), never a key."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def said(record: dict[str, Any]) -> Iterator[str]:
    """What a message says: its text (a user message as written, without the time line older
    files began it with), the captions and names of its media, its tool calls' arguments and
    its tool result, and what it replied to. Not its role, timestamp, ids or tool names:
    `/forget user` or `/forget time` must match what was said, not the record around it."""
    content = as_written(dict(record)).get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                yield part
            elif is_ref(part):
                yield from (str(part[k]) for k in _SAID_IN_REFS if isinstance(part.get(k), str))
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
    replied = record.get(REPLY_TO)  # what a reply carries of the message it replied to
    if isinstance(replied, dict):
        yield from (str(replied[k]) for k in ("text", "name") if isinstance(replied.get(k), str))
    for call in record.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # else said as it is
                arguments = json.loads(arguments, strict=False)
        yield from _strings(arguments)


def _matches(raw: bytes, record: dict[str, Any] | None, pattern: re.Pattern[str]) -> bool:
    if record is None:
        # A line that is no message (torn, hand-edited): only its bytes can be matched.
        return bool(pattern.search(raw.decode("utf-8", "replace")))
    return any(pattern.search(text) for text in said(record))


def _forget_messages(
    workspace: Workspace, key: str, pattern: re.Pattern[str], apply: bool, refs: _Refs
) -> int:
    """Remove matching message lines from one transcript; the in-memory session follows."""
    session = workspace.sessions.get(key)
    try:
        data = read_bytes(session.path)
    except FileNotFoundError:
        return 0
    except LinkRefusedError as exc:
        log.error("forget: %s %s; left alone", session.path, exc.strerror)
        return 0
    kept: list[bytes] = []
    removed = removed_before_cursor = index = kept_messages = 0
    for _, raw, record, _ in read_lines(data):
        kind = record.get("_type") if record is not None else None
        if kind == METADATA_TYPE:
            continue  # replaced by one fresh record at the top
        if kind in CONVERSATION_RECORDS:
            kept.append(raw)  # ids only, no one's words: never matched ("/forget withdrawn")
            continue
        is_message = record is not None  # else a line that is none (torn, hand-edited)
        content = record.get("content") if record is not None else None
        if _matches(raw, record, pattern):
            refs.removed |= referenced_files(content)
            removed += 1
            if is_message and index < session.last_consolidated:
                removed_before_cursor += 1
        else:
            refs.kept |= referenced_files(content)
            kept.append(raw)
            kept_messages += is_message
        index += is_message
    if removed and apply:
        cursor = max(0, session.last_consolidated - removed_before_cursor)
        header = {
            "_type": METADATA_TYPE,
            "key": session.key,
            "created_at": session.created_at,
            "updated_at": session.updated_at,
            "last_consolidated": min(cursor, kept_messages),
            "metadata": session.metadata,
            "recent_ids": list(session.filed_ids),
        }
        body = b"".join(line + b"\n" for line in [_json_line(header), *kept])
        atomic_write_text(session.path, body)
        # Read back into the same object (offset, message ids); caches see its epoch change.
        workspace.sessions.reload(session)
    return removed


def _json_line(record: dict[str, Any]) -> bytes:
    try:
        return json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(record).encode("ascii")


# ---- media ----------------------------------------------------------------------------------


def _forget_media(
    folder: Path, pattern: re.Pattern[str], apply: bool, orphaned: set[str]
) -> list[str]:
    """Files matching the phrase, and those only removed messages referred to."""
    removed = []
    for path in _regular_files(folder):
        relative = str(path.relative_to(folder))
        if relative in orphaned:
            removed.append(relative)
            if apply:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            continue
        try:
            text = read_bytes(path).decode("utf-8", "replace")
        except OSError:  # gone, or a link (memory/safefs)
            continue
        # In a file name, words are as often joined by "-" or "_" as by spaces.
        if pattern.search(re.sub(r"[-_.]+", " ", relative)) or pattern.search(text):
            removed.append(relative)
            if apply:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
    return removed


def _regular_files(folder: Path) -> Iterator[Path]:
    """Regular files under `folder`, never following a symbolic link."""
    for top, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(top) / name
            with contextlib.suppress(OSError):
                if stat.S_ISREG(path.lstat().st_mode):
                    yield path
