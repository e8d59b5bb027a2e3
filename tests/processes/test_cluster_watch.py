"""The watches that keep every process's RAM copy of the cluster's link table and chat
settings (bot/cluster/people.py, chats.py): when one ends — NATS restarted, the watcher
failing — it is logged and started again, reading the current values, so a change made
afterwards reaches the copy; a process stopping is no warning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from bot.chats import ChatSettings
from bot.cluster.chats import SharedChats
from bot.cluster.connection import Names
from bot.cluster.people import Doc, SharedPeople
from tests.rigs.cluster import settings
from tests.rigs.nats_server import NatsServer

pytestmark = pytest.mark.timeout(90)
WAIT_S = 30.0
GROUP = "telegram-group--100"


async def until(what: Callable[[], bool], about: str) -> None:
    """Wait for `what` with a deadline (polled: the copy changes without an event)."""
    deadline = time.monotonic() + WAIT_S
    while not what():
        assert time.monotonic() < deadline, f"timed out waiting: {about}"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def process(
    server: NatsServer, folder: Path
) -> AsyncIterator[tuple[SharedPeople, SharedChats]]:
    """One process's copies (a worker's: `folder` keeps the table's copy), on a connection
    of its own that reconnects, as bot/cluster/connection.py's does."""
    client: Client = await nats.connect(
        servers=[server.url], reconnect_time_wait=0.2, max_reconnect_attempts=-1,
        allow_reconnect=True,
    )  # fmt: skip
    cluster = settings(server)
    names = Names(cluster.subject_prefix)
    js = client.jetstream()
    folder.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a test's folder
    people, chats = SharedPeople(folder), SharedChats(folder)
    await people.start(js, names, cluster)
    await chats.start(js, names, cluster)
    try:
        yield people, chats
    finally:
        await people.close()
        await chats.close()
        await client.close()


def link(member: str, home: str) -> Callable[[Doc], Doc]:
    return lambda doc: {**doc, "links": {**doc["links"], member: home}}


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
            and r.name.startswith("bot.cluster")]  # fmt: skip


async def test_after_a_nats_restart_the_copies_catch_up_with_later_changes(
    nats_server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with process(nats_server, tmp_path / "a") as (people, chats):
        await nats_server.stop()
        await nats_server.start()
        async with process(nats_server, tmp_path / "b") as (other, other_chats):
            await other.change(link("discord-7", "telegram-42"))
            other_chats.set(GROUP, ChatSettings(trigger="always"))
            await until(lambda: people.resolve("discord-7") == "telegram-42", "the link")
            await until(lambda: chats.get(GROUP).trigger == "always", "the chat's trigger")


async def test_a_watch_that_fails_is_logged_once_and_opened_again(
    nats_server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's hook for arriving files (People.arrive_soon) raising once ends the watch;
    it is opened again, and the links made afterwards reach this worker's copy."""
    caplog.set_level(logging.INFO, logger="bot.cluster")
    async with process(nats_server, tmp_path / "a") as (people, _):
        failed: list[str] = []

        def arriving(person: str) -> None:
            if not failed:
                failed.append(person)
                raise RuntimeError("the hook failed")

        people.when_arriving(arriving)
        async with process(nats_server, tmp_path / "b") as (other, _):
            await other.notify("telegram-42", "discord-7", "linked")  # calls the hook: it fails
            await until(lambda: bool(failed), "the hook's call")
            await other.change(link("discord-7", "telegram-42"))
            await until(lambda: people.resolve("discord-7") == "telegram-42", "the later link")
            await other.change(link("terminal-bea", "telegram-42"))
            await until(lambda: people.resolve("terminal-bea") == "telegram-42", "one more")
    said = warnings(caplog)
    assert len(said) == 1, said
    assert "lightgrep-links" in said[0] and "RuntimeError" in said[0]


async def test_stopping_a_process_is_no_warning(
    nats_server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.cluster")
    async with process(nats_server, tmp_path / "a") as (people, chats):
        await people.change(link("discord-7", "telegram-42"))
        chats.set(GROUP, ChatSettings(trigger="always"))
    assert people.resolve("discord-7") == "telegram-42"
    assert warnings(caplog) == []
