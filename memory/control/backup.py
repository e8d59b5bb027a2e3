"""The whole workspaces folder as one tar archive with a manifest of hashes: the file work of
`lightgrep backup create|verify|restore`.

Members are the folder's regular files by their path inside it (`telegram-42/HISTORY.md`,
`.chats.jsonl`), streamed one by one (RAM stays bounded by the number of files, not their
size), each hashed (sha256) as it is written; the manifest (`MANIFEST`) is the last member and
names every other one with its size and hash. Left out: the folder lock and the bot's socket,
temp files of an interrupted atomic write, derived indexes (`*.index`, rebuilt from HISTORY.md
and the sessions), and hidden folders at the top (a wipe's or a cluster move's remnant). A
file is read through one descriptor opened without following links, and a line-based file
(`.jsonl`, the Telegram spool) is taken up to its last whole line: a line being appended at
that instant is left out, never cut.

Which person's files are still while they are read is the caller's business (`Snapshot.add_folder`
is called with the person's files held, bot/cli/backup_service.py); this module only reads.

Reading an archive (`verify`, `restore`) refuses, in one line, anything a backup never holds: an
absolute name or one with `..`, a link, a device, a folder or file not in the manifest, a
member twice, a hash that differs. Restored files get the private modes of every write
(0600, folders 0700), whatever the archive says.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from gzip import GzipFile
from pathlib import Path, PurePosixPath
from typing import IO

from memory import clock
from memory.atomic import PRIVATE_FILE_MODE, fsync_dir
from memory.control.wipe import WIPED_PREFIX
from memory.folder_lock import LOCK_FILE
from memory.safefs import LinkRefusedError, make_private_dir, open_fd
from memory.search import history_index

MANIFEST = "MANIFEST.lightgrep-backup.json"
FORMAT = "lightgrep-backup"
VERSION = 1
SOCKET_FILE = ".lightgrep.sock"  # where a running bot takes backups (bot/cli/backup_service.py)
SKIPPED = frozenset({LOCK_FILE, SOCKET_FILE})
LINE_FILES = (".jsonl", ".spool")  # appended line by line: taken up to the last whole line
CHUNK = 1 << 20
MANIFEST_MAX = 1 << 28  # bytes: ~2 million files; a larger "manifest" is not one of ours


class BackupError(ValueError):
    """The archive cannot be used (damaged, unsafe, not a backup), or the folder is not fit."""


@dataclass
class Progress:
    """What has been done so far, handed to the caller's `report` after each file."""

    files: int = 0
    bytes: int = 0
    folders_done: int = 0
    folders: int = 0


# ---- create -------------------------------------------------------------------------------


def archive_name() -> str:
    """e.g. "lightgrep-backup-20250102T101500Z.tar.gz" (UTC, like every stamp)."""
    return f"lightgrep-backup-{clock.as_utc(clock.now()).strftime('%Y%m%dT%H%M%SZ')}.tar.gz"


def compressed(name: str) -> bool:
    """A target named *.gz or *.tgz is gzip-compressed; anything else is a plain tar."""
    return name.endswith((".gz", ".tgz"))


def top_level(base: Path) -> tuple[list[Path], list[Path]]:
    """(the bot-wide files, the people's folders) at the top of the workspaces folder."""
    files: list[Path] = []
    folders: list[Path] = []
    for entry in sorted(base.iterdir()):
        with contextlib.suppress(FileNotFoundError):
            mode = entry.lstat().st_mode
            if stat.S_ISDIR(mode) and not entry.name.startswith((".", WIPED_PREFIX)):
                folders.append(entry)
            elif stat.S_ISREG(mode) and _kept(entry.name):
                files.append(entry)
    return files, folders


