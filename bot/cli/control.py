"""The operator's side of memory control: `lightgrep forget`, `lightgrep export`, `lightgrep wipe`.

The same file work as the chat commands (memory.control.forget, memory.control.export,
memory.control.wipe), for the
person running the bot: to export an archive too big for a chat, or to act on a user's request
that came another way. Forget and wipe write, so they take the workspaces folder lock and refuse,
in one line, while a bot holds it (the user can then use /forget or /wipe in the chat, which go
through the bot's own locks). Export only reads and works beside a running bot.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from bot.cli import common
from memory.folder_lock import FolderLock, FolderLockedError, FolderLockError

if TYPE_CHECKING:
    from bot.config import Config
    from memory.control.export import ArchiveInfo
    from memory.workspace import Workspaces


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the three subcommands to `lightgrep`'s parser (`sub`: its add_subparsers())."""
    forget = sub.add_parser(
        "forget", parents=[common], help="remove a phrase from everything a user's files hold"
    )
    forget.add_argument("user_key", metavar="USER_KEY", help="e.g. telegram-42")
    forget.add_argument("words", nargs="+", metavar="WORDS", help="the phrase to forget")
    forget.add_argument("--yes", action="store_true", help="do not ask before removing")
    forget.set_defaults(func=cmd_forget)

    export = sub.add_parser("export", parents=[common], help="write a user's workspace as a zip")
    export.add_argument("user_key", metavar="USER_KEY", help="e.g. telegram-42")
    export.add_argument(
        "path", nargs="?", type=Path, metavar="PATH", help="file or folder (default: here)"
    )
    export.set_defaults(func=cmd_export)

    wipe = sub.add_parser("wipe", parents=[common], help="erase everything about a user")
    wipe.add_argument("user_key", metavar="USER_KEY", help="e.g. telegram-42")
    wipe.add_argument("--yes", action="store_true", help="do not ask before erasing")
    wipe.set_defaults(func=cmd_wipe)


# ---- forget ---------------------------------------------------------------------------------


async def cmd_forget(args: argparse.Namespace) -> int:

    from memory.control.forget import ForgetError, find, forget

    config = common.load(args.config)
    common.require_workspace(config, args.user_key)
    words = " ".join(args.words)
    with folder_held(config, "forget"):
        workspace = open_workspaces(config).get(args.user_key)
        try:
            found = find(workspace, words)
        except ForgetError as exc:
            raise common.UserError(str(exc), common.EXIT_USAGE) from None
        if not found.total:
            print(f"nothing of {args.user_key} matches {found.phrase!r}; nothing removed")
            return 0
        print(f"{args.user_key}: {found.phrase!r} matches " + "; ".join(found.counts()))
        for line in found.memory_lines:
            print(f"  MEMORY.md: {line}")
        for entry in found.history_entries:
            print(f"  HISTORY.md: {' '.join(entry.split())[:200]}")
        _confirm(args.yes, "Remove all of it?")
        removed = forget(workspace, words)
    print("removed " + "; ".join(removed.counts()))
    return 0


# ---- export ---------------------------------------------------------------------------------


async def cmd_export(args: argparse.Namespace) -> int:

    from memory.control.export import archive_name, write_archive
    from memory.workspace import Workspaces

    config = common.load(args.config, writer=False)
    common.require_workspace(config, args.user_key)
    root = Workspaces(common.workspaces_dir(config), writer=False).root_of(args.user_key)
    target = args.path or Path.cwd()
    if target.is_dir():
        target = target / archive_name(root.name)
    try:
        size, files = _write_atomically(target, lambda out: write_archive(root, out))
    except OSError as exc:
        raise common.UserError(f"cannot write {target}: {exc.strerror or exc}") from None
    print(f"wrote {target.resolve()} ({files} files, {size:,} bytes)")
    return 0


def _write_atomically(target: Path, write: Callable[[IO[bytes]], ArchiveInfo]) -> tuple[int, int]:
    """Write into a temp file beside `target`, then rename: never a half archive at `target`."""
    import tempfile  # only `export` writes one

    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            info = write(out)
            os.fsync(out.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return info.size, info.files


# ---- wipe -----------------------------------------------------------------------------------


async def cmd_wipe(args: argparse.Namespace) -> int:

    from bot.reminders.groups import GroupIndex
    from bot.reminders.index import DueIndex
    from memory.control.wipe import contents, wipe_folder

    config = common.load(args.config)
    common.require_workspace(config, args.user_key)
    with folder_held(config, "wipe"):
        workspaces = open_workspaces(config)
        held = contents(workspaces.get(args.user_key))
        print(f"{args.user_key}: {held.describe()}")
        _confirm(args.yes, f"Erase everything of {args.user_key}?")
        workspaces.forget_user(args.user_key)
        wipe_folder(workspaces.root_of(args.user_key))
        index = DueIndex(workspaces.base_dir)  # their line of the reminders' due times
        if index.exists():
            index.load()
            index.drop(args.user_key)
        GroupIndex(workspaces.base_dir).drop(args.user_key)  # the groups they set some in
    print(f"erased the workspace of {args.user_key}")
    return 0


# ---- shared ---------------------------------------------------------------------------------


def open_workspaces(config: Config) -> Workspaces:
    """The folder as its one writer opens it (the caller holds the folder lock)."""
    from memory.workspace import Workspaces

    return Workspaces(
        config.memory.workspaces_dir, keep_memory_versions=config.memory.keep_memory_versions
    )


@contextmanager
def folder_held(config: Config, action: str) -> Iterator[None]:
    """The folder lock, or one line saying who holds it and what to do instead."""


    lock = FolderLock(common.workspaces_dir(config))
    try:
        lock.acquire()
    except FolderLockedError as exc:
        holder = f"process {exc.pid}" if exc.pid is not None else "another process"
        raise common.UserError(
            f"the workspaces folder {exc.folder} is in use by {holder} (a running bot?): stop it "
            f"first, or let the user send /{action} in the chat"
        ) from None
    except FolderLockError as exc:
        raise common.UserError(str(exc)) from None
    try:
        yield
    finally:
        lock.release()


def _confirm(yes: bool, question: str) -> None:
    """--yes, or a "y" typed at a terminal; anything else removes nothing."""


    if yes:
        return
    if not sys.stdin.isatty():
        raise common.UserError(
            "nothing removed: add --yes to run without a question", common.EXIT_USAGE
        )
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise common.UserError("nothing removed", common.EXIT_FAILURE)
