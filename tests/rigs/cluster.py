"""A worker in the test's own process, and the [cluster] settings of a test's nats-server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from bot.cluster.chats import SharedChats
from bot.cluster.lease import this_worker
from bot.cluster.people import SharedPeople
from bot.config import ClusterConfig
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


