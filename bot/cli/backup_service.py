"""Backups taken by a running bot, for `lightgrep backup create` run beside it.

Only the process holding the workspaces folder lock may hold a person's files still, so the
bot itself writes the snapshot: `lightgrep backup create` connects to the socket
`<workspaces_dir>/.lightgrep.sock` (private, in the private folder; a peer of another uid but
root is refused), hands over the descriptor of the temp file it made (SCM_RIGHTS: the bot never
opens a path it is given) and reads progress lines while the bot fills it. Each person's folder
is read under `Residents.exclusive(reading=True)`: no turn, consolidation or reminder of theirs
runs meanwhile, so no session is taken half-written and no consolidation half-done; everyone
else keeps being answered, and the file work runs in a thread, off the event loop. The bot-wide
files beside the folders are append-only or replaced whole and are taken without a lock (up to
their last whole line).

Lines sent: `begin FOLDERS`, `progress FOLDERS_DONE FOLDERS FILES BYTES` after each folder,
then `done FILES BYTES` or `error MESSAGE`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from memory.control.backup import SOCKET_FILE, Progress, Snapshot, top_level
from memory.threads import in_thread

log = logging.getLogger("lightgrep")

Hold = Callable[[str], AbstractAsyncContextManager[None]]
REQUEST_TIMEOUT_S = 10.0


@contextlib.asynccontextmanager
async def serving_backups(
    base: Path, hold: Hold, unchanging: Callable[[], AbstractAsyncContextManager[None]]
) -> AsyncIterator[None]:
    """Take backups on the folder's socket during the block (`hold(key)`: that person's files
    held still; `unchanging()`: nobody's linked, unlinked or wiped meanwhile, for the whole
    backup). A socket that cannot be made is a warning: the bot serves without it."""
    path = Path(base) / SOCKET_FILE
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead bot's: we hold the folder lock, so no live one uses it
        with socket_address(Path(base)) as address:
            listener.bind(address)
        os.chmod(path, 0o600)
        listener.listen(4)
        listener.setblocking(False)
    except OSError as exc:
        listener.close()
        log.warning(
            "backups: cannot listen on %s (%s); `lightgrep backup create` will refuse while "
            "this bot runs",
            path,
            exc.strerror or exc,
        )
        yield
        return
    task = asyncio.create_task(_accept(listener, Path(base), hold, unchanging), name="backups")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        listener.close()
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def socket_address(base: Path) -> Iterator[str]:
    """The address of the folder's socket for bind() and connect(): its path, or where that is
    longer than a socket address may be (108 bytes), the same file reached through a descriptor
    of the folder (/proc/self/fd/N/…, Linux), open for the block."""
    path = str(base / SOCKET_FILE)
    if len(os.fsencode(path)) < 100:
        yield path
        return
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET_FILE}"
    finally:
        os.close(fd)


async def _accept(
    listener: socket.socket,
    base: Path,
    hold: Hold,
    unchanging: Callable[[], AbstractAsyncContextManager[None]],
) -> None:
    loop = asyncio.get_running_loop()
    one_at_a_time = asyncio.Lock()
    serving: set[asyncio.Task[None]] = set()
    try:
        while True:
            conn, _ = await loop.sock_accept(listener)
            serve = _serve(conn, base, hold, unchanging, one_at_a_time)
            task = asyncio.create_task(serve)
            serving.add(task)
            task.add_done_callback(serving.discard)
    finally:
        for task in serving:
            task.cancel()
        await asyncio.gather(*serving, return_exceptions=True)


async def _serve(
    conn: socket.socket,
    base: Path,
    hold: Hold,
    unchanging: Callable[[], AbstractAsyncContextManager[None]],
    one_at_a_time: asyncio.Lock,
) -> None:
    with conn:
        if not _trusted(conn):
            return
        conn.settimeout(REQUEST_TIMEOUT_S)
        try:
            message, fds, _, _ = await in_thread(lambda: socket.recv_fds(conn, 256, 1))
        except OSError:
            return
        conn.setblocking(False)
        if len(fds) != 1 or not message.startswith(b"backup "):
            for fd in fds:
                os.close(fd)
            await _send(conn, "error not a backup request")
            return
        with os.fdopen(fds[0], "wb") as out:
            if one_at_a_time.locked():
                await _send(conn, "error another backup of this bot is under way")
                return
            async with one_at_a_time, unchanging():
                await _backup(conn, base, hold, out, gzip=message.strip() == b"backup gz")


async def _backup(conn: socket.socket, base: Path, hold: Hold, out: object, *, gzip: bool) -> None:
    from memory.workspace import Workspaces

    snapshot = Snapshot(base, out, gzip=gzip)  # type: ignore[arg-type]
    try:
        files, folders = await in_thread(lambda: top_level(base))
        workspaces = Workspaces(base, writer=False)
        keys = await in_thread(
            lambda: {workspaces.root_of(k).name: k for k in workspaces.user_keys()}
        )
        snapshot.progress.folders = len(folders)
        await _send(conn, f"begin {len(folders)}")
        log.info("backup: taking %d files and %d people's folders", len(files), len(folders))
        await in_thread(lambda: _add_files(snapshot, files))
        for folder in folders:
            key = keys.get(folder.name)
            if not folder.is_dir():
                continue  # wiped since it was listed (holding it would make it anew)
            held = hold(key) if key is not None else contextlib.nullcontext()
            async with held:
                await in_thread(functools.partial(snapshot.add_folder, folder))
            await _send(conn, "progress " + _figures(snapshot.progress))
        done = await in_thread(snapshot.close)
        out.flush()  # type: ignore[attr-defined]
    except (OSError, ValueError) as exc:
        snapshot.abandon()
        log.warning("backup: stopped: %s", exc)
        with contextlib.suppress(OSError):
            await _send(conn, f"error {exc}")
        return
    except BaseException:
        snapshot.abandon()
        raise
    log.info("backup: %d files, %d bytes", done.files, done.bytes)
    with contextlib.suppress(OSError):
        await _send(conn, f"done {done.files} {done.bytes}")


def _add_files(snapshot: Snapshot, files: list[Path]) -> None:
    for path in files:
        snapshot.add_file(path, still=False)  # bot-wide: written without a person's lock


def _figures(progress: Progress) -> str:
    p = progress
    return f"{p.folders_done} {p.folders} {p.files} {p.bytes}"


def _trusted(conn: socket.socket) -> bool:
    """The peer runs as the bot's user, or as root (both can read the folder anyway)."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    _, uid, _ = struct.unpack("3i", creds)
    if uid in (os.geteuid(), 0):
        return True
    log.warning("backup: refused a request from uid %d", uid)
    return False


async def _send(conn: socket.socket, line: str) -> None:
    line = " ".join(line.split())  # one line, whatever an error message held
    await asyncio.get_running_loop().sock_sendall(conn, (line + "\n").encode("utf-8"))
