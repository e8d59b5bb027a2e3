"""Serving until stopped, for `lightgrep run`, `chat`, `ingress` and `worker`: each platform
under a supervisor that restarts it after a failure, SIGINT/SIGTERM as a clean stop, and the
agent's pending memory work finished on the way out.

Apart from bot/cli/main.py so that the commands that only read files (`lightgrep memory`) start
without importing asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from bot.observe import heap
from bot.platform import PlatformAdapter, PlatformStartError

if TYPE_CHECKING:
    from bot.cli.core import BuiltCore
    from bot.config import LLMConfig

log = logging.getLogger("lightgrep")

SLOW_SHUTDOWN_NOTICE_S = 0.5
RESTART_FIRST_S = 1.0  # back-off before restarting a platform that failed while running…
RESTART_MAX_S = 60.0  # …doubling up to this…
STABLE_S = 60.0  # …and starting afresh once a restarted platform has served this long


@contextlib.asynccontextmanager
async def observed(
    listen: str | None,
    adapters: list[PlatformAdapter],
    llm: LLMConfig | None,
    cluster: Callable[[], dict[str, Any]] | None = None,
) -> AsyncIterator[None]:
    """/metrics and /healthz on `[metrics] listen` for the block (bot/observe/server.py), if set."""
    if not listen:
        yield
        return
    from bot.observe.server import ObserveServer

    observe = ObserveServer(listen, adapters, llm, cluster)
    await observe.start()
    try:
        yield
    finally:
        await observe.stop()


@contextlib.asynccontextmanager
async def reminding(
    built: BuiltCore, stop: asyncio.Event, owns: Callable[[str], bool] | None = None
) -> AsyncIterator[None]:
    """The agent's reminders sent at their time during the block (bot/reminders/scheduler.py),
    through the senders registered with `agent.send_with`; when it ends (or `stop`), the sends
    under way finish and are recorded."""
    task = asyncio.create_task(built.agent.reminders.run(stop, owns))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            log.error("reminders stopped on an error", exc_info=task.exception())


async def serve(adapters: list[PlatformAdapter], stop: asyncio.Event) -> None:
    """Run every adapter until `stop`, each under its own supervisor (`_supervise`).

    A platform that cannot start stops the others and its error is re-raised: a bad token is
    one line and a non-zero exit, not a retry loop. Once a platform has served, its failure is
    logged and it alone is restarted with a back-off while the others keep serving."""
    for adapter in adapters:
        log.info("starting %s", adapter.name)
    tasks = [asyncio.create_task(_supervise(a, stop), name=a.name) for a in adapters]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    errors = [error for t in done if not t.cancelled() and (error := t.exception()) is not None]
    if errors:
        stop.set()
        await asyncio.wait(tasks)
        raise errors[0]


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
    """When the adapter became ready (loop time), having said so; start-up is then over
    (bot/observe/heap.py)."""
    await adapter.ready.wait()
    heap.settle()
    log.info("%s is ready", adapter.name)
    return asyncio.get_running_loop().time()


@contextlib.contextmanager
def stop_on_signals(on_stop: Callable[[], None] | None = None) -> Iterator[asyncio.Event]:
    """An event that SIGINT/SIGTERM set (a clean wind-down), calling `on_stop` first (the
    agent's `stopping`: work that can be cut short ends at once); a second one cancels the
    main task."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and main is not None:
            main.cancel()
        if on_stop is not None:
            on_stop()
        stop.set()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
    try:
        yield stop
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def close_agent(built: BuiltCore) -> None:
    """Wait for pending consolidation, saying so if it takes a moment."""
    closing = asyncio.ensure_future(built.agent.aclose())
    done, _ = await asyncio.wait({closing}, timeout=SLOW_SHUTDOWN_NOTICE_S)
    if not done:
        print("(finishing memory consolidation before exiting…)", file=sys.stderr, flush=True)
    await closing
