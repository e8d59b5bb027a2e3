"""`lightgrep import chatgpt|claude|lightgrep FILE --user KEY [--facts]`: a past brought in.

The file work is memory.importing's (docs/import.md); here: the folder lock (a running bot is
the folder's only writer, as for `forget`), the person behind a linked key, a progress bar on
the bytes read, and one line for a file that cannot be imported. Ctrl-C stops between
conversations; the same command again finishes what was begun and adds nothing twice.
"""

from __future__ import annotations

import argparse
import sys
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli import common
from bot.cli.control import folder_held, open_workspaces

if TYPE_CHECKING:
    from memory.workspace import Workspaces

KINDS = ("chatgpt", "claude", "lightgrep")


def add_command(sub: Any, common_options: argparse.ArgumentParser) -> None:
    """Add `import` to `lightgrep`'s parser (`sub`: its add_subparsers())."""
    command = sub.add_parser(
        "import",
        parents=[common_options],
        help="bring a ChatGPT or Claude export, or a LightGrep archive, into a user's memory",
    )
    command.add_argument("kind", choices=KINDS, metavar="KIND", help=" | ".join(KINDS))
    command.add_argument("path", type=Path, metavar="FILE", help="the export's zip or its JSON")
    command.add_argument("--user", required=True, metavar="KEY", help="e.g. telegram-42")
    command.add_argument(
        "--facts",
        action="store_true",
        help="then learn facts from the imported conversations into MEMORY.md (asks the model; "
        "the estimate of tokens and cost is shown first)",
    )
    command.add_argument("--yes", action="store_true", help="with --facts: do not ask")
    command.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from memory.importing.sources import ImportRefused
    from memory.links import LinkError, LinkTable

    config = common.load(args.config)
    key = unicodedata.normalize("NFC", args.user)
    if not args.path.is_file():
        raise common.UserError(f"no file {args.path}", common.EXIT_USAGE)
    with folder_held(config, "import"):
        try:
            person = LinkTable(common.workspaces_dir(config)).resolve(key)
        except LinkError as exc:
            raise common.UserError(str(exc)) from None
        workspaces = open_workspaces(config)
        try:
            if args.kind == "lightgrep":
                if args.facts:
                    raise common.UserError("--facts is for ChatGPT and Claude exports")
                return _restore(workspaces, person, args.path)
            _conversations(workspaces, person, args.kind, args.path)
        except ImportRefused as exc:
            raise common.UserError(f"nothing imported: {exc}") from None
        if not args.facts:
            return 0
        import asyncio

        from bot.cli.learning import learn_facts

        return asyncio.run(learn_facts(config, person, args.kind, yes=args.yes))


def _conversations(workspaces: Workspaces, person: str, service: str, path: Path) -> int:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from memory.importing.depth import DepthGuard
    from memory.importing.formats import conversations
    from memory.importing.history import Imported, import_conversations
    from memory.importing.sources import open_json

    workspace = workspaces.get(person)
    done = Imported()
    with open_json(path) as opened:
        guard = DepthGuard(opened.stream, path.name)
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            disable=not sys.stderr.isatty(),
            console=None,
            transient=True,
        )
        with bar:
            task = bar.add_task("importing", total=opened.size)

            def show(so_far: Imported) -> None:
                nonlocal done
                done = so_far
                described = f"{so_far.conversations + so_far.skipped:,} conversations"
                bar.update(task, completed=guard.consumed, description=described)

            try:
                done = import_conversations(
                    workspace.memory, service, conversations(guard, service, name=path.name), show
                )
            except KeyboardInterrupt:
                print(
                    f"stopped after {done.conversations:,} conversations; the same command "
                    "finishes the import",
                    file=sys.stderr,
                )
                raise
    skipped = f"; {done.skipped:,} imported before, skipped" if done.skipped else ""
    print(
        f"imported {done.conversations:,} conversations ({done.entries:,} HISTORY.md entries) "
        f"for {person}{skipped}"
    )
    return 0


def _restore(workspaces: Workspaces, person: str, path: Path) -> int:
    from bot.reminders.index import DueIndex
    from memory import clock
    from memory.importing.restore import restore

    restored = restore(workspaces, person, path)
    index = DueIndex(workspaces.base_dir)
    if index.exists():  # early is safe: the scheduler reads the workspace and corrects it
        index.load()
        index.set(person, clock.now())
    if restored.merged:
        print(
            f"merged {path.name} into {person}'s files: {restored.facts:,} facts and "
            f"{restored.entries:,} HISTORY.md entries added"
        )
    else:
        print(f"restored {restored.files:,} files of {path.name} for {person}")
    return 0
