"""The `lightgrep` command: chat in the terminal, run the platforms, look at memory, check setup.

Mistakes a person can make (a bad config, no platform enabled, a bad token, a bad regex) end with
one line on stderr and a non-zero exit code, never a traceback. Logs go to stderr through
`logging` (in a terminal chat, to a file in the data folder instead, unless -v); every configured
secret is masked there by bot.logsafe. `memory` and `recall` only read files: they import neither
the agent nor any client library, so they start at once and can be piped (`| head` ends quietly).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import unicodedata
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot import logsafe
from bot.cli import backup, control, imports, init, links, reindex, usage
from bot.cli.cluster import cmd_ingress, cmd_partitions, cmd_worker
from bot.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UserError,
    describe_endpoint,
    load,
    only_writer,
    platform_factory,
    require_credentials,
    require_workspace,
    sized,
    workspaces_dir,
)
from bot.cli.core import build_core
from bot.cli.doctor import cmd_doctor
from bot.config import ConfigError, data_home
from bot.platform import OnePerson, PlatformStartError, Resender

if TYPE_CHECKING:
    from bot.cli.core import BuiltCore
    from memory.workspace import Workspaces

log = logging.getLogger("lightgrep")


# ---- logging ------------------------------------------------------------------------------


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
BRIEF_FORMAT = "%(levelname)s: %(message)s"  # a one-shot command's warnings, among its output
SERVING = ("run", "ingress", "worker")  # the commands whose INFO lines say what a service does
CHAT_LOG = "chat.log"
CHAT_LOG_BYTES = 1_000_000  # then rotated, keeping CHAT_LOG_KEPT older files
CHAT_LOG_KEPT = 2


def setup_logging(
    verbose: bool, quiet: bool, log_file: Path | None = None, *, brief: bool = False
) -> Path | None:
    """Ours at INFO (WARNING when `quiet`), libraries at WARNING; --verbose: everything at DEBUG.

    On stderr, or appended to `log_file` (a chat: log lines must not land in the conversation);
    returns the file actually used, None for stderr (also when the file cannot be opened).
    `brief` (a command that prints its own results, such as doctor, unless --verbose): only
    warnings and errors, without a timestamp, so they read as part of its output."""
    brief = brief and not verbose
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    used = None
    if log_file is not None:
        try:
            handler = _file_handler(log_file)
            used = log_file
        except OSError:
            quiet = True  # no file to keep them in: only the warnings, on stderr
    quiet = quiet or brief
    handler.setFormatter(logging.Formatter(BRIEF_FORMAT if brief else LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    if not verbose:
        for name in ("bot", "adapters", "memory"):
            logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.INFO)
        log.setLevel(logging.WARNING if brief else logging.INFO)
    return used


def _file_handler(path: Path) -> logging.Handler:
    from logging.handlers import RotatingFileHandler

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))  # private: user text
    return RotatingFileHandler(
        path, maxBytes=CHAT_LOG_BYTES, backupCount=CHAT_LOG_KEPT, encoding="utf-8"
    )


# ---- chat ---------------------------------------------------------------------------------


async def cmd_chat(args: argparse.Namespace) -> int:
    from bot.cli.backup_service import serving_backups
    from bot.cli.serve import close_agent, reminding, stop_on_signals

    config = load(args.config)
    require_credentials(config)
    factory = platform_factory("terminal")
    where = workspaces_dir(config)
    log.info("connecting to %s; memory in %s", describe_endpoint(config), where)
    logs = f"; log in {args.log_file}" if args.log_file else ""
    print(f"{describe_endpoint(config)}; memory in {where}{logs}", file=sys.stderr, flush=True)
    sizing = await sized(config)
    with only_writer(config):
        built = build_core(config, sizing, "chat")
        built.agent.start()
        try:
            adapter = factory(config, built.core, user=args.user, log_file=args.log_file)
            owns = None
            if isinstance(adapter, Resender):
                built.agent.send_with("cli", adapter)
            if isinstance(adapter, OnePerson):
                person = adapter.user_key
                owns = lambda key: key == person  # noqa: E731
            with stop_on_signals(built.agent.stopping) as stop:
                async with (
                    serving_backups(where, _holding(built), built.agent.people.unchanging),
                    reminding(built, stop, owns),
                ):
                    await adapter.run(stop)
        finally:
            await close_agent(built)
    return 0


# ---- run ----------------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace) -> int:
    from bot.cli.backup_service import serving_backups
    from bot.cli.serve import close_agent, observed, reminding, serve, stop_on_signals

    config = load(args.config)
    names = config.enabled_platforms()
    if not names:
        sections = " or ".join(f"[{name}]" for name in config.platforms) or "a platform's section"
        raise UserError(
            f"no platform is enabled in {config.source or 'the configuration'}: set enabled = true "
            f"under {sections} (or talk in the terminal with `lightgrep chat`)",
            EXIT_USAGE,
        )
    require_credentials(config)
    factories = {name: platform_factory(name) for name in names}
    log.info("connecting to %s; memory in %s", describe_endpoint(config), workspaces_dir(config))
    sizing = await sized(config)
    with only_writer(config):
        built = build_core(config, sizing, "run")
        built.agent.start()
        try:
            adapters = [factories[name](config, built.core) for name in names]
            for adapter in adapters:  # reminders go out through them
                if isinstance(adapter, Resender):
                    built.agent.send_with(adapter.name, adapter)
            async with (
                observed(config.metrics.listen, adapters, config.llm),
                serving_backups(
                    workspaces_dir(config), _holding(built), built.agent.people.unchanging
                ),
            ):
                with stop_on_signals(built.agent.stopping) as stop:
                    async with reminding(built, stop):
                        await serve(adapters, stop)
        finally:
            log.info("stopping: finishing pending memory work")
            await close_agent(built)
    log.info("stopped")
    return 0


def _holding(built: BuiltCore) -> Callable[[str], contextlib.AbstractAsyncContextManager[None]]:
    """A person's files held still while a backup reads them (bot/cli/backup_service.py)."""
    return lambda key: built.agent.residents.exclusive(key, reading=True)


