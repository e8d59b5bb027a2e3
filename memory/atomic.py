"""Whole-file replacement that a crash can never leave half-written."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from memory.safefs import LinkRefusedError, open_dir, open_fd

PRIVATE_FILE_MODE = 0o600


def fsync_dir(folder: Path) -> None:
    """Persist a rename or a new file in `folder` (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _mode_of(name: str, dir_fd: int) -> int:
    """Keep an existing file's permissions; new files are private (they hold a person's memory).
    A link in the file's place is refused, not replaced: something is wrong with the folder."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return PRIVATE_FILE_MODE
    if stat.S_ISLNK(info.st_mode):
        raise LinkRefusedError(name)
    return stat.S_IMODE(info.st_mode)


def atomic_write_text(path: Path, text: str | bytes) -> None:
    """Replace `path` with `text` (UTF-8, newlines as given): readers see old or new, never a mix.

    The temp file lives in the same folder so the replace is a rename on one file system; its
    data is fsynced before the rename and the folder after it, so the new name survives a crash.
    Every step is relative to the folder opened once without following links, so neither the
    folder nor the file can be a link leading out of the workspace (LinkRefusedError).
    """
    atomic_write_chunks(path, (text if isinstance(text, bytes) else text.encode("utf-8"),))


def atomic_write_chunks(path: Path, chunks: Iterable[bytes]) -> None:
    """`atomic_write_text` for a text made a piece at a time (a merge of two large files), so it
    is never whole in RAM; `chunks` may still read the old `path` (it is replaced after)."""
    path = Path(path)
    folder = open_dir(path.parent)
    try:
        mode = _mode_of(path.name, folder)
        tmp_name, fd = _create_temp(path.name, folder)
        try:
            try:
                os.fchmod(fd, mode)
                for data in chunks:
                    _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp_name, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name, dir_fd=folder)
            raise
        with contextlib.suppress(OSError):
            os.fsync(folder)
    finally:
        os.close(folder)


def _create_temp(name: str, folder: int) -> tuple[str, int]:
    """A new, private, exclusively created temp file ".<name>.<random>.tmp" in `folder`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for _ in range(100):
        tmp_name = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp_name, open_fd(tmp_name, flags, PRIVATE_FILE_MODE, dir_fd=folder)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temp file name", name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def remove_stale_temp_files(folder: Path) -> int:
    """Delete temp files that a crash mid-write left in `folder`; returns how many.

    Only safe while nothing else writes there: the workspace folder lock makes this process the
    only writer, and it sweeps before its first write."""
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in Path(folder).iterdir():
            if entry.name.startswith(".") and entry.name.endswith(".tmp") and entry.is_file():
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed += 1
    return removed
