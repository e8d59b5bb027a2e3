"""The file-system calls every workspace file goes through: no links followed, no torn lines.

A symbolic link inside a workspace (planted by someone with access to the host, or restored
from a careless backup) would make the bot read its own config to a chat user or append a
person's messages to a file outside the workspace. So every open here refuses a link as the last
component (O_NOFOLLOW), and a folder written into is opened the same way first. A hard link is
the same file under a second name (the bot's config.toml, planted as MEMORY.md), which no flag
refuses: a regular file with more than one name is refused once opened (its link count), before
anything is read or written. The bot itself never makes one (atomic writes rename a new file).

`os.write` may write part of its buffer without an error (a full disk, a file-size limit): an
append that ignored its return value left a torn line the process believed saved. `append_all`
writes everything or takes the partial write back and raises.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

PRIVATE_DIR_MODE = 0o700
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefusedError(OSError):
    """A workspace path is a symbolic link, or a hard link; it is refused, never followed."""

    def __init__(self, path: Path | str, *, hard: bool = False) -> None:
        what = (
            "is a hard link (a second name of another file), which is never used"
            if hard
            else "is a symbolic link, which is never followed"
        )
        super().__init__(errno.ELOOP, what, str(path))


def open_fd(path: Path | str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
    """os.open without following a link in the last component, nor opening a file that has
    another name too (LinkRefusedError instead)."""
    try:
        fd = os.open(path, flags | _NOFOLLOW, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefusedError(path) from None
        raise
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        os.close(fd)
        raise LinkRefusedError(path, hard=True)
    return fd


def open_dir(path: Path | str) -> int:
    """A descriptor of the folder `path` itself, refused if it is a link (for *at() calls)."""
    try:
        return open_fd(path, os.O_RDONLY | os.O_DIRECTORY)
    except NotADirectoryError:
        # O_NOFOLLOW | O_DIRECTORY on a link to a folder reports ENOTDIR on some systems.
        if os.path.islink(path):
            raise LinkRefusedError(path) from None
        raise


def read_bytes(path: Path | str) -> bytes:
    """The whole file (FileNotFoundError when absent), never through a link."""
    with open_binary(path) as file:
        return file.read()


def open_binary(path: Path | str) -> BinaryIO:
    """A file object for reading bytes, never through a link."""
    return os.fdopen(open_fd(path, os.O_RDONLY), "rb")


def append_all(fd: int, data: bytes) -> None:
    """Append all of `data` to `fd` (opened O_APPEND), or nothing: a partial write is cut off
    again (ftruncate to the size before) and the OSError raised, so no torn line is left for a
    caller that believes its data saved. The caller must be the file's only writer."""
    start = os.fstat(fd).st_size
    view = memoryview(data)
    done = 0
    try:
        while done < len(view):
            written = os.write(fd, view[done:])
            if written <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += written
    except OSError:
        if done:
            # If even this fails the torn line stays; loading skips it and the next append
            # starts on a fresh line.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
        raise


def is_link(path: Path) -> bool:
    """A symbolic link, or a regular file with another name too (a hard link)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink > 1)


def make_private_dir(path: Path) -> None:
    """Create `path` and any missing parents as 0700, whatever the umask (mkdir's mode is masked
    by it, and Path.mkdir(parents=True) gives parents the default mode); an existing folder open
    to others is made private too. A person's memory is nobody else's to list or read."""
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, PRIVATE_DIR_MODE)
        os.chmod(folder, PRIVATE_DIR_MODE)
    if not missing:
        _tighten(path)


def _tighten(path: Path) -> None:
    """Drop group and other permissions of an existing folder (best effort: it may be another
    user's folder, which is left as it is)."""
    with contextlib.suppress(OSError):
        info = os.lstat(path)
        if stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)


def append_line(path: Path | str, data: bytes, mode: int = 0o600) -> None:
    """Append one whole record line to an append-only file (made private), or nothing; after a
    torn last line, on a line of its own. The caller is the file's only writer."""
    fd = open_fd(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, mode)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # never glue a record to a torn line
        append_all(fd, data)
    finally:
        os.close(fd)


def json_records(lines: Iterable[bytes]) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """Each line of a JSON-lines file that holds a JSON object, with the object. A line that
    is blank, torn (a crash tears at most the last append; nothing after it depends on it) or
    foreign is passed over: each caller checks the keys it needs."""
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:  # torn, or not UTF-8 / JSON
            continue
        if isinstance(record, dict):
            yield line, record