# ---- ingress and worker (several processes over NATS: bot/cluster/) ------------------------


# ---- operator views -------------------------------------------------------------------------


def cmd_memory(args: argparse.Namespace) -> int:
    """MEMORY.md as stored (the same read as /memory), so it can be piped or diffed."""
    workspaces = _reader(args)
    content = workspaces.get(args.person).memory.read()
    if content.strip():
        print(content.rstrip("\n"))
    else:
        print(f"(nothing remembered about {args.user_key} yet)", file=sys.stderr)
    return 0


async def cmd_recall(args: argparse.Namespace) -> int:
    """The user's /recall answer, exactly as they would get it; a query that cannot be run (a
    bad regex) is an error, exit 2."""
    from bot.commands.recall import RecallQuery, recall
    from memory.search.engine import SearchError

    workspace = _reader(args).get(args.person)
    query = RecallQuery(" ".join(args.words), page=args.page, regex=args.regex)
    try:
        answer = await recall(workspace.history_path, workspace.sessions_dir, query, update=False)
    except SearchError as exc:
        raise UserError(f"can't search for that: {exc}", EXIT_USAGE) from None
    print(answer)
    return 0


def _reader(args: argparse.Namespace) -> Workspaces:
    """The workspaces, opened to read only: the folder may be a live bot's (only the bot, holding
    its lock, writes there) or read-only. The key may be one linked to another's workspace
    (/link): `args.person` is the key whose workspace it reads and writes, which must exist."""
    from memory.links import LinkError, LinkTable
    from memory.workspace import Workspaces

    config = load(args.config, writer=False)
    args.user_key = unicodedata.normalize("NFC", args.user_key)  # as the terminal names users
    try:
        args.person = LinkTable(workspaces_dir(config)).resolve(args.user_key)
    except LinkError as exc:
        raise UserError(str(exc)) from None
    require_workspace(config, args.person)
    return Workspaces(workspaces_dir(config), writer=False)


# ---- doctor -------------------------------------------------------------------------------


