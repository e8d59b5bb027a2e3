"""`lightgrep ingress` and two `lightgrep worker`s as real processes over a real nats-server,
against the fake Telegram and the fake LLM: many users answered, each user's messages kept once,
in order, by the worker of their partition only; a second claim on a partition refused; and
SIGKILL of a worker mid-turn, of the ingress mid-traffic, and of the NATS server lose nothing.
The longer figures are bench/cluster_bench.py's."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from bench.cluster_harness import SIGNING_KEY, ClusterRig
from bench.crash_loop import Traffic
from bench.harness import FIRST_USER_ID, _user_of
from tests.rigs.cluster_rig import WAIT_S, cluster_rig, until
from tests.rigs.nats_server import NatsServer, free_port

__all__ = ["until"]  # tests/rigs/cluster_rig.py's, as before

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def rig(tmp_path: Path, nats_server: NatsServer) -> AsyncIterator[ClusterRig]:
    async with cluster_rig(tmp_path, nats_server, latency_s=0.2, reply_words=20) as rig:
        yield rig


def check_kept_once_in_order_by_their_worker(rig: ClusterRig, sent: dict[int, int]) -> None:
    """`sent`: Telegram user → how many messages they sent (seq 0 … n-1)."""
    on_file = rig.messages()
    for user, count in sent.items():
        home = rig.worker_of(user)
        assert on_file[home].get(user) == list(range(count)), (user, on_file[home].get(user))
        for other, users in on_file.items():
            assert other == home or user not in users, f"user {user} written by worker {other}"


async def worker_refused(rig: ClusterRig, config: Path, partitions: str) -> tuple[int, str]:
    """A worker that should refuse to start: its exit code and stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "worker", "--config", str(config),
        "--partitions", partitions,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env=rig.ingress.env,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(proc.communicate(), WAIT_S)
    return proc.returncode or 0, stderr.decode()


async def test_an_ingress_and_two_workers_answer_many_users(rig: ClusterRig) -> None:
    await rig.start()
    # (On the same folder the folder's lock refuses it, as for `run`.) On another, the claims:
    other = rig.folder / "worker-other"
    other.mkdir()
    config = other / "config.toml"
    config.write_text(rig.workers[0].config.read_text().replace("worker0", "worker-other"))
    code, stderr = await worker_refused(rig, config, "6-9")
    assert code == 1, stderr
    said = stderr.splitlines()[-1]
    assert said.startswith("lightgrep: partitions already served by another worker: ")
    assert f"partitions 6-7 by worker pid {rig.workers[0].pid} on " in said
    assert f"partitions 8-9 by worker pid {rig.workers[1].pid} on " in said

    rng = random.Random(2)
    users = range(FIRST_USER_ID, FIRST_USER_ID + 30)
    assert {rig.worker_of(u) for u in users} == {0, 1}
    names = [rig.telegram.send(user, seq, rng) for seq in range(3) for user in users]
    await until(rig, lambda: all(rig.telegram.answers.get(n) for n in names), "every answer")
    assert await rig.terminate() == [0, 0, 0]
    check_kept_once_in_order_by_their_worker(rig, dict.fromkeys(users, 3))
    assert all(len(rig.telegram.answers[n]) == 1 for n in names)  # no kill: each answered once
    # Every message was signed with the key from the environment, which no log shows.
    for proc in (rig.ingress, *rig.workers):
        assert SIGNING_KEY not in proc.log_path.read_text()


