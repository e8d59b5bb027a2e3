"""What each account had before it was linked, so that leaving a link takes back only that.

At /link both accounts' memory (MEMORY.md, HISTORY.md, preferences.json) is copied, before the
merge, into the person's folder: `.pre-link/<the account's folder name>/` (hidden, private). It
is the person's, like the rest of their folder: /forget removes a phrase from it too
(memory.control.forget), /wipe takes it with the folder, /export includes it, and the folder
carries it when it passes to another account. An account that leaves its person (its own
/unlink, or another account's /unlink ACCOUNT) gets its copy back as its workspace, and never
the memory the others made or brought; the others keep the shared memory. Once a person has one
account left, no copy is needed any more.

Made whole or not at all: a copy is written into a temp folder, fsynced, then renamed into place
(one rename); taken back by one rename too. Each step can run again (the link journal,
memory/control/link.py, runs them again after a crash): a copy that exists is not made again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from memory.atomic import fsync_dir
from memory.control.wipe import WIPED_PREFIX, delete
from memory.preferences import PREFERENCES_FILE
from memory.safefs import make_private_dir, open_binary, open_fd
from memory.store import HISTORY_FILE, MEMORY_FILE
from memory.workspace import PRE_LINK_DIR, Workspaces

KEPT = (MEMORY_FILE, HISTORY_FILE, PREFERENCES_FILE)
_CHUNK = 1 << 20  # copied a MiB at a time: a 60 MB HISTORY.md is never whole in RAM


def path_of(workspaces: Workspaces, key: str, person: str) -> Path:
    """Where the copy of `key` is kept in the folder of `person` (the key its workspace has)."""
    return workspaces.root_of(person) / PRE_LINK_DIR / workspaces.root_of(key).name


def keep(workspaces: Workspaces, key: str, person: str) -> None:
    """Copy what `key`'s own workspace holds now (nothing: an empty copy) into the folder of
    `person`, unless a copy of it is kept there already (an earlier link, or this step run
    again)."""
    final = path_of(workspaces, key, person)
    if final.is_dir():
        return
    temp = final.with_name(f".{final.name}.tmp")
    delete(temp)  # what a crash mid-copy left
    make_private_dir(temp)
    source = workspaces.root_of(key)
    for name in KEPT:
        _copy(source / name, temp / name)
    fsync_dir(temp)
    os.rename(temp, final)
    fsync_dir(final.parent)


def restore(workspaces: Workspaces, key: str, person: str) -> bool:
    """`key` leaves `person`: its copy becomes its workspace (one rename), or, when a folder of
    that key exists already, its files replace that folder's. False: no copy was kept."""
    kept = path_of(workspaces, key, person)
    if not kept.is_dir():
        return False
    workspaces.forget_user(key)
    root = workspaces.root_of(key)
    if not root.exists():
        os.rename(kept, root)
        fsync_dir(root.parent)
        fsync_dir(kept.parent)
        return True
    for name in KEPT:
        with contextlib.suppress(FileNotFoundError):
            os.replace(kept / name, root / name)
    fsync_dir(root)
    _gone(workspaces, kept)
    return True


def drop_all(workspaces: Workspaces, person: str) -> None:
    """`person` has one account left: no copy is needed any more."""
    _gone(workspaces, workspaces.root_of(person) / PRE_LINK_DIR)


def _gone(workspaces: Workspaces, folder: Path) -> None:
    """Out of the way in one rename (never left half-deleted, to be restored), then deleted; a
    crash between leaves a `.wiped-` folder that the next start sweeps (wipe.sweep_wiped)."""
    hidden = workspaces.base_dir / f"{WIPED_PREFIX}{time.time_ns()}-{os.getpid()}-link"
    try:
        os.rename(folder, hidden)
    except FileNotFoundError:
        return
    delete(hidden)


def _copy(source: Path, target: Path) -> None:
    """`source` to a new private `target`, a chunk at a time, never through a link."""
    try:
        reader = open_binary(source)
    except FileNotFoundError:
        return
    with reader, os.fdopen(open_fd(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as out:
        shutil.copyfileobj(reader, out, _CHUNK)
        out.flush()
        os.fsync(out.fileno())