# ---- plumbing -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Global options work before the command and after it (`lightgrep --config F doctor`).

    The commands' copies default to SUPPRESS, so an option given before the command is not
    reset by the command's own default."""
    parser = argparse.ArgumentParser(
        prog="lightgrep", description="A chat bot that remembers each user in plain files."
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    chat = sub.add_parser("chat", parents=[common], help="talk to the bot in this terminal")
    chat.add_argument("--user", metavar="NAME", help="who you are (default: your login name)")
    chat.set_defaults(func=cmd_chat)

    run = sub.add_parser("run", parents=[common], help="serve every enabled platform")
    run.set_defaults(func=cmd_run)

    ingress = sub.add_parser(
        "ingress", parents=[common], help="serve the platforms; workers answer (over NATS)"
    )
    ingress.set_defaults(func=cmd_ingress)

    worker = sub.add_parser(
        "worker", parents=[common], help="answer the messages of some partitions (over NATS)"
    )
    worker.add_argument(
        "--partitions", required=True, metavar="RANGES", help="e.g. 0-7, or 0-3,8-11"
    )
    worker.set_defaults(func=cmd_worker)

    partitions = sub.add_parser(
        "partitions", parents=[common], help="list each user's partition (moving workers)"
    )
    partitions.add_argument(
        "--outside", metavar="RANGES", help="only the users outside these partitions, e.g. 0-3"
    )
    partitions.set_defaults(func=cmd_partitions)

    memory = sub.add_parser("memory", parents=[common], help="print a user's MEMORY.md")
    memory.add_argument("user_key", metavar="USER_KEY", help="e.g. cli-alice")
    memory.set_defaults(func=cmd_memory)

    recall = sub.add_parser("recall", parents=[common], help="search a user's HISTORY.md")
    recall.add_argument("user_key", metavar="USER_KEY", help="e.g. cli-alice")
    recall.add_argument("words", nargs="+", metavar="WORDS", help='keywords; "quotes" for a phrase')
    recall.add_argument("--regex", action="store_true", help="WORDS is a regular expression")
    recall.add_argument("--page", type=_page, default=1, metavar="N", help="page of results")
    recall.set_defaults(func=cmd_recall)

    doctor = sub.add_parser(
        "doctor",
        parents=[common],
        help="check the config, workspaces, endpoint, context window and token counter",
    )
    doctor.set_defaults(func=cmd_doctor)

    init.add_command(sub, common)
    control.add_commands(sub, common)  # forget, export, wipe
    links.add_commands(sub, common)  # link, unlink, links
    backup.add_command(sub, common)  # backup create|verify|restore
    usage.add_command(sub, common)  # what each person spent
    imports.add_command(sub, common)  # a ChatGPT/Claude export, a LightGrep archive
    reindex.add_command(sub, common)  # [search] embeddings' vectors brought up to date
    _describe(sub)
    return parser


def _describe(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Each command's `--help` opens with what it does: its line in `lightgrep --help`, as a
    sentence, unless the command wrote a description of its own. Done here, once for all, so
    a command added later gets one too."""
    for choice in sub._choices_actions:
        command = sub.choices[choice.dest]
        if not command.description and choice.help:
            command.description = choice.help[0].upper() + choice.help[1:] + "."


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        default=argparse.SUPPRESS if suppress else None,
        help="config file (default: ./config.toml if any)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="debug logging on stderr (in a chat: instead of the log file)",
    )


def _page(text: str) -> int:
    try:
        page = int(text)
    except ValueError:
        page = 0
    if page < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 up, not {text!r}")
    return page


class _Version(argparse.Action):
    """--version, read from the installed package only when asked (it costs an import)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("lightgrep")
        except PackageNotFoundError:
            number = "unknown (not installed: pip install -e .)"
        print(f"lightgrep {number}")
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    chatting = args.command == "chat"
    wanted = _chat_log_file() if chatting and not args.verbose else None
    brief = not chatting and args.command not in SERVING
    args.log_file = setup_logging(args.verbose, quiet=chatting, log_file=wanted, brief=brief)
    command: Callable[[argparse.Namespace], int | Coroutine[Any, Any, int]] = args.func
    try:
        started = command(args)
        return started if isinstance(started, int) else _run_async(started)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except UserError as exc:
        return _fail(str(exc), exc.code)
    except PlatformStartError as exc:
        return _fail(str(exc), EXIT_FAILURE)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _reader_went_away()
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()


def _run_async(command: Coroutine[Any, Any, int]) -> int:
    """A command that needs the event loop; asyncio is imported only for those (a reading
    command such as `memory` is a plain function and starts faster without it)."""
    import asyncio

    try:
        return asyncio.run(command)
    except asyncio.CancelledError:  # a second Ctrl-C (bot.cli.serve.stop_on_signals)
        return EXIT_INTERRUPTED


def _chat_log_file() -> Path | None:
    try:
        return data_home() / CHAT_LOG
    except ConfigError:
        return None  # no home folder: logs stay on stderr


def _reader_went_away() -> int:
    """`lightgrep recall … | head`: the reader closed the pipe. Exit quietly, as Unix tools do
    (128 + SIGPIPE), and point stdout at /dev/null so Python's final flush cannot complain."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _fail(message: str, code: int) -> int:
    print(f"lightgrep: {logsafe.mask(message)}", file=sys.stderr, flush=True)
    return code
