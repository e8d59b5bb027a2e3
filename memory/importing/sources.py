"""Opening an export file: a zip (the form the services send) or the JSON file itself.

A zip is read without being unpacked: its listing is checked first (the member's name, the
number of members, the declared sizes and ratios) and the member is then read as a stream that
stops at the declared size, so a zip bomb or a lying header ends in one line, not a full disk
or RAM. Every refusal is an `ImportRefused`, whose text is the one line a person is shown.
"""

from __future__ import annotations

import contextlib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

MAX_MEMBERS = 100_000  # a ChatGPT export holds one file per image; more is no export
MAX_UNPACKED_BYTES = 8 << 30  # 8 GiB in all, declared by the listing
MAX_RATIO = 200  # unpacked / packed for one member: JSON compresses ~10x, a bomb ~1000x
RATIO_FLOOR = 1 << 20  # members smaller than this are never judged by their ratio


class ImportRefused(ValueError):
    """The file cannot be imported; the text says why in one line."""


@dataclass(frozen=True)
class Opened:
    """A member being read: its stream and its size in bytes (for a progress bar)."""

    stream: IO[bytes]
    size: int


@contextlib.contextmanager
def open_json(path: Path, member: str = "conversations.json") -> Iterator[Opened]:
    """The export's `member` (a zip's, found in any folder) or `path` itself when it is not a
    zip."""
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError as exc:
        raise ImportRefused(f"cannot read {path.name}: {exc.strerror or exc}") from None
    if not is_zip:
        try:
            file = path.open("rb")
        except OSError as exc:
            raise ImportRefused(f"cannot read {path.name}: {exc.strerror or exc}") from None
        with file:
            yield Opened(file, path.stat().st_size)
        return
    with checked_zip(path) as archive:
        found = [info for info in archive.infolist() if PurePosixPath(info.filename).name == member]
        if not found:
            raise ImportRefused(f"{path.name} holds no {member}: is it the right export?")
        info = min(found, key=lambda item: len(item.filename))  # the top one
        with archive.open(info) as stream:
            yield Opened(stream, info.file_size)


@contextlib.contextmanager
def checked_zip(path: Path) -> Iterator[zipfile.ZipFile]:
    """A zip whose listing passed `check_listing`; a broken one is one line."""
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ImportRefused(f"{path.name} is not a readable zip ({exc})") from None
    with archive:
        check_listing(path.name, archive.infolist())
        try:
            yield archive
        except (zipfile.BadZipFile, EOFError) as exc:
            raise ImportRefused(f"{path.name} is damaged or cut short ({exc})") from None
        except zipfile.LargeZipFile as exc:
            raise ImportRefused(f"{path.name} is too large ({exc})") from None


def check_listing(name: str, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse a zip that could fill the disk or RAM or write outside its folder."""
    if len(infos) > MAX_MEMBERS:
        raise ImportRefused(f"{name} holds {len(infos):,} files, more than an export does")
    total = 0
    for info in infos:
        if not safe_name(info.filename):
            raise ImportRefused(f"{name} holds a file outside its folder ({info.filename!r})")
        total += info.file_size
        packed = max(1, info.compress_size)
        if info.file_size > RATIO_FLOOR and info.file_size > packed * MAX_RATIO:
            raise ImportRefused(
                f"{name} looks like a zip bomb ({info.filename}: {info.file_size:,} bytes "
                f"from {info.compress_size:,})"
            )
    if total > MAX_UNPACKED_BYTES:
        raise ImportRefused(f"{name} would unpack to {total:,} bytes, more than an export does")


def safe_name(name: str) -> bool:
    """A member name that stays inside the folder it is unpacked in."""
    if not name or "\\" in name or "\x00" in name or name.startswith("/"):
        return False
    parts = PurePosixPath(name).parts
    return not any(part in ("..", "") for part in parts) and ":" not in parts[0]
