"""MEMORY.md (facts, replaced whole) and HISTORY.md (events, append-only) of one workspace."""

from __future__ import annotations

import contextlib
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path

from memory import clock
from memory.atomic import PRIVATE_FILE_MODE, atomic_write_text
from memory.safefs import append_all, make_private_dir, open_fd, read_bytes
from memory.search import meaning

# The sections of MEMORY.md, in order: the template, the agent's tool and the consolidation
# prompt are all built from this one tuple.
SECTIONS = ("User Information", "Preferences", "Project Context", "Important Notes")
DEFAULT_SECTION = SECTIONS[-1]  # where an added item goes when no section is named
MEMORY_TEMPLATE = "".join(f"## {name}\n\n" for name in SECTIONS).rstrip("\n") + "\n"

MEMORY_FILE = "MEMORY.md"
HISTORY_FILE = "HISTORY.md"
VERSIONS_DIR = ".memory_versions"

# How every HISTORY.md entry begins (search.py finds entries by it).
ENTRY_STAMP = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]"
_STAMP = re.compile(ENTRY_STAMP)
_BLANK_LINES = re.compile(r"\n(?:[ \t\r]*\n)+")
_HEADING = re.compile(r"^(#{1,2})[ \t]+(.*?)[ \t#]*$")
# MEMORY.<UTC time>Z.<ns since the epoch>.md (older names, in local time, lack the Z); a held
# update (a consolidation's text that was not written, see memory.consolidation.checks) ends in
# .held.md.
_VERSION_NAME = re.compile(r"^MEMORY\.\d{8}T\d{6}Z?\.(\d{20})(?:\.held)?\.md$")
HELD_SUFFIX = ".held.md"


def memory_prompt_section(memory: str) -> str:
    """The block of the system prompt that carries MEMORY.md's text."""
    return f"# Memory\n## Long-term Memory\n{memory}"


class MemoryEditError(ValueError):
    """An edit of MEMORY.md that cannot be applied; the message is meant for the model."""


def refused(why: str) -> MemoryEditError:
    """The model's edit refused by a check (`why`: the reason consolidation's checks give)."""
    return MemoryEditError(f"not saved: {why}. MEMORY.md is unchanged.")


