"""A worker in the test's own process, and the [cluster] settings of a test's nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from bot.cluster import wire
from bot.cluster.chats import SharedChats
from bot.cluster.ingress import BrokerCore
from bot.cluster.lease import this_worker
from bot.cluster.people import SharedPeople
from bot.cluster.signing import Kind, Signer
from bot.config import ClusterConfig
from bot.inbound import Inbound
from bot.observe.metrics import REGISTRY
from bot.outbound import BufferedOutbound, Reply
from bot.platform import Core
from tests.rigs.nats_server import NatsServer

WAIT_S = 15.0


SIGNING_KEY = "test-signing-key-of-the-cluster-0123456789"


def settings(server: NatsServer, **changes: object) -> ClusterConfig:
    """A test's nats-server asks no credentials: a private network, messages signed."""
    config = ClusterConfig(
        nats_url=[server.url], partitions=4, ack_wait_s=2, lease_ttl_s=3, private_network=True,
        signing_key=SIGNING_KEY,
    )  # fmt: skip
    for key, value in changes.items():
        setattr(config, key, value)
    return config


@contextlib.asynccontextmanager
async def serving(
    core: Core, cluster: ClusterConfig, folder: Path, partitions: list[int] | None = None,
    people: SharedPeople | None = None, chats: SharedChats | None = None,
) -> AsyncIterator[asyncio.Task[None]]:  # fmt: skip
    """A Worker on `folder` for `partitions` (default: all), running until the block ends;
    `people`, `chats`: the cluster's link table and chat settings, as `lightgrep worker` gives
    them (bot/cli/cluster.py)."""
    from bot.cluster.worker import Worker

    folder.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a test's folder
    chosen = partitions or list(range(cluster.partitions))
    worker = Worker(core, cluster, chosen, this_worker(folder), people, chats=chats)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    ready = asyncio.create_task(worker.ready.wait())
    await asyncio.wait({task, ready}, timeout=WAIT_S, return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if task.done():
        task.result()  # raises what made it stop
    assert worker.ready.is_set(), "the worker did not start"
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)


@contextlib.asynccontextmanager
async def ingress(cluster: ClusterConfig) -> AsyncIterator[BrokerCore]:
    core = BrokerCore(cluster)
    assert await core.start(asyncio.Event())
    try:
        yield core
    finally:
        await core.close()


async def ask(core: BrokerCore, inbound: Inbound) -> BufferedOutbound:
    out = BufferedOutbound()
    await asyncio.wait_for(core.handle(inbound, out), WAIT_S)
    return out


PEER = Signer(SIGNING_KEY)  # a process of the cluster (a buggy one: it holds the key)


async def publish(
    client: Client, subject: str, body: bytes, headers: dict[str, str], kind: Kind | None
) -> None:
    """Publish to JetStream, signed as a peer would sign `kind` (None: unsigned)."""
    if kind is not None:
        PEER.sign(kind, subject, headers, body)
    await client.jetstream().publish(subject, body, headers=headers)


def rejected(kind: str, reason: str) -> float:
    """The /metrics figure of messages of `kind` dropped for `reason`."""
    labels = {"kind": kind, "reason": reason}
    return REGISTRY.get_sample_value("lightgrep_cluster_rejected_total", labels) or 0.0


@contextlib.asynccontextmanager
async def raw_client(server: NatsServer, token: str | None = None) -> AsyncIterator[Client]:
    """A bare NATS client: what any program that reaches the server (with its token) can do."""
    client = await nats.connect(server.url, token=token)
    try:
        yield client
    finally:
        await client.close()


TOKEN = "the-nats-t0ken"  # of a server that asks for one; not the signing key


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[NatsServer]:
    """A nats-server that asks for a token, and a cluster that needs its messages signed
    (private_network = false): the token alone, which someone else may hold (leaked, shared
    with another program), must not be enough to speak for the cluster."""
    server = NatsServer(tmp_path / "guarded", tmp_path / "guarded.log")
    server.extra = ["--auth", TOKEN]
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def stored(client: Client, stream: str) -> int:
    return (await client.jetstream().stream_info(stream)).state.messages


async def until(check: Any, what: str) -> None:
    """Poll the async `check` until it is true; AssertionError after WAIT_S. The deadline is
    read between checks, not enforced by cancelling the poll: a check that asks NATS (whose
    client waits with wait_for inside) can swallow the cancellation, and the poll then went on
    for ever, past the test's timeout, with nothing said of what it waited for."""
    deadline = time.monotonic() + WAIT_S
    while not await asyncio.wait_for(check(), WAIT_S):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def _none_left(client: Client, stream: str) -> bool:
    return await stored(client, stream) == 0


class Taking:
    """A platform that takes every resent answer."""

    name = "discord"

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, str], str]] = []

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        self.sent.append((destination, reply.text if reply else ""))


def whole_answer(text: str) -> bytes:
    calls = [wire.call("begin", False), wire.call("add_text", text), wire.call("finish")]
    return wire.encode_calls(calls)


def for_channel(key: str, channel: str) -> dict[str, str]:
    """The headers of a one-message answer nobody waits for, sent by its destination."""
    where = json.dumps({"platform": "discord", "channel": channel})
    return {wire.KEY: key, wire.ATTEMPT: "a", wire.SEQ: "0", wire.MSG_ID: f"{key}:0",
            wire.DESTINATION: where}  # fmt: skip
