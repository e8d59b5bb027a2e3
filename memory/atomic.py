"""Whole-file replacement that a crash can never leave half-written."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

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


def _mode_of(path: Path) -> int:
    """Keep an existing file's permissions; new files are private (they hold a person's memory)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return PRIVATE_FILE_MODE


def atomic_write_text(path: Path, text: str | bytes) -> None:
    """Replace `path` with `text` (UTF-8, newlines as given): readers see old or new, never a mix.

    The temp file lives in the same folder so os.replace is a rename on one file system; its
    data is fsynced before the rename and the folder after it, so the new name survives a crash.
    """
    path = Path(path)
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            os.fchmod(tmp.fileno(), _mode_of(path))
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)


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
