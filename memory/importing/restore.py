"""A LightGrep /export archive brought into a workspace: moving a person between hosts.

The archive is unpacked, member by member within the listing's checked sizes, into a hidden
folder beside the workspaces (`.arriving-…`, the name link's merge takes from another worker).
Into a workspace with nothing in it, its files are moved in by rename: MEMORY.md, HISTORY.md,
sessions, media, earlier versions, reminders and preferences come back as they were. Into one
that has files, it is merged exactly as /link merges two accounts (memory.control.link),
journalled, so a crash mid-way is finished by the next start. The archive's links.json (the
accounts linked on the old host) is not applied: links name another host's accounts.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from memory.atomic import fsync_dir
from memory.control import link
from memory.control.wipe import delete
from memory.importing.sources import ImportRefused, checked_zip
from memory.links import LINKS_EXPORT
from memory.safefs import make_private_dir
from memory.search import history_index
from memory.store import HISTORY_FILE, MEMORY_FILE
from memory.workspace import KEY_FILE, SESSIONS_DIR, Workspaces

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Restored:
    merged: bool  # False: the workspace was empty and took the archive's files as they were
    files: int  # files unpacked
    facts: int = 0  # when merged: MEMORY.md items added
    entries: int = 0  # when merged: HISTORY.md entries added


def restore(workspaces: Workspaces, person: str, archive: Path) -> Restored:
    """Bring the archive at `archive` into the workspace of `person`. The caller holds the
    person's files still (the folder lock, or the bot's exclusive())."""
    arriving = workspaces.base_dir / f"{link.ARRIVING_PREFIX}{uuid.uuid4().hex}"
    try:
        files = _unpack(archive, arriving)
    except BaseException:
        if arriving.exists():
            delete(arriving)
        raise
    root = workspaces.root_of(person)
    if _empty(root):
        workspace = workspaces.get(person)  # made, with its key file when the name is short
        _move_in(arriving, root)
        workspaces.forget_user(person)
        delete(arriving)
        history_index.drop(workspace.history_path)
        return Restored(False, files)
    merged = link.absorb_folder(workspaces, arriving, person)
    return Restored(True, files, merged.facts, merged.entries)


def _unpack(archive: Path, target: Path) -> int:
    """The archive's files (under its one top folder) written into `target`; how many."""
    count = 0
    with checked_zip(archive) as zipped:
        infos = [info for info in zipped.infolist() if not info.is_dir()]
        tops = {PurePosixPath(info.filename).parts[0] for info in infos}
        if len(tops) != 1 or not any(
            PurePosixPath(info.filename).parts[1:2]
            in ((MEMORY_FILE,), (HISTORY_FILE,), (SESSIONS_DIR,))
            for info in infos
        ):
            raise ImportRefused(
                f"{archive.name} is not a LightGrep archive (made by /export or lightgrep export)"
            )
        make_private_dir(target)
        for info in infos:
            parts = PurePosixPath(info.filename).parts[1:]
            name = parts[-1]
            if parts == (LINKS_EXPORT,) or parts == (KEY_FILE,) or history_index.is_index(name):
                continue
            if name.startswith(".") and name.endswith(".tmp"):
                continue
            path = target.joinpath(*parts)
            make_private_dir(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out, zipped.open(info) as member:
                shutil.copyfileobj(member, out, _CHUNK)
                out.flush()
                os.fsync(out.fileno())
            count += 1
    return count


def _move_in(source: Path, target: Path) -> None:
    """Every file of `source` renamed into `target` (a folder both hold: file by file)."""
    for name in sorted(os.listdir(source)):
        there = target / name
        if there.is_dir() and not there.is_symlink() and (source / name).is_dir():
            _move_in(source / name, there)
        elif not there.exists():
            os.rename(source / name, there)
    fsync_dir(target)


def _empty(root: Path) -> bool:
    """No workspace yet, or one holding nothing but its key file and empty folders."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return True
    for name in names:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            if not _empty_folder(path):
                return False
        elif name != KEY_FILE:
            return False
    return True


def _empty_folder(path: Path) -> bool:
    return not any(True for _ in path.iterdir())
