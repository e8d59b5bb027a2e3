"""Earlier MEMORY.md versions as a person sees them: a list with sizes and changes, and undo.

MemoryStore keeps the text each write replaces (in `.memory_versions/`, named by the UTC time it
was replaced). Undo restores one of them through the same write, so the text it replaces is kept
as a version in turn: an undo never destroys anything and can itself be undone.

A held version (`.held.md`, see memory.consolidation.checks) is an update that was not written
because it would drop too many facts (a consolidation's, or the edits of one turn of the model's).
It never was the memory, so it is compared with the memory it would have replaced (the next
ordinary version, or MEMORY.md now), and the ordinary versions are compared with each other,
skipping held ones.

These read whole files and diff them (memory.control.diff, whose work is bounded): callers run
them in a thread, never on the event loop.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memory.consolidation.checks import kept_fact_lines
from memory.control.diff import LineDiff, diff_lines, unified
from memory.safefs import is_link, read_bytes
from memory.store import HELD_SUFFIX, MemoryStore

log = logging.getLogger(__name__)

_NS = re.compile(r"\.(\d{20})(?:\.held)?\.md$")


class NoVersionError(ValueError):
    """There is no such earlier version; the message is meant for the person."""


@dataclass(frozen=True)
class Version:
    number: int  # 1 = the newest earlier version; what `/memory undo N` takes
    kept_at: str  # when this text was replaced (held: proposed), "YYYY-MM-DD HH:MM:SS UTC"
    size: int  # bytes
    lines: int
    added: int  # lines added compared with the version before it (held: the memory then)
    removed: int
    held: bool = False  # an update held back, never the memory


@dataclass(frozen=True)
class HeldUpdate:
    """The newest version is a held update: nothing has been written since it was held."""

    number: int  # for /memory undo N (always 1)
    kept_at: str
    dropped: int  # fact lines of MEMORY.md it would drop
    facts: int  # fact lines of MEMORY.md


@dataclass(frozen=True)
class Restored:
    number: int
    diff: str  # what changed, as a short unified diff ("" when the text was the same)
    added: int  # the + and − lines of that diff (of all of it, where it is cut short)
    removed: int
    exact: bool = True  # False: too many changes to pair up, shown as replaced whole


def changes(old: str, new: str) -> LineDiff:
    """The line diff from `old` to `new` (memory.control.diff: bounded work)."""
    return diff_lines(old.splitlines(), new.splitlines())


def line_changes(old: str, new: str) -> tuple[int, int]:
    """(lines added, lines removed) going from `old` to `new`."""
    diff = changes(old, new)
    return diff.added, diff.removed


def short_diff(diff: LineDiff, max_lines: int = 30) -> str:
    """The changed lines with one line of context, cut to `max_lines`."""
    lines = unified(diff)
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"… ({len(lines) - max_lines} more lines)"]
    return "\n".join(lines)


def _versions(store: MemoryStore) -> list[Path]:
    """store.versions() less the links planted among them (never listed, read nor restored;
    one planted after this look is refused by _read)."""
    paths = store.versions()
    planted = [path for path in paths if is_link(path)]
    if planted:
        log.error("memory versions %s are links; left out", ", ".join(map(str, planted)))
    return [path for path in paths if path not in planted]


def _read(path: Path) -> str:
    """Never through a link (LinkRefusedError): a planted one would be shown and restored."""
    return read_bytes(path).decode("utf-8", "replace")


def _kept_at(path: Path) -> str:
    match = _NS.search(path.name)
    if match is None:
        return "?"
    when = datetime.fromtimestamp(int(match.group(1)) / 1e9, UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def is_held(path: Path) -> bool:
    return path.name.endswith(HELD_SUFFIX)


def list_versions(store: MemoryStore) -> list[Version]:
    """The earlier versions, newest first, each compared with the one before it."""
    paths = _versions(store)  # oldest first
    texts = [_read(path) for path in paths]
    held = [is_held(path) for path in paths]
    found = []
    for index, (path, text) in enumerate(zip(paths, texts, strict=True)):
        if held[index]:  # compared with the memory it would have replaced
            later = [texts[i] for i in range(index + 1, len(paths)) if not held[i]]
            base = later[0] if later else store.read()
            added, removed = line_changes(base, text)
        else:
            earlier = [texts[i] for i in range(index) if not held[i]]
            added, removed = line_changes(earlier[-1] if earlier else "", text)
        found.append(
            Version(
                number=len(paths) - index,
                kept_at=_kept_at(path),
                size=len(text.encode("utf-8")),
                lines=len(text.splitlines()),
                added=added,
                removed=removed,
                held=held[index],
            )
        )
    return found[::-1]


def held_update(store: MemoryStore) -> HeldUpdate | None:
    """The update held back since the last write of MEMORY.md, if there is one."""
    paths = _versions(store)
    if not paths or not is_held(paths[-1]):
        return None
    kept, facts = kept_fact_lines(store.read(), _read(paths[-1]))
    return HeldUpdate(1, _kept_at(paths[-1]), facts - kept, facts)


def restore(store: MemoryStore, number: int = 1) -> Restored:
    """Make version `number` (1 = newest) the current MEMORY.md; the current text is kept.

    The caller holds the workspace's memory lock, so no consolidation writes in between."""
    paths = _versions(store)
    if not paths:
        raise NoVersionError("There is no earlier version of your memory to go back to.")
    if not 1 <= number <= len(paths):
        raise NoVersionError(f"There is no version {number}: I keep {len(paths)} (1 is newest).")
    content = _read(paths[-number])
    current = store.read()
    if content == current:
        return Restored(number, "", 0, 0)
    store.write(content)
    diff = changes(current, content)
    return Restored(number, short_diff(diff), diff.added, diff.removed, diff.exact)
