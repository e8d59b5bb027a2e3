"""A user's whole workspace as one zip archive: what /export sends and `lightgrep export` writes.

The archive holds every regular file of the workspace folder (MEMORY.md, HISTORY.md, the
transcripts, the earlier MEMORY.md versions, media) under one folder named like the workspace,
so unpacking it gives back the workspace's files (a transcript's user messages as the person
wrote them: older files held a time line the bot now adds only when it asks the model). Temp
files of an interrupted write are left out, and links are never followed: neither a symbolic
link nor a file with a second name (a hard link, which may be the bot's config.toml) is
exported, checked on the open file (memory/safefs), so nothing outside the workspace can be
pulled in, also by a link planted while it is listed.
Reading needs no lock: every file is append-only or replaced atomically, so each one is read
whole as it was at some instant (a line being appended at that instant may be cut short, which
the transcript loader skips).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from memory import clock
from memory.safefs import LinkRefusedError, is_link, open_binary
from memory.search import history_index
from memory.session import as_written_line
from memory.workspace import SESSIONS_DIR

ARCHIVE_MIME = "application/zip"


@dataclass(frozen=True)
class ArchiveInfo:
    files: int
    size: int  # bytes of the archive


def archive_name(folder_name: str, when: datetime | None = None) -> str:
    """e.g. "lightgrep-telegram-42-20250102T101500Z.zip" (UTC, like every stamp)."""
    stamp = clock.as_utc(when or clock.now()).strftime("%Y%m%dT%H%M%SZ")
    return f"lightgrep-{folder_name}-{stamp}.zip"


def workspace_files(root: Path) -> Iterator[tuple[Path, str]]:
    """(path, name inside the archive) for every regular file that is no link, in a stable
    order."""
    for top, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            if name.startswith(".") and name.endswith(".tmp"):
                continue  # an interrupted atomic write
            if history_index.is_index(name):
                continue  # derived from HISTORY.md, rebuilt from it after an import
            path = Path(top) / name
            with contextlib.suppress(OSError):
                if stat.S_ISREG(path.lstat().st_mode) and not is_link(path):
                    yield path, f"{root.name}/{path.relative_to(root).as_posix()}"


def write_archive(
    root: Path, out: IO[bytes], extra: dict[str, bytes] | None = None
) -> ArchiveInfo:
    """Write the zip of the workspace at `root` to `out` (a file opened for binary writing);
    `extra` names files kept outside the workspace that are the person's too (their links)."""
    count = 0
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for name, data in (extra or {}).items():
            archive.writestr(f"{root.name}/{name}", data)
            count += 1
        for path, name in workspace_files(root):
            try:
                _add(archive, path, name, path.parent == root / SESSIONS_DIR)
            except (FileNotFoundError, LinkRefusedError):  # replaced since it was listed
                continue
            count += 1
    out.flush()
    return ArchiveInfo(count, out.tell())


def _add(archive: zipfile.ZipFile, path: Path, name: str, in_sessions: bool) -> None:
    """One file into the archive, read through the descriptor that the link checks were made
    on (ZipFile.write would open the path again). A transcript goes line by line, each user
    message as the person wrote it (files from before began each with "[Current time: …]")."""
    with open_binary(path) as source:
        info = os.fstat(source.fileno())
        entry = zipfile.ZipInfo(name, time.localtime(max(info.st_mtime, _ZIP_EPOCH))[:6])
        entry.compress_type = zipfile.ZIP_DEFLATED
        entry.external_attr = (info.st_mode & 0xFFFF) << 16
        with archive.open(entry, "w", force_zip64=info.st_size > _ZIP32_MAX) as target:
            if not (in_sessions and path.suffix == ".jsonl"):
                shutil.copyfileobj(source, target, 1 << 20)
                return
            for line in source:
                end = b"\n" if line.endswith(b"\n") else b""
                target.write(as_written_line(line.rstrip(b"\n")) + end)


_ZIP_EPOCH = 315_532_800 + 86_400  # 1980-01-02: zip has no earlier time
_ZIP32_MAX = (1 << 31) - 1
