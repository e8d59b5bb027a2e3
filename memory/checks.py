"""Checks on what a consolidation answer would write, before anything is written.

Small or confused models answer `save_memory` with garbage: the tool's own parameter
description copied back, fragments of the prompt, a MEMORY.md without its sections, a history
entry like "][". Written, it would replace the user's memory (the old text survives only in
.memory_versions/, where nobody looks). Rejected, the attempt counts as a failure: retried, and
after repeated failures the chunk is archived verbatim, so nothing is lost either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from memory.store import SECTIONS

_HEADING = re.compile(r"^##[ \t]+(.+?)[ \t#]*$", re.M)
_STAMP = re.compile(r"^\s*\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]\s*")
# A line of the conversation as the request shows it: "[2024-05-01T10:30] USER: …".
_CONVERSATION_LINE = re.compile(
    r"^\[(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}|\?)\] [A-Z]+(?: \[tools:|:)", re.M
)
_WORD = re.compile(r"[^\W\d_]{3,}")
MIN_ECHO_CHARS = 30  # a shared phrase shorter than this may be coincidence
MIN_LINES_TO_COMPARE = 3  # with fewer lines, "most of them" is one or two: a correction, maybe


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def echo_fragments(*texts: str) -> list[str]:
    """Sentences and lines of the instructions long enough that a copy of one is an echo."""
    fragments = []
    for text in texts:
        for piece in re.split(r"(?<=[.:;])\s+|\n+", text):
            piece = _norm(piece.strip(" -"))
            if len(piece) >= MIN_ECHO_CHARS:
                fragments.append(piece)
    return fragments


def _echo(text: str, fragments: Iterable[str]) -> str | None:
    normal = _norm(text)
    if any(fragment in normal for fragment in fragments):
        return "it copies the instructions back"
    if _CONVERSATION_LINE.search(text):
        return "it copies the conversation lines instead of summarising them"
    return None


def check_history_entry(entry: str, fragments: Iterable[str]) -> str | None:
    """Why `entry` must not be appended to HISTORY.md, or None if it may be."""
    if not _WORD.search(_STAMP.sub("", entry)):
        return "the history entry is empty"
    return _echo(entry, fragments)


def _sections(text: str) -> dict[str, list[str]]:
    """Heading → its non-empty lines; lines before any heading under ""."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        match = _HEADING.match(line)
        if match:
            current = match.group(1).strip()
            sections.setdefault(current, [])
        elif line.strip() and not line.lstrip().startswith("#"):
            sections.setdefault(current, []).append(line)
    return sections


def check_memory_update(
    current: str, update: str, fragments: Iterable[str]
) -> tuple[str | None, str]:
    """(why `update` must not replace MEMORY.md or None, the text to write).

    A section that was empty and is missing from the update is added back empty (small models
    drop them; nothing is lost); a section that held facts must survive.
    """
    problem = _echo(update, fragments)
    if problem:
        return problem, update
    before = _sections(current)
    headings = [h for h in before if h] or list(SECTIONS)
    after = _sections(update)
    if len(after) <= 1:
        return "it has none of the ## sections", update
    dropped = [h for h in headings if before.get(h) and h not in after]
    if dropped:
        return f"it drops the section ## {dropped[0]}", update
    old_lines = [_norm(line.strip(" -*")) for lines in before.values() for line in lines]
    old_lines = [line for line in old_lines if line]
    if len(old_lines) >= MIN_LINES_TO_COMPARE:
        normal = _norm(update)
        kept = sum(1 for line in old_lines if line in normal)
        if kept * 2 < len(old_lines):
            return f"it keeps only {kept} of the {len(old_lines)} existing lines", update
    missing = [h for h in headings if h not in after]
    if missing:
        update = update.rstrip("\n") + "\n" + "".join(f"\n## {h}\n" for h in missing)
    return None, update
