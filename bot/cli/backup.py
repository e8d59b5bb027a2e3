"""`lightgrep backup create|verify|restore`: the whole workspaces folder as one archive.

`create` writes a temp file beside the target and renames it only once the archive is whole
and synced, so a crashed or interrupted backup never looks complete. With no bot on the folder
it takes the folder lock and reads the files itself; beside a running bot (which holds the lock)
it asks the bot to fill the file (bot/cli/backup_service.py), which reads each person's folder
with that person's files held still while everyone else keeps being answered. `verify` reads an
archive through and checks it against its manifest; `restore` writes one into an empty
workspaces folder, holding its lock. The file work is memory/control/backup.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from bot.cli import common
from memory.atomic import fsync_dir
from memory.folder_lock import FolderLock, FolderLockedError, FolderLockError

if TYPE_CHECKING:
    from memory.control.backup import Progress

# memory.control.backup (tarfile, the search package) is imported by the commands only: the
# parser is built for every `lightgrep` command.


def add_command(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add `backup` and its three actions to `lightgrep`'s parser."""
    backup = sub.add_parser(
        "backup",
        parents=[parent],
        help="back up, check or restore the whole workspaces folder",
        description="Back up the whole workspaces folder (also while the bot runs), check an "
        "archive, or restore one into an empty folder.",
    )
    actions = backup.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create",
        parents=[parent],
        help="write one archive of every file (*.gz: compressed)",
        description="Write one tar archive of the workspaces folder, with a manifest of hashes. "
        "Beside a running bot each person's files are taken while held still.",
    )
    create.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="file or folder (default: here); - for stdout (a pipe, e.g. out of a container)",
    )
    create.set_defaults(func=cmd_create)
    verify = actions.add_parser(
        "verify",
        parents=[parent],
        help="check an archive against its manifest",
        description="Read an archive through and check every file against its manifest, "
        "without restoring anything.",
    )
    verify.add_argument("archive", type=Path, metavar="ARCHIVE")
    verify.set_defaults(func=cmd_verify)
    restore = actions.add_parser(
        "restore",
        parents=[parent],
        help="restore an archive into an empty workspaces folder",
        description="Check an archive, then write it into the configured workspaces folder, "
        "which must be empty (nothing is ever overwritten).",
    )
    restore.add_argument("archive", type=Path, metavar="ARCHIVE")
    restore.set_defaults(func=cmd_restore)


# ---- create ---------------------------------------------------------------------------------


def cmd_create(args: argparse.Namespace) -> int:
    from memory.control.backup import archive_name, compressed

    config = common.load(args.config, writer=False)
    base = Path(common.workspaces_dir(config))
    if not base.is_dir():
        raise common.UserError(f"nothing to back up: {base} does not exist")
    if args.path == "-":
        return _to_stdout(base)
    target = Path(args.path) if args.path else Path.cwd()
    if args.path and args.path.endswith("/") and not target.exists():
        _make_folder(target)
    if target.is_dir():
        target = target / archive_name()
    if target.exists():
        raise common.UserError(f"{target} exists already: name another file")
    show = _progress("backing up")
    with _written(target) as out:
        files, size = _snapshot(base, out, compressed(target.name), show)
    _done_line()
    print(f"wrote {target.resolve()} ({files} files, {size:,} bytes before packing)")
    return 0


def _make_folder(folder: Path) -> None:
    """A missing folder named with a trailing "/" (a cron line's), made private."""
    from memory.safefs import make_private_dir

    try:
        make_private_dir(folder)
    except OSError as exc:
        raise common.UserError(f"cannot make the folder {folder}: {exc.strerror or exc}") from None


def _to_stdout(base: Path) -> int:
    """The archive (gzip) on stdout, for a pipe: whoever reads it keeps it; one cut short has
    no manifest, which `verify` says."""
    if sys.stdout.isatty():
        raise common.UserError("not writing an archive to a terminal: name a file, or pipe it")
    out = sys.stdout.buffer
    files, size = _snapshot(base, out, True, _progress("backing up"))
    out.flush()
    _done_line()
    print(
        f"wrote the archive to stdout ({files} files, {size:,} bytes before packing)",
        file=sys.stderr,
    )
    return 0


def _snapshot(
    base: Path, out: IO[bytes], gzip: bool, show: Callable[[Progress], None]
) -> tuple[int, int]:
    """Ourselves when no bot holds the folder, else by the bot."""
    lock = FolderLock(base)
    try:
        lock.acquire()
    except FolderLockedError as exc:
        return _by_the_bot(base, exc.pid, out, gzip, show)
    except FolderLockError as exc:
        raise common.UserError(str(exc)) from None
    try:
        return _by_ourselves(base, out, gzip, show)
    finally:
        lock.release()


