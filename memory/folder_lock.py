"""One bot process per workspaces folder.

Two processes writing one folder would each cache sessions and MEMORY.md in memory and
overwrite each other's work. The first process takes an exclusive `flock` on
`<workspaces_dir>/.lightgrep.lock` and holds it for its lifetime; a second one fails at once with
a message naming the folder and the holder's pid. The kernel drops the lock when the holder's
file descriptor is closed, including when the process is killed, so a crashed bot never leaves a
stale lock behind: the file may stay, the lock does not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from memory.safefs import make_private_dir

LOCK_FILE = ".lightgrep.lock"


class FolderLockError(RuntimeError):
    """The workspaces folder cannot be locked (e.g. it cannot be created)."""


class FolderLockedError(FolderLockError):
    """Another process holds the workspaces folder."""

    def __init__(self, folder: Path, pid: int | None) -> None:
        self.folder = folder
        self.pid = pid
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"The workspaces folder {folder} is already in use by {holder} (another LightGrep "
            "bot?). Only one bot may use a workspaces folder at a time: stop the other one, or "
            "set a different [memory] workspaces_dir."
        )


class FolderLock:
    """An exclusive, process-lifetime lock on a workspaces folder.

    Use as `with FolderLock(dir): ...`, or call `acquire()` once at start-up; the lock is held
    until `release()` or the end of the process (dropping the object does not release it). The
    descriptor is not inherited by child processes, so a helper started by the bot
    cannot keep the folder locked after the bot is gone.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise FolderLockedError at once (never waits)."""
        if self._fd is not None:
            return
        try:
            make_private_dir(self.folder)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise FolderLockError(
                f"Cannot lock the workspaces folder {self.folder}: {exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise FolderLockedError(self.folder.resolve(), pid) from None
        except OSError as exc:
            os.close(fd)
            raise FolderLockError(
                f"Cannot lock the workspaces folder {self.folder}: {exc}"
            ) from exc
        # Ours now: record who holds it, for the message a second process shows.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (also done by the kernel when the process ends)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the only descriptor releases the flock

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    """The holder's pid as it wrote it; None if it has not written it yet or it is garbled."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
