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
import time
import unicodedata
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from bot import cli_control, logsafe
from bot.config import Config, ConfigError, data_home, load_config
from bot.platform import (
    AdapterFactory,
    PlatformStartError,
    PluginError,
    load_platform,
)
from memory.folder_lock import FolderLock, FolderLockError

log = logging.getLogger("lightgrep")

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE, what a shell reports for a tool its reader left


class UserError(Exception):
    """Something the person running the command can fix; printed as one line."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


# ---- logging ------------------------------------------------------------------------------


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CHAT_LOG = "chat.log"
CHAT_LOG_BYTES = 1_000_000  # then rotated, keeping CHAT_LOG_KEPT older files
CHAT_LOG_KEPT = 2


def setup_logging(verbose: bool, quiet: bool, log_file: Path | None = None) -> Path | None:
    """Ours at INFO (WARNING when `quiet`), libraries at WARNING; --verbose: everything at DEBUG.

    On stderr, or appended to `log_file` (a chat: log lines must not land in the conversation);
    returns the file actually used, None for stderr (also when the file cannot be opened)."""
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    used = None
    if log_file is not None:
        try:
            handler = _file_handler(log_file)
            used = log_file
        except OSError:
            quiet = True  # no file to keep them in: only the warnings, on stderr
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    if not verbose:
        for name in ("bot", "adapters", "memory"):
            logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.INFO)
        log.setLevel(logging.INFO)
    return used


def _file_handler(path: Path) -> logging.Handler:
    from logging.handlers import RotatingFileHandler

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))  # private: user text
    return RotatingFileHandler(
        path, maxBytes=CHAT_LOG_BYTES, backupCount=CHAT_LOG_KEPT, encoding="utf-8"
    )


def load(path: Path | None, *, writer: bool = True) -> Config:
    """writer=False for the commands that only read: they may run beside a live bot, on a
    folder they may not write to."""
    config = load_config(path, writer=writer)  # registers every secret of it with bot.logsafe
    log.debug("configuration: %r", config)
    return config


def require_credentials(config: Config) -> None:
    """The OpenAI API refuses every request without a key: say so now, not at the first message."""
    if not config.llm.base_url and not config.llm.api_key:
        raise UserError(NO_KEY, EXIT_USAGE)


NO_KEY = (
    "no API key for the OpenAI API: set OPENAI_API_KEY, or [llm] base_url "
    "for a local server (Ollama, vLLM, llama.cpp)"
)


def describe_endpoint(config: Config) -> str:
    where = config.llm.base_url or "the OpenAI API"
    return f"model {config.llm.model} at {where}"


# ---- chat ---------------------------------------------------------------------------------


async def cmd_chat(args: argparse.Namespace) -> int:
    from bot.cli_serve import close_agent, stop_on_signals

    config = load(args.config)
    require_credentials(config)
    factory = _factory("terminal")
    where = _workspaces(config)
    log.info("connecting to %s; memory in %s", describe_endpoint(config), where)
    logs = f"; log in {args.log_file}" if args.log_file else ""
    print(f"{describe_endpoint(config)}; memory in {where}{logs}", file=sys.stderr, flush=True)
    with _only_writer(config):
        agent = _new_agent(config)
        await _warn_about_window(config)
        try:
            adapter = factory(config, agent, user=args.user, log_file=args.log_file)
            with stop_on_signals() as stop:
                await adapter.run(stop)
        finally:
            await close_agent(agent)
    return 0


# ---- run ----------------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace) -> int:
    from bot.cli_serve import close_agent, observed, serve, stop_on_signals

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
    factories = {name: _factory(name) for name in names}
    log.info("connecting to %s; memory in %s", describe_endpoint(config), _workspaces(config))
    with _only_writer(config):
        agent = _new_agent(config, metered=True)
        await _warn_about_window(config)
        try:
            core = _metered_core(agent)
            adapters = [factories[name](config, core) for name in names]
            async with observed(config.metrics.listen, adapters, config.llm):
                with stop_on_signals() as stop:
                    await serve(adapters, stop)
        finally:
            log.info("stopping: finishing pending memory work")
            await close_agent(agent)
    log.info("stopped")
    return 0


# ---- ingress and worker (several processes over NATS: bot/cluster/) ------------------------


async def cmd_ingress(args: argparse.Namespace) -> int:
    """The enabled platforms, answered by the workers through NATS JetStream."""
    from bot.cli_serve import observed, serve, stop_on_signals
    from bot.cluster.connection import ClusterError
    from bot.cluster.ingress import BrokerCore, ingress_id_for
    from bot.platform import Resender

    config = load(args.config)
    names = config.enabled_platforms()
    if not names:
        raise UserError(
            f"no platform is enabled in {config.source or 'the configuration'}: an ingress "
            "serves the platforms whose section says enabled = true",
            EXIT_USAGE,
        )
    factories = {name: _factory(name) for name in names}
    # The platforms keep their state here (Telegram's spool): one ingress per folder.
    with _only_writer(config):
        core = BrokerCore(config.cluster, ingress_id_for(_workspaces(config)))
        with stop_on_signals() as stop:
            try:
                try:
                    if not await core.start(stop):
                        return 0
                except ClusterError as exc:
                    raise UserError(str(exc)) from None
                adapters = [factories[name](config, core) for name in names]
                for adapter in adapters:  # before any await: answers may be waiting already
                    if isinstance(adapter, Resender):
                        core.send_with(adapter.name, adapter)
                async with observed(config.metrics.listen, adapters, None, core.health):
                    await serve(adapters, stop)
            finally:
                await core.close()
    log.info("stopped")
    return 0


async def cmd_worker(args: argparse.Namespace) -> int:
    """The agent, answering the messages of some partitions from NATS JetStream."""
    from bot.cli_serve import close_agent, observed, stop_on_signals
    from bot.cluster.connection import ClusterError
    from bot.cluster.lease import this_worker
    from bot.cluster.partition import RangeError, describe_ranges, parse_ranges
    from bot.cluster.worker import Worker

    config = load(args.config)
    try:
        partitions = parse_ranges(args.partitions, config.cluster.partitions)
    except RangeError as exc:
        raise UserError(f"--partitions: {exc}", EXIT_USAGE) from None
    require_credentials(config)
    log.info(
        "worker for partitions %s: %s; memory in %s",
        describe_ranges(partitions),
        describe_endpoint(config),
        _workspaces(config),
    )
    with _only_writer(config):  # its own workspaces folder, as `run` has
        agent = _new_agent(config, metered=True)
        try:
            me = this_worker(_workspaces(config))
            worker = Worker(_metered_core(agent), config.cluster, partitions, me)
            async with observed(config.metrics.listen, [], config.llm, worker.health):
                with stop_on_signals() as stop:
                    await worker.run(stop)
        except ClusterError as exc:
            raise UserError(str(exc)) from None
        finally:
            log.info("stopping: finishing pending memory work")
            await close_agent(agent)
    log.info("stopped")
    return 0


async def cmd_partitions(args: argparse.Namespace) -> int:
    """Each user of this workspaces folder with their partition: which folders to move or
    delete when partitions change workers (README, "Running on several machines")."""
    from bot.cluster.partition import RangeError, parse_ranges, partition_of
    from memory.workspace import Workspaces

    config = load(args.config, writer=False)
    count = config.cluster.partitions
    try:
        kept = set(parse_ranges(args.outside, count)) if args.outside else set()
    except RangeError as exc:
        raise UserError(f"--outside: {exc}", EXIT_USAGE) from None
    workspaces = Workspaces(_workspaces(config), writer=False)
    for key in workspaces.user_keys():
        partition = partition_of(key, count)
        if partition not in kept:
            print(f"{partition}\t{key}\t{workspaces.root_of(key)}")
    return 0


# ---- operator views -------------------------------------------------------------------------


def cmd_memory(args: argparse.Namespace) -> int:
    """MEMORY.md as stored (the same read as /memory), so it can be piped or diffed."""
    workspaces = _reader(args)
    content = workspaces.get(args.user_key).memory.read()
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

    workspace = _reader(args).get(args.user_key)
    query = RecallQuery(" ".join(args.words), page=args.page, regex=args.regex)
    try:
        answer = await recall(workspace.history_path, query)
    except SearchError as exc:
        raise UserError(f"can't search for that: {exc}", EXIT_USAGE) from None
    print(answer)
    return 0


def _reader(args: argparse.Namespace) -> Any:
    """The workspaces, opened to read only: the folder may be a live bot's (only the bot, holding
    its lock, writes there) or read-only. The user's key must exist."""
    from memory.workspace import Workspaces

    config = load(args.config, writer=False)
    args.user_key = unicodedata.normalize("NFC", args.user_key)  # as the terminal names users
    _require_workspace(config, args.user_key)
    return Workspaces(_workspaces(config), writer=False)


