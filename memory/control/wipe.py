"""Wiping: a user's whole workspace folder goes, every session of theirs with it (group ones too:
a group session's messages belong to one user and live in that user's folder).

The folder is first renamed to a hidden name in the workspaces folder (one atomic rename), then
deleted. From the rename on, the user has no workspace: a crash during the deletion leaves only
the hidden remnant, which no one reads and which the next writer sweeps away (`sweep_wiped`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from memory.atomic import fsync_dir
from memory.control.forget import history_entries
from memory.media import MEDIA_DIR
from memory.workspace import Workspace

WIPED_PREFIX = ".wiped-"
_SHARED_SESSION = (":group:", ":guild:", ":private:")


@dataclass(frozen=True)
class Contents:
    """What a workspace holds, for the question /wipe asks before deleting it."""

    memory_lines: int
    history_entries: int
    sessions: int
    shared_sessions: int  # in groups / servers
    messages: int
    versions: int
    media: int
    reminders: int = 0  # pending

    @property
    def empty(self) -> bool:
        return not (
            self.memory_lines or self.history_entries or self.messages or self.versions
            or self.reminders
        )  # fmt: skip

    def describe(self) -> str:
        parts = [
            f"MEMORY.md ({self.memory_lines} lines)",
            f"HISTORY.md ({self.history_entries} entries)",
            f"{self.sessions} conversations ({self.shared_sessions} in groups) "
            f"with {self.messages} messages",
            f"{self.versions} earlier memory versions",
        ]
        if self.media:
            parts.append(f"{self.media} media files")
        if self.reminders:
            parts.append(f"{self.reminders} pending reminder{'' if self.reminders == 1 else 's'}")
        return ", ".join(parts)


def contents(workspace: Workspace) -> Contents:
    """Counts only; reads each file once."""
    memory = workspace.memory.read()
    try:
        history = workspace.history_path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        history = ""
    keys = workspace.sessions.keys()
    messages = 0
    for key in keys:
        with contextlib.suppress(OSError):
            for line in workspace.sessions.path_for(key).read_bytes().split(b"\n"):
                if b'"role"' in line and b'"_type": "metadata"' not in line:
                    messages += 1
    media = workspace.root / MEDIA_DIR
    return Contents(
        memory_lines=len([line for line in memory.splitlines() if line.strip()]),
        history_entries=len(history_entries(history)),
        sessions=len(keys),
        shared_sessions=sum(1 for key in keys if any(s in key for s in _SHARED_SESSION)),
        messages=messages,
        versions=len(workspace.memory.versions()),
        media=sum(len(files) for _, _, files in os.walk(media)) if media.is_dir() else 0,
        reminders=sum(1 for reminder in workspace.reminders.load() if reminder.pending),
    )


def hide(root: Path) -> Path | None:
    """Rename the workspace folder out of the way (atomic); None if there is none."""
    hidden = root.parent / f"{WIPED_PREFIX}{time.time_ns()}-{os.getpid()}"
    try:
        os.rename(root, hidden)
    except FileNotFoundError:
        return None
    fsync_dir(root.parent)
    return hidden


def delete(hidden: Path) -> None:
    shutil.rmtree(hidden, ignore_errors=True)


def wipe_folder(root: Path) -> bool:
    """Hide then delete the workspace at `root`; False when there was none."""
    hidden = hide(root)
    if hidden is None:
        return False
    delete(hidden)
    return True


def sweep_wiped(base_dir: Path) -> int:
    """Delete what a crash mid-wipe left behind; only for the one writer of the folder."""
    swept = 0
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in Path(base_dir).iterdir():
            if entry.name.startswith(WIPED_PREFIX) and entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
                swept += 1
    return swept