class Snapshot:
    """One archive being written to `out`: add files and folders, then `close()` adds the
    manifest. Not thread-safe, but may be handed from thread to thread between calls."""

    def __init__(self, base: Path, out: IO[bytes], *, gzip: bool) -> None:
        self.base = Path(base)
        self.progress = Progress()
        self._hashes: dict[str, dict[str, object]] = {}
        # gzip at level 6, as /export's zip (tarfile's own "w|gz" compresses at 9: 9 MiB/s of
        # media against 20 here, for a few per cent on text); 1 MiB writes, not 10 KiB.
        self._gzip = GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0) if gzip else None
        # (copybufsize: a keyword of TarFile since Python 3.8 that typeshed does not list)
        self._tar = tarfile.open(  # type: ignore[call-overload]  # noqa: SIM115
            fileobj=self._gzip or out,
            mode="w|",
            format=tarfile.PAX_FORMAT,
            bufsize=CHUNK,
            copybufsize=CHUNK,
        )

    def add_file(self, path: Path, *, still: bool = True) -> None:
        """One regular file (gone since it was listed: left out; a link: refused, left out).

        `still`: nothing writes it meanwhile (its person is held, or no bot runs). Otherwise
        it is first copied aside (in RAM up to a MB, then to a temp file): a file emptied while
        read (the Telegram spool, once all done) gives the part read, never a member cut short."""
        name = path.relative_to(self.base).as_posix()
        try:
            fd = open_fd(path, os.O_RDONLY)
        except (FileNotFoundError, LinkRefusedError):
            return
        with os.fdopen(fd, "rb") as source:
            info = os.fstat(source.fileno())
            if not stat.S_ISREG(info.st_mode):
                return
            if still:
                self._add(name, source, info.st_size, info.st_mtime)
                return
            with tempfile.SpooledTemporaryFile(max_size=CHUNK) as staged:
                left = info.st_size
                while left > 0 and (chunk := source.read(min(CHUNK, left))):
                    staged.write(chunk)
                    left -= len(chunk)
                self._add(name, staged, staged.tell(), info.st_mtime)

    def _add(self, name: str, source: IO[bytes], size: int, mtime: float) -> None:
        if name.endswith(LINE_FILES):
            size = _whole_lines(source, size)
        source.seek(0)
        member = tarfile.TarInfo(name)
        member.size = size
        member.mode = PRIVATE_FILE_MODE
        member.mtime = int(mtime)
        reader = _Hashing(source, size, name)
        self._tar.addfile(member, reader)
        self._hashes[name] = {"size": size, "sha256": reader.digest.hexdigest()}
        self.progress.files += 1
        self.progress.bytes += size

    def add_folder(self, folder: Path, report: Callable[[Progress], None] | None = None) -> None:
        """Every kept file of a person's folder, in a stable order, links never followed."""
        for path in _walk(folder):
            self.add_file(path)
            if report is not None:
                report(self.progress)
        self.progress.folders_done += 1

    def close(self) -> Progress:
        """Add the manifest, the last member, and finish the archive (the caller syncs it)."""
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "created": clock.as_utc(clock.now()).isoformat(),
            "files": self._hashes,
        }
        data = json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")
        member = tarfile.TarInfo(MANIFEST)
        member.size = len(data)
        member.mode = PRIVATE_FILE_MODE
        member.mtime = int(clock.now().timestamp())
        self._tar.addfile(member, io.BytesIO(data))
        self._tar.close()
        if self._gzip is not None:
            self._gzip.close()  # its trailer (`out` itself stays open)
        return self.progress

    def abandon(self) -> None:
        """Stop without a manifest (the caller deletes the file: it must never look whole)."""
        with contextlib.suppress(Exception):
            self._tar.close()
            if self._gzip is not None:
                self._gzip.close()


def _kept(name: str) -> bool:
    if name in SKIPPED or name == MANIFEST:
        return False
    if name.startswith(".") and name.endswith(".tmp"):
        return False  # an interrupted atomic write
    return not history_index.is_index(name)  # derived: rebuilt after a restore


def _walk(folder: Path) -> Iterator[Path]:
    for top, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            if _kept(name):
                yield Path(top) / name


