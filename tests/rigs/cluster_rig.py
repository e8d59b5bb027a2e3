"""The process tests' cluster: `lightgrep ingress` and two `lightgrep worker`s (bench's ClusterRig)
over the test's nats-server, with the bench's fake Telegram and fake model, all stopped at the end
whatever the test did. One place for test_cluster_processes.py, test_reminders_cluster.py and any
process test of the cluster:

    async with cluster_rig(tmp_path, nats_server, latency_s=0.05, reply_words=5) as rig:
        await rig.start()          # the three processes, each once it says it is ready
        ...                        # rig.telegram, rig.llm, rig.workers[i], rig.worker_of(user)
        assert await rig.terminate() == [0, 0, 0]

or the `rig` fixture of test_cluster_processes.py (latency 0.2 s, 20 words)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from bench.cluster_harness import ClusterRig
from bench.harness import BenchLLM, BenchTelegram
from tests.rigs.nats_server import NatsServer

WAIT_S = 30.0  # a hang guard: three cold starts and a backlog on a loaded machine


@contextlib.asynccontextmanager
async def cluster_rig(
    folder: Path, nats: NatsServer, latency_s: float = 0.2, reply_words: int = 20
) -> AsyncIterator[ClusterRig]:
    """The rig, not started (a test may change its configs first); killed and its fakes
    stopped when the block ends."""
    llm = await BenchLLM(latency_s=latency_s, reply_words=reply_words).start()
    telegram = await BenchTelegram().start()
    rig = ClusterRig(folder, llm, telegram, nats)
    try:
        yield rig
    finally:
        await rig.kill_all()
        await telegram.stop()
        await llm.stop()


async def until(rig: ClusterRig, predicate: Callable[[], bool], what: str) -> None:
    """Wait for what the processes do (polled: the fakes and the files), with their log tails
    if it does not come."""
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{rig.log_tails()}")
        await asyncio.sleep(0.02)