async def test_kills_of_a_worker_the_ingress_and_nats_lose_nothing(
    rig: ClusterRig, nats_server: NatsServer
) -> None:
    traffic = Traffic(rig.telegram, users=8, burst=2, seed=3)
    assert {rig.worker_of(u) for u in traffic.next_seq} == {0, 1}
    await rig.start()
    traffic.start()

    def answered_more(count: int) -> Callable[[], bool]:
        target = len(rig.telegram.answers) + count
        return lambda: len(rig.telegram.answers) >= target

    await until(rig, answered_more(12), "answers before the worker's kill")
    worker = rig.workers[0]
    mine = [user for user in traffic.next_seq if rig.worker_of(user) == 0]

    def with_the_llm() -> bool:  # a turn of worker 0 is waiting for the model
        asked = Counter(_user_of(body) for body in rig.llm.requests)
        return any(asked[user] > len(rig.llm.busy.get(user, ())) for user in mine)

    await until(rig, with_the_llm, "a turn of worker 0 with the model")
    await worker.kill()
    on_file = rig.messages()[0]
    mid_turn = [
        (user, seq)
        for user, seqs in on_file.items()
        for seq in seqs
        if not rig.telegram.answers.get(f"LG{user}m{seq}")
    ]
    assert mid_turn  # persisted, not answered: the turn the kill interrupted
    await worker.start()  # on the same folder: it takes its claims back at once
    await until(rig, answered_more(12), "answers after the worker's restart")

    await rig.ingress.kill()
    rig.telegram.epoch += 1
    await rig.ingress.start()
    await until(rig, answered_more(12), "answers after the ingress's restart")

    await nats_server.kill()
    await asyncio.sleep(0.5)
    await nats_server.start()  # the same port and storage
    await until(rig, answered_more(12), "answers after the NATS restart")

    traffic.running = False
    await until(rig, lambda: not traffic.owed(), "every message answered")
    assert await rig.terminate() == [0, 0, 0]
    sent: dict[int, int] = {}
    for name in traffic.sent:
        user, seq = (int(n) for n in name[2:].split("m"))
        sent[user] = max(sent.get(user, 0), seq + 1)
    check_kept_once_in_order_by_their_worker(rig, sent)
    assert all(rig.telegram.answers.get(name) for name in traffic.sent)


async def test_the_ingress_and_the_workers_report_their_figures_and_health(
    rig: ClusterRig, nats_server: NatsServer
) -> None:
    ports = {}
    for name, proc in [("ingress", rig.ingress), ("worker0", rig.workers[0])]:
        ports[name] = free_port()
        text = proc.config.read_text() + f'[metrics]\nlisten = "127.0.0.1:{ports[name]}"\n'
        proc.config.write_text(text)
    await rig.start()
    rng = random.Random(4)
    users = range(FIRST_USER_ID, FIRST_USER_ID + 10)
    names = [rig.telegram.send(user, 0, rng) for user in users]
    await until(rig, lambda: all(rig.telegram.answers.get(n) for n in names), "every answer")
    mine = sum(1 for user in users if rig.worker_of(user) == 0)

    async with aiohttp.ClientSession() as http:

        async def get(name: str, path: str) -> tuple[int, str]:
            async with http.get(f"http://127.0.0.1:{ports[name]}{path}") as response:
                return response.status, await response.text()

        _, ingress = await get("ingress", "/metrics")
        assert figure(ingress, 'lightgrep_cluster_published_total{kind="message"}') == 10
        assert figure(ingress, "lightgrep_cluster_nats_connected") == 1
        _, worker = await get("worker0", "/metrics")
        assert figure(worker, 'lightgrep_cluster_acked_total{kind="message"}') == mine
        assert figure(worker, 'lightgrep_cluster_published_total{kind="answer"}') >= mine
        assert figure(worker, 'lightgrep_cluster_lease_held{partition="7"}') == 1
        assert 'lightgrep_cluster_lease_held{partition="8"}' not in worker  # worker 1's
        status, health = await get("worker0", "/healthz")
        assert status == 200, health
        assert json.loads(health)["cluster"]["partitions_held"] == "0-7"
        status, health = await get("ingress", "/healthz")
        assert status == 200 and "model" not in json.loads(health)  # the ingress asks none

        await nats_server.kill()
        deadline = time.monotonic() + WAIT_S
        while (await get("ingress", "/healthz"))[0] != 503:
            assert time.monotonic() < deadline, "the ingress still says it is healthy"
            await asyncio.sleep(0.05)
        status, health = await get("ingress", "/healthz")
        assert json.loads(health)["cluster"]["nats_connected"] is False
        await nats_server.start()
        _, ingress = await get("ingress", "/metrics")
        # Acknowledged once Telegram had each answer: the adapter's task has ended.
        assert figure(ingress, 'lightgrep_cluster_acked_total{kind="answer"}') >= 10
    assert await rig.terminate() == [0, 0, 0]


def figure(metrics: str, name: str) -> float:
    """One sample's value from a /metrics page."""
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} is not in /metrics")
