"""The `lightgrep` command: chat in the terminal, run the platforms, look at memory, check setup.

Mistakes a person can make (a bad config, no platform enabled, a bad token) end with one line on
stderr and a non-zero exit code, never a traceback. Logs go to stderr through `logging`; every
configured secret is masked there by bot.logsafe.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from bot import cli_control, logsafe
from bot.config import Config, ConfigError, load_config
from bot.inbound import Inbound
from bot.keys import session_key
from bot.outbound import BufferedOutbound
from bot.platform import (
    AdapterFactory,
    PlatformAdapter,
    PlatformStartError,
    PluginError,
    load_platform,
)
from memory.folder_lock import FolderLock, FolderLockError

log = logging.getLogger("lightgrep")

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
SLOW_SHUTDOWN_NOTICE_S = 0.5
RESTART_FIRST_S = 1.0  # back-off before restarting a platform that failed while running…
RESTART_MAX_S = 60.0  # …doubling up to this…
STABLE_S = 60.0  # …and starting afresh once a restarted platform has served this long


class UserError(Exception):
    """Something the person running the command can fix; printed as one line."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


# ---- logging ------------------------------------------------------------------------------


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(verbose: bool, quiet: bool) -> None:
    """stderr; ours at INFO (WARNING in a chat, so logs don't garble the conversation), libraries
    at WARNING; --verbose: everything at DEBUG."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    if not verbose:
        for name in ("bot", "adapters", "memory"):
            logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.INFO)
        log.setLevel(logging.INFO)


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
    config = load(args.config)
    require_credentials(config)
    factory = _factory("terminal")
    log.info("connecting to %s; memory in %s", describe_endpoint(config), _workspaces(config))
    with _only_writer(config):
        agent = _new_agent(config)
        stop = asyncio.Event()
        try:
            adapter = factory(config, agent, user=args.user)
            with _signals_set(stop):
                await adapter.run(stop)
        finally:
            await _close_agent(agent)
    return 0


# ---- run ----------------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace) -> int:
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
        stop = asyncio.Event()
        observe = None
        try:
            core = _metered_core(agent)
            adapters = [factories[name](config, core) for name in names]
            if config.metrics.listen:
                from bot.observe import ObserveServer

                observe = ObserveServer(config.metrics.listen, adapters, config.llm)
                await observe.start()
            with _signals_set(stop):
                await _serve(adapters, stop)
        finally:
            if observe is not None:
                await observe.stop()
            log.info("stopping: finishing pending memory work")
            await _close_agent(agent)
    log.info("stopped")
    return 0


async def _serve(adapters: list[PlatformAdapter], stop: asyncio.Event) -> None:
    """Run every adapter until `stop`, each under its own supervisor (`_supervise`).

    A platform that cannot start stops the others and its error is re-raised: a bad token is
    one line and a non-zero exit, not a retry loop. Once a platform has served, its failure is
    logged and it alone is restarted with a back-off while the others keep serving."""
    for adapter in adapters:
        log.info("starting %s", adapter.name)
    tasks = [asyncio.create_task(_supervise(a, stop), name=a.name) for a in adapters]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    failed = [t for t in done if not t.cancelled() and t.exception() is not None]
    if failed:
        stop.set()
        await asyncio.wait(tasks)
        raise failed[0].exception()  # type: ignore[misc]


async def _supervise(adapter: PlatformAdapter, stop: asyncio.Event) -> None:
    """One platform: run it; restart it after a failure, once it has served at least once."""
    loop = asyncio.get_running_loop()
    backoff = RESTART_FIRST_S
    served = False
    while True:
        watcher = asyncio.create_task(_announce_ready(adapter))
        error: Exception | None = None
        try:
            await adapter.run(stop)
        except Exception as exc:  # any failure of one platform is that platform's alone
            error = exc
        finally:
            if adapter.ready.is_set() and not watcher.done():
                await asyncio.sleep(0)  # ready just before returning: let the watcher say so
            watcher.cancel()
        ready_at = watcher.result() if watcher.done() and not watcher.cancelled() else None
        if ready_at is not None:
            served = True
            if loop.time() - ready_at >= STABLE_S:
                backoff = RESTART_FIRST_S  # it ran well for a while: start the back-off afresh
        if stop.is_set():
            if error is not None:
                log.warning("%s failed while stopping: %s", adapter.name, _describe(error))
            return
        if error is None:
            log.warning("%s stopped on its own; the others keep running", adapter.name)
            return
        if not served:
            raise error
        log.error(
            "%s failed while running: %s; restarting %s in %.0f s (the other platforms keep "
            "serving)",
            adapter.name,
            _describe(error),
            adapter.name,
            backoff,
            exc_info=None if isinstance(error, PlatformStartError) else error,
        )
        await _wait_or_stop(stop, backoff)
        backoff = min(RESTART_MAX_S, backoff * 2)


def _describe(error: Exception) -> str:
    if isinstance(error, PlatformStartError):
        return str(error)
    first = str(error).strip().splitlines()
    return f"{type(error).__name__}: {first[0]}" if first else type(error).__name__


async def _wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _announce_ready(adapter: PlatformAdapter) -> float:
    """When the adapter became ready (loop time), having said so."""
    await adapter.ready.wait()
    log.info("%s is ready", adapter.name)
    return asyncio.get_running_loop().time()


@contextlib.contextmanager
def _signals_set(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set `stop` (a clean wind-down); a second one cancels the main task."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and main is not None:
            main.cancel()
        stop.set()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


# ---- operator views -------------------------------------------------------------------------


async def cmd_memory(args: argparse.Namespace) -> int:
    """MEMORY.md as stored (the same read as /memory), so it can be piped or diffed."""
    from memory.workspace import Workspaces

    config = load(args.config, writer=False)
    _require_workspace(config, args.user_key)
    workspaces = Workspaces(_workspaces(config), writer=False)  # a live bot may be writing
    content = workspaces.get(args.user_key).memory.read()
    if content.strip():
        print(content.rstrip("\n"))
    else:
        print(f"(nothing remembered about {args.user_key} yet)", file=sys.stderr)
    return 0


async def cmd_recall(args: argparse.Namespace) -> int:
    config = load(args.config, writer=False)
    _require_workspace(config, args.user_key)
    options = (["--regex"] if args.regex else []) + ["--page", str(args.page)]
    reply = await _as_user(config, args.user_key, " ".join(["/recall", *options, *args.words]))
    print(reply)
    return 0


async def _as_user(config: Config, key: str, command: str) -> str:
    """The command's answer exactly as that user would get it in a private chat (read-only: the
    folder may be a live bot's, and only the bot, holding its lock, writes there)."""
    agent = _new_agent(config, writer=False)
    inbound = Inbound(
        platform=key.partition("-")[0] or "cli",
        session_key=session_key("cli", "operator", key),
        user_key=key,
        text=command,
        is_private=True,
    )
    out = BufferedOutbound()
    try:
        await agent.handle(inbound, out)
        return out.reply.text
    finally:
        await agent.aclose()


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
        config = load(args.config)
    except ConfigError as exc:
        report(False, "config", str(exc))
        return EXIT_FAILURE
    platforms = ", ".join(config.enabled_platforms()) or "none enabled"
    source = config.source or "no config file (defaults + environment)"
    report(True, "config", f"{source}; {describe_endpoint(config)}; platforms: {platforms}")
    report(*_check_workspaces(config))
    report(*await _check_endpoint(config))
    report(*_check_tokens())
    return 0 if all(results) else EXIT_FAILURE