def _require_workspace(config: Config, key: str) -> None:
    """A mistyped key must not create an empty workspace; list the ones that exist instead."""
    from memory.workspace import Workspaces

    workspaces = Workspaces(_workspaces(config), writer=False)
    if workspaces.exists(key):
        return
    known = list(workspaces.user_keys())
    listing = ", ".join(known[:10]) + (", …" if len(known) > 10 else "") if known else "none yet"
    base = workspaces.base_dir
    raise UserError(f"no workspace for user {key!r} in {base} (known users: {listing})")


# ---- doctor -------------------------------------------------------------------------------


async def cmd_doctor(args: argparse.Namespace) -> int:
    """One line per check; a failure says what is wrong and how to fix it."""
    results: list[bool] = []

    def report(ok: bool, check: str, detail: str) -> None:
        results.append(ok)
        print(f"{'OK  ' if ok else 'FAIL'}  {check}: {detail}", flush=True)

    try:
        # writer=False: a workspaces folder that cannot be written is the next check's finding,
        # on its own line, and must not hide the endpoint's.
        config = load(args.config, writer=False)
    except ConfigError as exc:
        report(False, "config", str(exc))
        return EXIT_FAILURE
    platforms = ", ".join(config.enabled_platforms()) or "none enabled"
    source = config.source or "no config file (defaults + environment)"
    report(True, "config", f"{source}; {describe_endpoint(config)}; platforms: {platforms}")
    report(*_check_workspaces(config))
    report(*await _check_endpoint(config))
    report(*await _check_window(config))
    report(*_check_tokens())
    return 0 if all(results) else EXIT_FAILURE