def _whole_lines(source: IO[bytes], size: int) -> int:
    """The length of the file's whole lines within its first `size` bytes (a line being
    appended is left out)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        source.seek(start)
        block = source.read(end - start)
        cut = block.rfind(b"\n")
        if cut >= 0:
            end = start + cut + 1
            break
        end = start
    return end


class _Hashing:
    """A reader of exactly `size` bytes of `source` that hashes what it hands out; a file cut
    short meanwhile (never done by the bot, which only appends or renames) is an error."""

    def __init__(self, source: IO[bytes], size: int, name: str) -> None:
        self._source = source
        self._name = name
        self._left = size
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        want = self._left if size < 0 else min(size, self._left)
        data = self._source.read(want)
        if len(data) < want:
            raise BackupError(f"{self._name} was cut short while it was read")
        self._left -= len(data)
        self.digest.update(data)
        return data


# ---- verify and restore -------------------------------------------------------------------


@dataclass
class Checked:
    """An archive found whole: its files (name → size, sha256) and when it was made."""

    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    created: str = ""

    @property
    def bytes(self) -> int:
        return sum(size for size, _ in self.files.values())


def verify(archive: Path, report: Callable[[Progress], None] | None = None) -> Checked:
    """Read the whole archive and check every member against the manifest (BackupError, one
    line, on the first thing wrong); nothing is written."""
    return _read(archive, None, report)


def restore(
    archive: Path, target: Path, report: Callable[[Progress], None] | None = None
) -> Checked:
    """Check the archive, then write its files into `target`, which must be empty (the caller
    holds its folder lock). On any failure what was written is removed again."""
    if any(entry.name != LOCK_FILE for entry in _entries(target)):
        raise BackupError(
            f"{target} is not empty: a backup is restored only into an empty folder (move this "
            "one aside, or set another [memory] workspaces_dir)"
        )
    checked = _read(archive, None, None)
    make_private_dir(target)
    try:
        _read(archive, target, report, expected=checked)
    except BaseException:
        _empty(target)
        raise
    return checked


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise BackupError(f"{folder} is not a folder") from None


def _empty(folder: Path) -> None:
    """Remove what a failed restore wrote (the folder was empty before, but for its lock)."""
    import shutil

    for entry in _entries(folder):
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()


def _read(
    archive: Path,
    target: Path | None,
    report: Callable[[Progress], None] | None,
    expected: Checked | None = None,
) -> Checked:
    seen: dict[str, tuple[int, str]] = {}
    manifest: dict[str, object] | None = None
    progress = Progress()
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for member in tar:
                if manifest is not None:
                    raise BackupError(f"member {member.name!r} comes after the manifest")
                name = _safe_name(member)
                if name in seen:
                    raise BackupError(f"member {name!r} is in the archive twice")
                source = tar.extractfile(member)
                assert source is not None  # a regular file (checked by _safe_name)
                if name == MANIFEST:
                    if member.size > MANIFEST_MAX:
                        raise BackupError(f"the manifest of {archive} is too large to be one")
                    manifest = _parse_manifest(source.read(), archive)
                    continue
                if expected is not None and name not in expected.files:
                    raise BackupError(f"member {name!r} is not in the manifest")
                seen[name] = _copy(source, member.size, target / name if target else None)
                if expected is not None and seen[name] != expected.files[name]:
                    raise BackupError(f"{name} changed between two reads of {archive}")
                progress.files += 1
                progress.bytes += member.size
                if report is not None:
                    report(progress)
        if target is not None:
            for folder in {(target / name).parent for name in seen} | {target}:
                fsync_dir(folder)  # the new names survive a crash
    except FileNotFoundError:
        raise BackupError(f"{archive} does not exist") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, OSError) and exc.filename and target is not None:
            raise BackupError(f"cannot write {exc.filename}: {exc.strerror or exc}") from None
        raise BackupError(f"{archive} is not a whole tar archive ({exc})") from None
    if manifest is None:
        raise BackupError(f"{archive} has no manifest: not a LightGrep backup, or cut short")
    return _against(manifest, seen, archive)


def _safe_name(member: tarfile.TarInfo) -> str:
    """The member's name if it is a regular file whose name stays inside the folder."""
    name = member.name
    path = PurePosixPath(name)
    if not member.isreg():
        kind = "a link" if member.issym() or member.islnk() else "not a regular file"
        raise BackupError(f"member {name!r} is {kind}: refused (a backup holds only files)")
    if not name or path.is_absolute() or name.startswith("/") or "\\" in name or "\x00" in name:
        raise BackupError(f"member {name!r} has an absolute or odd name: refused")
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise BackupError(f"member {name!r} leads out of the folder: refused")
    if name in SKIPPED:
        raise BackupError(f"member {name!r} is never part of a backup: refused")
    return name


def _copy(source: IO[bytes], size: int, path: Path | None) -> tuple[int, str]:
    """Hash the member (and write it to `path`, created new and private)."""
    digest = hashlib.sha256()
    fd = None
    if path is not None:
        make_private_dir(path.parent)
        fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        done = 0
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if fd is not None:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        if fd is not None:
            os.fsync(fd)
    finally:
        if fd is not None:
            os.close(fd)
    return done, digest.hexdigest()


def _parse_manifest(data: bytes, archive: Path) -> dict[str, object]:
    try:
        manifest = json.loads(data)
    except ValueError:
        raise BackupError(f"the manifest of {archive} is not readable") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{archive} is not a LightGrep backup")
    if manifest.get("version") != VERSION:
        raise BackupError(
            f"{archive} is a backup of format {manifest.get('version')!r}; this LightGrep "
            f"reads format {VERSION}"
        )
    return manifest


def _against(
    manifest: dict[str, object], seen: dict[str, tuple[int, str]], archive: Path
) -> Checked:
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise BackupError(f"the manifest of {archive} lists no files")
    checked = Checked(created=str(manifest.get("created", "")))
    for name, entry in files.items():
        try:
            listed = (int(entry["size"]), str(entry["sha256"]))
        except (KeyError, TypeError, ValueError):
            raise BackupError(f"the manifest's entry for {name!r} is not readable") from None
        if name not in seen:
            raise BackupError(f"{name} is in the manifest but missing from {archive}")
        if seen[name] != listed:
            raise BackupError(f"{name} differs from its hash in the manifest: damaged or altered")
        checked.files[name] = listed
    extra = sorted(set(seen) - set(checked.files))
    if extra:
        raise BackupError(f"member {extra[0]!r} is not in the manifest: refused")
    return checked