class MemoryStore:
    """Reads and writes one user's MEMORY.md and HISTORY.md."""

    def __init__(self, workspace_root: Path, keep_versions: int = 10) -> None:
        self.root = Path(workspace_root)
        self.keep_versions = max(0, keep_versions)
        self.memory_path = self.root / MEMORY_FILE
        self.history_path = self.root / HISTORY_FILE
        self.versions_dir = self.root / VERSIONS_DIR

    # --- MEMORY.md -------------------------------------------------------------------------

    def read(self) -> str:
        """The current MEMORY.md, "" when there is none yet."""
        try:
            return read_bytes(self.memory_path).decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def write(self, content: str) -> bool:
        """Replace MEMORY.md atomically, keeping the previous content; False if nothing changed."""
        previous = self.read()
        if content == previous:
            return False
        make_private_dir(self.root)
        if previous.strip() and self.keep_versions > 0:
            self._keep_version(previous)
        atomic_write_text(self.memory_path, content)
        self._prune_versions()
        return True

    def keep_held(self, content: str) -> Path:
        """Keep an update that was held back as the newest version, MEMORY.md untouched.

        /memory history shows it as held and /memory undo N applies it. It is kept even when
        keep_versions is 0 (until the next write prunes it): it exists nowhere else."""
        path = self._keep_version(content, held=True)
        self._prune_versions(max(1, self.keep_versions))
        return path

    def versions(self) -> list[Path]:
        """Earlier MEMORY.md contents, oldest first."""
        return [path for _, path in self._numbered_versions()]

    def prompt_section(self) -> str:
        """The block of the system prompt that carries long-term memory."""
        return memory_prompt_section(self.read())

    def _numbered_versions(self) -> list[tuple[int, Path]]:
        try:
            entries = list(self.versions_dir.iterdir())
        except FileNotFoundError:
            return []
        found = []
        for path in entries:
            match = _VERSION_NAME.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def _keep_version(self, content: str, *, held: bool = False) -> Path:
        # Names sort by time and stay unique and increasing even when the clock does not move.
        make_private_dir(self.versions_dir)
        existing = self._numbered_versions()
        ns = max(time.time_ns(), existing[-1][0] + 1 if existing else 0)
        stamp = datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y%m%dT%H%M%SZ")
        path = self.versions_dir / f"MEMORY.{stamp}.{ns:020d}{HELD_SUFFIX if held else '.md'}"
        atomic_write_text(path, content)
        return path

    def replace_held(self, path: Path, content: str) -> None:
        """Replace the text of the held version at `path` (the edits of one turn of the model
        after one of them was held go into it, not into MEMORY.md)."""
        if path.parent != self.versions_dir or not path.name.endswith(HELD_SUFFIX):
            raise ValueError(f"not a held version: {path.name}")
        atomic_write_text(path, content)

    def _prune_versions(self, keep: int | None = None) -> None:
        """Keep the newest `keep` versions, and of the older ones as few as hold every fact
        line that neither MEMORY.md nor a version kept holds (at most `keep` more, those that
        hold the most, the newer first): edits that each drop a little, then a run of adds,
        cannot push the last copy of a fact out (issue 22). Held versions are proposals,
        never spared for their facts."""
        existing = self._numbered_versions()
        keep = self.keep_versions if keep is None else keep
        cut = max(0, len(existing) - keep)
        if not cut:
            return
        covered = _fact_set(self.read())
        for _, path in existing[cut:]:
            covered |= _fact_set(_read_version(path))
        older = [
            (path, _fact_set(_read_version(path)))
            for _, path in existing[:cut]
            if not path.name.endswith(HELD_SUFFIX)
        ]
        lost = set().union(*(facts for _, facts in older)) - covered
        spared: set[Path] = set()
        while lost and len(spared) < keep:
            _, (path, facts) = max(
                enumerate(older), key=lambda item: (len(item[1][1] & lost), item[0])
            )
            if not facts & lost:
                break
            spared.add(path)
            lost -= facts
        for _, path in existing[:cut]:
            if path not in spared:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    # --- HISTORY.md ------------------------------------------------------------------------

    def append_history(self, entry: str, when: datetime | None = None) -> None:
        """Append one "[YYYY-MM-DD HH:MM] …" entry with exactly one blank line before it.

        An entry without that stamp is dated `when` (else now), in UTC like every stamp.

        Blank lines inside the entry are collapsed so the blank line stays the only entry
        separator. The whole entry, separator included, goes out in one O_APPEND write, whole or
        not at all (OSError); HISTORY.md as a link is refused (LinkRefusedError).
        """
        text = _BLANK_LINES.sub("\n", entry.strip().replace("\r\n", "\n"))
        if not _STAMP.match(text):
            stamp = clock.history_stamp(when)
            text = f"[{stamp}] {text}" if text else f"[{stamp}]"
        make_private_dir(self.root)
        fd = open_fd(self.history_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
        try:
            separator = _separator_before(_tail(fd, 2))
            append_all(fd, (separator + text + "\n").encode("utf-8"))
        finally:
            os.close(fd)
        meaning.written(self.history_path)  # embedded in the background, when that is on

    # --- edits for the agent's edit_memory tool ----------------------------------------------

    def add_to_section(self, section: str, line: str) -> str:
        """Add list items at the end of "## {section}" (see `added_to_section`) and write."""
        return self._apply(added_to_section(self.read(), section, line))

    def replace_passage(self, old: str, new: str) -> str:
        """Replace the one occurrence of `old` with `new` and write."""
        return self._apply(passage_replaced(self.read(), old, new))

    def remove_passage(self, passage: str) -> str:
        """Remove the one occurrence of `passage` and write."""
        return self._apply(passage_removed(self.read(), passage))

    def _apply(self, edited: tuple[str | None, str]) -> str:
        text, message = edited
        if text is not None:
            self.write(text)
        return message


# An edit of MEMORY.md's text: (the new text, or None when nothing changes; what to tell the
# model). The agent's edit_memory checks the text before it is written (bot/tools/edit_memory.py).


def added_to_section(current: str, section: str, line: str) -> tuple[str | None, str]:
    """List items added at the end of "## {section}", the section created if it is missing.

    Each non-empty line of `line` becomes one "- " item (so no text can open a new heading);
    items already in the section are not added twice.
    """
    title = _section_title(section)
    items = _list_items(line)
    lines = (current if current.strip() else MEMORY_TEMPLATE).split("\n")
    start, end = _find_section(lines, title)
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += [*([""] if lines else []), f"## {title}", *items, ""]
        added = items
    else:
        heading = _HEADING.match(lines[start])
        title = heading.group(2) if heading else title
        present = {text.strip() for text in lines[start + 1 : end]}
        added = [item for item in dict.fromkeys(items) if item not in present]
        if not added:
            return None, f"Already in {title}: " + "; ".join(items)
        insert_at = end
        while insert_at > start + 1 and not lines[insert_at - 1].strip():
            insert_at -= 1
        lines[insert_at:insert_at] = added
    return "\n".join(lines), f"Added to {title}: " + "; ".join(added)


def passage_replaced(current: str, old: str, new: str) -> tuple[str | None, str]:
    """The one occurrence of `old` replaced with `new`."""
    start = _find_unique(current, old, "replace")
    text = current[:start] + new + current[start + len(old) :]
    return text, "Replaced the passage." if new else "Replaced the passage with nothing."


def passage_removed(current: str, passage: str) -> tuple[str | None, str]:
    """The one occurrence of `passage` removed, and its line break when it was whole lines."""
    start = _find_unique(current, passage, "remove")
    end = start + len(passage)
    at_line_start = start == 0 or current[start - 1] == "\n"
    if at_line_start and not passage.endswith("\n") and current[end : end + 1] == "\n":
        end += 1
    return current[:start] + current[end:], "Removed the passage."


def _find_unique(text: str, passage: str, action: str) -> int:
    if not passage or not passage.strip():
        raise MemoryEditError(f"Nothing to {action}: the passage is empty.")
    count = text.count(passage)
    if count == 0:
        raise MemoryEditError(
            f"Cannot {action}: the passage was not found in MEMORY.md. "
            "Quote it exactly as it appears there."
        )
    if count > 1:
        raise MemoryEditError(
            f"Cannot {action}: the passage occurs {count} times in MEMORY.md. "
            "Include more of the surrounding text so that it occurs once."
        )
    return text.index(passage)


def _read_version(path: Path) -> str:
    try:
        return read_bytes(path).decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _fact_set(text: str) -> set[str]:
    """The fact lines of a MEMORY.md text (not headings, not blank), list markers, case and
    spacing aside: what pruning compares (memory.consolidation.checks judges updates)."""
    facts = set()
    for line in text.splitlines():
        fact = " ".join(line.strip().lstrip("-*+ ").split()).casefold()
        if fact and not line.lstrip().startswith("#"):
            facts.add(fact)
    return facts


def merged_memory(ours: str, theirs: str) -> tuple[str, int]:
    """`ours` with every item of `theirs` that it lacks, each under its own section's heading
    (a section we lack is added at the end; text before any heading counts as DEFAULT_SECTION).
    Returns the text and how many items were added; merging again adds nothing."""
    lines = (ours if ours.strip() else MEMORY_TEMPLATE).split("\n")
    added = 0
    for title, items in _sections(theirs):
        start, end = _find_section(lines, title)
        if start is None:
            while lines and not lines[-1].strip():
                lines.pop()
            lines += [*([""] if lines else []), f"## {title}", ""]
            start, end = _find_section(lines, title)
            assert start is not None
        present = {text.strip() for text in lines[start + 1 : end]}
        new = [item for item in dict.fromkeys(items) if item.strip() not in present]
        insert_at = end
        while insert_at > start + 1 and not lines[insert_at - 1].strip():
            insert_at -= 1
        lines[insert_at:insert_at] = new
        added += len(new)
    text = "\n".join(lines)
    return (text if text.endswith("\n") else text + "\n"), added


def _sections(text: str) -> list[tuple[str, list[str]]]:
    """(title, its non-blank lines) of each "## title" of `text`, in order."""
    found: dict[str, list[str]] = {}
    title = DEFAULT_SECTION
    for raw in text.split("\n"):
        heading = _HEADING.match(raw)
        if heading:
            title = heading.group(2) or DEFAULT_SECTION
            found.setdefault(title, [])
        elif raw.strip():
            found.setdefault(title, []).append(raw.rstrip())
    return [(name, items) for name, items in found.items() if items]


def _tail(fd: int, size: int) -> bytes:
    length = os.fstat(fd).st_size
    return os.pread(fd, size, max(0, length - size)) if length else b""


def _separator_before(tail: bytes) -> str:
    """What goes before a new entry so that exactly one blank line precedes it."""
    if not tail or tail.endswith(b"\n\n"):
        return ""
    return "\n" if tail.endswith(b"\n") else "\n\n"


def _list_items(text: str) -> list[str]:
    items = []
    for raw in text.replace("\r", "\n").split("\n"):
        item = raw.strip()
        if item:
            items.append(item if item.startswith(("- ", "* ", "+ ")) else f"- {item}")
    if not items:
        raise MemoryEditError("The line to add is empty.")
    return items


def _single_line(text: str, what: str) -> str:
    value = text.strip()
    if not value:
        raise MemoryEditError(f"The {what} is empty.")
    if "\n" in value or "\r" in value:
        raise MemoryEditError(f"The {what} must be a single line; add several lines one by one.")
    return value


def _section_title(section: str) -> str:
    title = _single_line(section.strip().lstrip("#"), "section name")
    problem = new_section_problem(title)
    if problem:
        raise refused(problem)
    return title


# A section's name: a few words of letters ("Project Context", "Pets & Plants").
_SECTION_NAME = re.compile(r"[^\W\d_][^\W_]*(?:[ '&/-]+[^\W_]+){0,4}")
MAX_SECTION_CHARS = 40


def new_section_problem(name: str) -> str | None:
    """Why a new section `name` cannot be added to MEMORY.md, or None (consolidation's checks
    refuse an update adding such a section in the same words: memory.consolidation.checks)."""
    name = name.strip()
    if len(name) <= MAX_SECTION_CHARS and _SECTION_NAME.fullmatch(name):
        return None
    return f"it adds a section ## {name} (a section is named in a few words of letters)"


def _find_section(lines: list[str], title: str) -> tuple[int | None, int]:
    """(heading, end) line indexes of "## title" (any case); (None, len) when absent."""
    start = None
    for index, text in enumerate(lines):
        match = _HEADING.match(text)
        if not match:
            continue
        if start is not None:
            return start, index
        if len(match.group(1)) == 2 and match.group(2).casefold() == title.casefold():
            start = index
    return start, len(lines)