def _check_workspaces(config: Config) -> tuple[bool, str, str]:
    import tempfile

    path = _workspaces(config)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return False, "workspaces", f"{path} is not writable ({exc.strerror or exc})"
    return True, "workspaces", f"{path} is writable"


async def _check_endpoint(config: Config) -> tuple[bool, str, str]:
    from bot.llm.client import LLMClient
    from memory.llm import LLMError

    where = config.llm.base_url or "https://api.openai.com/v1"
    if not config.llm.base_url and not config.llm.api_key:
        return False, "endpoint", NO_KEY
    log.info("sending a tiny chat request to %s", describe_endpoint(config))
    # A quick, honest answer: no retries (a retry would hide the failure), at most 30 s.
    client = LLMClient.from_config(
        config.llm, timeout_s=min(config.llm.timeout_s, 30.0), max_retries=0
    )
    started = time.monotonic()
    try:
        await client.chat([{"role": "user", "content": "Reply with the word OK."}], max_tokens=16)
    except LLMError as exc:
        reason = logsafe.mask(str(exc))  # the provider may quote a key, ours or another
        return False, "endpoint", f"{where}: {reason}{_endpoint_hint(reason)}"
    finally:
        await client.aclose()
    took = (time.monotonic() - started) * 1000
    return True, "endpoint", f"{where} answered with model {config.llm.model} in {took:.0f} ms"