def _check_workspaces(config: Config) -> tuple[bool, str, str]:
    path = _workspaces(config)
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return False, "workspaces", f"{path} is not writable ({exc.strerror or exc})"
    return True, "workspaces", f"{path} is writable"


async def _check_endpoint(config: Config) -> tuple[bool, str, str]:
    from bot.llm import LLMClient
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
    calls and consolidations counted for /metrics (bot.metrics)."""
    from bot.agent import Agent  # heavy imports only for the commands that need them

    if not metered:
        return Agent(config, writer=writer)
    from bot.llm import LLMClient
    from bot.metrics import MeteredLLM, count_consolidation

    agent = Agent(config, MeteredLLM(LLMClient.from_config(config.llm)), writer=writer)
    agent.consolidator.on_outcome = count_consolidation
    return agent


def _metered_core(agent: Any) -> Any:
    """What the adapters are handed: the agent, every message counted."""
    from bot.metrics import MeteredCore

    return MeteredCore(agent)


async def _close_agent(agent: Any) -> None:
    """Wait for pending consolidation, saying so if it takes a moment."""
    closing = asyncio.ensure_future(agent.aclose())
    done, _ = await asyncio.wait({closing}, timeout=SLOW_SHUTDOWN_NOTICE_S)
    if not done:
        print("(finishing memory consolidation before exiting…)", file=sys.stderr, flush=True)
    await closing


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", type=Path, metavar="FILE", help="config file (default: ./config.toml if any)"
    )
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser = argparse.ArgumentParser(
        prog="lightgrep", description="A chat bot that remembers each user in plain files."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    chat = sub.add_parser("chat", parents=[common], help="talk to the bot in this terminal")
    chat.add_argument("--user", metavar="NAME", help="who you are (default: your login name)")
    chat.set_defaults(func=cmd_chat)

    run = sub.add_parser("run", parents=[common], help="serve every enabled platform")
    run.set_defaults(func=cmd_run)

    memory = sub.add_parser("memory", parents=[common], help="print a user's MEMORY.md")
    memory.add_argument("user_key", metavar="USER_KEY", help="e.g. cli-alice")
    memory.set_defaults(func=cmd_memory)

    recall = sub.add_parser("recall", parents=[common], help="search a user's HISTORY.md")
    recall.add_argument("user_key", metavar="USER_KEY", help="e.g. cli-alice")
    recall.add_argument("words", nargs="+", metavar="WORDS", help='keywords; "quotes" for a phrase')
    recall.add_argument("--regex", action="store_true", help="WORDS is a regular expression")
    recall.add_argument("--page", type=int, default=1, metavar="N", help="page of results")
    recall.set_defaults(func=cmd_recall)

    doctor = sub.add_parser("doctor", parents=[common], help="check config, endpoint, tokenizer")
    doctor.set_defaults(func=cmd_doctor)

    cli_control.add_commands(sub, common)  # forget, export, wipe
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, quiet=args.command == "chat")
    command: Callable[[argparse.Namespace], Coroutine[Any, Any, int]] = args.func
    try:
        return asyncio.run(command(args))
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except UserError as exc:
        return _fail(str(exc), exc.code)
    except PlatformStartError as exc:
        return _fail(str(exc), EXIT_FAILURE)
    except (KeyboardInterrupt, asyncio.CancelledError):
        return EXIT_INTERRUPTED


def _fail(message: str, code: int) -> int:
    print(f"lightgrep: {logsafe.mask(message)}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