@contextlib.contextmanager
def _written(target: Path) -> Iterator[IO[bytes]]:
    """A private temp file beside `target`, renamed to it once the block ends well and the data
    is on disk; removed otherwise."""
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise common.UserError(f"cannot write {target}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_name, target)
        fsync_dir(target.parent)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _by_ourselves(
    base: Path, out: IO[bytes], gzip: bool, show: Callable[[Progress], None]
) -> tuple[int, int]:
    """No bot on the folder: we hold its lock, so nothing changes while we read."""
    from memory.control.backup import BackupError, Snapshot, top_level

    snapshot = Snapshot(base, out, gzip=gzip)
    try:
        files, folders = top_level(base)
        snapshot.progress.folders = len(folders)
        for path in files:
            snapshot.add_file(path)
        for folder in folders:
            snapshot.add_folder(folder)
            show(snapshot.progress)
        done = snapshot.close()
    except BackupError as exc:
        snapshot.abandon()
        raise common.UserError(f"backup stopped: {exc}") from None
    except BaseException:
        snapshot.abandon()
        raise
    return done.files, done.bytes


def _by_the_bot(
    base: Path, pid: int | None, out: IO[bytes], gzip: bool, show: Callable[[Progress], None]
) -> tuple[int, int]:
    """The bot holds the folder: it fills `out` (handed over by descriptor) and reports."""
    from bot.cli.backup_service import socket_address
    from memory.control.backup import SOCKET_FILE, Progress

    holder = f"process {pid}" if pid is not None else "another process"
    path = base / SOCKET_FILE
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            with socket_address(base) as address:
                conn.connect(address)
            socket.send_fds(conn, [b"backup gz\n" if gzip else b"backup tar\n"], [out.fileno()])
        except OSError as exc:
            raise common.UserError(
                f"the workspaces folder {base} is in use by {holder}, which takes no backups "
                f"({exc.strerror or exc} on {path}): is it a cluster worker? Stop it and run "
                "the backup again"
            ) from None
        progress = Progress()
        for raw in conn.makefile("rb"):
            word, _, rest = raw.decode("utf-8", "replace").strip().partition(" ")
            if word == "progress":
                done, total, files, size = (int(n) for n in rest.split())
                progress = Progress(files, size, done, total)
                show(progress)
            elif word == "done":
                files, size = (int(n) for n in rest.split())
                return files, size
            elif word == "error":
                raise common.UserError(f"backup stopped: {rest}")
    raise common.UserError(f"backup stopped: the bot ({holder}) hung up before it was done")


# ---- verify ---------------------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    from memory.control.backup import BackupError, verify

    try:
        checked = verify(args.archive, _progress("checking"))
    except BackupError as exc:
        _done_line()
        said = str(exc) if str(args.archive) in str(exc) else f"{args.archive}: {exc}"
        raise common.UserError(said) from None
    _done_line()
    print(
        f"{args.archive}: whole: {len(checked.files)} files ({checked.bytes:,} bytes) as the "
        f"manifest lists them, made {checked.created}"
    )
    return 0


# ---- restore --------------------------------------------------------------------------------


def cmd_restore(args: argparse.Namespace) -> int:
    from memory.control.backup import BackupError, restore

    config = common.load(args.config, writer=False)
    base = Path(common.workspaces_dir(config))
    if not args.archive.is_file():
        raise common.UserError(f"{args.archive} does not exist")
    lock = FolderLock(base)
    try:
        lock.acquire()
    except FolderLockedError as exc:
        holder = f"process {exc.pid}" if exc.pid is not None else "another process"
        raise common.UserError(
            f"the workspaces folder {exc.folder} is in use by {holder} (a running bot?): a "
            "backup is restored only into an empty folder no bot uses"
        ) from None
    except FolderLockError as exc:
        raise common.UserError(str(exc)) from None
    try:
        checked = restore(args.archive, base, _progress("restoring"))
    except BackupError as exc:
        _done_line()
        raise common.UserError(f"nothing restored: {exc}") from None
    finally:
        lock.release()
    _done_line()
    print(
        f"restored {len(checked.files)} files ({checked.bytes:,} bytes) into {base}; "
        "`lightgrep doctor` checks the setup"
    )
    return 0


# ---- progress -------------------------------------------------------------------------------

_shown = False


def _progress(doing: str) -> Callable[[Progress], None]:
    """One line on a terminal's stderr, rewritten as the work goes (at most ten times a
    second); nothing elsewhere (a cron job's mail gets the final line only)."""
    if not sys.stderr.isatty():
        return lambda _: None
    import time

    last = 0.0

    def show(progress: Progress) -> None:
        global _shown
        nonlocal last
        now = time.monotonic()
        if now - last < 0.1:
            return
        last = now
        folders = (
            f"{progress.folders_done}/{progress.folders} folders, " if progress.folders else ""
        )
        sys.stderr.write(
            f"\r{doing}: {folders}{progress.files:,} files, {progress.bytes / 1e6:,.1f} MB "
        )
        sys.stderr.flush()
        _shown = True

    return show


def _done_line() -> None:
    global _shown
    if _shown:
        sys.stderr.write("\n")
        _shown = False
