"""What each account had before it was linked, so that leaving a link takes back only that.

At /link both accounts' memory (MEMORY.md, HISTORY.md, preferences.json) is copied, before the
merge, into `.link-snapshots/<its folder name>` beside the workspaces (hidden, so never taken
for a workspace; private; outside every workspace, so no /export or /memory shows it). An
account that leaves its person (its own /unlink, or another account's /unlink ACCOUNT) gets that
copy back as its workspace, and never the memory the others made or brought; the others keep the
shared memory. A person's last remaining account needs no copy any more, nor does a /wipe.

Made whole or not at all: the copy is written into a temp folder, fsynced, then renamed into
place (one rename); taken back by one rename too. Each step can run again (the link journal,
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
from memory.workspace import Workspaces

SNAPSHOTS_DIR = ".link-snapshots"
KEPT = (MEMORY_FILE, HISTORY_FILE, PREFERENCES_FILE)
_CHUNK = 1 << 20  # copied a MiB at a time: a 60 MB HISTORY.md is never whole in RAM


def path_of(workspaces: Workspaces, key: str) -> Path:
    return workspaces.base_dir / SNAPSHOTS_DIR / workspaces.root_of(key).name


def exists(workspaces: Workspaces, key: str) -> bool:
    return path_of(workspaces, key).is_dir()


def keep(workspaces: Workspaces, key: str) -> None:
    """Copy what `key`'s own workspace holds now (nothing: an empty copy), unless a copy of it
    is kept already (a link made earlier, or this step run again)."""
    final = path_of(workspaces, key)
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


def restore(workspaces: Workspaces, key: str) -> bool:
    """`key` leaves its person: its copy becomes its workspace (one rename), or, when a folder
    of that key exists already, its files replace that folder's. False: no copy was kept."""
    kept = path_of(workspaces, key)
    if not kept.is_dir():
        return False
    workspaces.forget_user(key)
    root = workspaces.root_of(key)
    if not root.exists():
        os.rename(kept, root)
        fsync_dir(root.parent)
        return True
    for name in KEPT:
        with contextlib.suppress(FileNotFoundError):
            os.replace(kept / name, root / name)
    fsync_dir(root)
    delete(kept)
    return True


def drop(workspaces: Workspaces, key: str) -> None:
    """The copy is not needed any more (the key is alone again, or wiped): out of the way in
    one rename (never left half-deleted to be restored), then deleted; a crash between leaves
    a `.wiped-` folder that the next start sweeps (memory.control.wipe.sweep_wiped)."""
    hidden = workspaces.base_dir / f"{WIPED_PREFIX}{time.time_ns()}-{os.getpid()}-link"
    try:
        os.rename(path_of(workspaces, key), hidden)
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