async def _check_window(config: Config) -> tuple[bool, str, str]:
    from bot.agent.window import check_window

    fine, detail = await check_window(config)
    return fine, "context window", detail


async def _warn_about_window(config: Config) -> None:
    from bot.agent.window import warn_about_window

    await warn_about_window(config)


def _endpoint_hint(reason: str) -> str:
    if "401" in reason or "403" in reason:
        return " (check [llm] api_key or OPENAI_API_KEY)"
    if "404" in reason:
        return " (check [llm] model, and that base_url ends in /v1)"
    if "could not be reached" in reason:
        return " (is the server running, and is [llm] base_url right?)"
    return ""


def _check_tokens() -> tuple[bool, str, str]:
    from memory.tokens import TokenEstimator

    try:
        estimator = TokenEstimator()
        count = estimator.count_text("LightGrep remembers what matters.")
    except Exception as exc:  # a broken tokenizer install is exactly what doctor is for
        return False, "token counter", f"{type(exc).__name__}: {exc}"
    if count <= 0:
        return False, "token counter", f"{estimator.method} counted {count} tokens for a sentence"
    approximate = estimator.method == "chars/4"
    note = " (approximate: tiktoken's data is not available)" if approximate else ""
    return True, "token counter", f"{estimator.method}, works offline{note}"


# ---- plumbing -----------------------------------------------------------------------------


def _workspaces(config: Config) -> Path:
    return Path(config.memory.workspaces_dir)


def _factory(name: str) -> AdapterFactory:
    try:
        return load_platform(name).create
    except (PlatformStartError, PluginError) as exc:
        raise UserError(
            f"{exc} (install LightGrep with `pip install -e .` so its platforms are registered)"
        ) from None


@contextlib.contextmanager
def _only_writer(config: Config) -> Iterator[None]:
    """One process per workspaces folder: a second bot on it would be a second writer."""
    lock = FolderLock(_workspaces(config))
    try:
        lock.acquire()
    except FolderLockError as exc:
        raise UserError(str(exc)) from None
    try:
        yield
    finally:
        lock.release()


def _new_agent(config: Config, *, writer: bool = True, metered: bool = False) -> Any:
    """The bot's core; writer=True only under _only_writer (the folder lock). metered: its model
    calls and consolidations counted for /metrics (bot.observe.metrics)."""
    from bot.agent.agent import Agent  # heavy imports only for the commands that need them

    if not metered:
        return Agent(config, writer=writer)
    from bot.llm.client import LLMClient
    from bot.observe.metrics import MeteredLLM, count_consolidation

    agent = Agent(config, MeteredLLM(LLMClient.from_config(config.llm)), writer=writer)
    agent.consolidator.on_outcome = count_consolidation
    return agent


def _metered_core(agent: Any) -> Any:
    """What the adapters are handed: the agent, every message counted."""
    from bot.observe.metrics import MeteredCore

    return MeteredCore(agent)


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

    doctor = sub.add_parser("doctor", parents=[common], help="check config, endpoint, tokenizer")
    doctor.set_defaults(func=cmd_doctor)

    cli_control.add_commands(sub, common)  # forget, export, wipe
    return parser


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
    args.log_file = setup_logging(args.verbose, quiet=chatting, log_file=wanted)
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
    except asyncio.CancelledError:  # a second Ctrl-C (bot.cli_serve.stop_on_signals)
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


if __name__ == "__main__":
    # `python -m bot.cli` runs this file as __main__, a second copy beside the `bot.cli` that
    # the operator commands import (bot/cli_control.py): run that one, whose UserError they raise.
    from bot.cli import main as module_main

    sys.exit(module_main())
