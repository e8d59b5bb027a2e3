"""An ingress and workers as real processes, over a real nats-server, against the fake Telegram
and the fake LLM of bench/harness.py; and what their workspaces hold, per user and in order.
Shared by tests/processes/test_cluster_processes.py and bench/cluster_bench.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from pathlib import Path

from bench.harness import (
    TOKEN_RE,
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    write_config,
)
from bot.cluster.partition import parse_ranges, partition_of
from bot.keys import user_key
from memory.session import SessionStore
from tests.rigs.nats_server import NatsServer

PARTITIONS = 16
WORKER_READY = "worker: serving partitions"


SIGNING_KEY = "bench-signing-key-of-the-cluster-0123456789"


def cluster_section(nats: NatsServer, ack_wait_s: float) -> str:
    """The test's nats-server asks no credentials (a private network); every message is
    signed, with the key from the environment (LIGHTGREP_CLUSTER_SIGNING_KEY)."""
    return (
        f"[cluster]\nnats_url = [{json.dumps(nats.url)}]\npartitions = {PARTITIONS}\n"
        f"ack_wait_s = {ack_wait_s}\nlease_ttl_s = 5\nprivate_network = true\n"
    )


class ClusterRig:
    """One ingress and a worker per partition range, each with its own folder and config."""

    def __init__(
        self,
        folder: Path,
        llm: BenchLLM,
        telegram: BenchTelegram,
        nats: NatsServer,
        ranges: tuple[str, ...] = ("0-7", "8-15"),
        window_tokens: int = 50_000,
        ack_wait_s: float = 2.0,
    ) -> None:
        self.folder = folder
        self.llm = llm
        self.nats = nats
        self.telegram = telegram
        self.ranges = ranges
        env = {**child_env(folder), "LIGHTGREP_CLUSTER_SIGNING_KEY": SIGNING_KEY}
        section = cluster_section(nats, ack_wait_s)
        self.ingress = BotProcess(
            self._config("ingress", llm, telegram, window_tokens, section),
            env,
            folder / "ingress.log",
            command=("ingress",),
        )
        self.workers = [
            BotProcess(
                self._config(f"worker{i}", llm, telegram, window_tokens, section),
                env,
                folder / f"worker{i}.log",
                command=("worker", "--partitions", chosen),
                ready=WORKER_READY,
            )
            for i, chosen in enumerate(ranges)
        ]

    def _config(
        self, name: str, llm: BenchLLM, telegram: BenchTelegram, window: int, section: str
    ) -> Path:
        home = self.folder / name
        home.mkdir(parents=True, exist_ok=True)
        path = write_config(home, llm, telegram, window_tokens=window)
        path.write_text(path.read_text() + section)
        return path

    def workspaces(self, worker: int) -> Path:
        return self.folder / f"worker{worker}" / "workspaces"

    def worker_of(self, telegram_user: int) -> int:
        """The worker whose partitions hold this Telegram user."""
        partition = partition_of(user_key("telegram", telegram_user), PARTITIONS)
        for i, chosen in enumerate(self.ranges):
            if partition in parse_ranges(chosen, PARTITIONS):
                return i
        raise AssertionError(f"no worker for partition {partition}")

    async def start(self) -> None:
        await asyncio.gather(self.ingress.start(), *(w.start() for w in self.workers))

    async def terminate(self) -> list[int]:
        """SIGTERM to all (the ingress first: it waits for the answers on their way)."""
        codes = [await self.ingress.terminate()]
        return codes + list(await asyncio.gather(*(w.terminate() for w in self.workers)))

    async def kill_all(self) -> None:
        for proc in (self.ingress, *self.workers):
            if proc.proc is not None and proc.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    await proc.kill()

    def messages(self) -> dict[int, dict[int, list[int]]]:
        """worker → Telegram user → the seq numbers of their messages on file, in file order."""
        found: dict[int, dict[int, list[int]]] = {}
        for i in range(len(self.workers)):
            found[i] = defaultdict(list)
            base = self.workspaces(i)
            if not base.is_dir():
                continue
            for root in sorted(p for p in base.iterdir() if p.is_dir()):
                store = SessionStore(root / "sessions")
                keys = store.keys()
                for key in keys:
                    for message in store.get(key).messages:
                        if message.get("role") != "user":
                            continue
                        token = TOKEN_RE.search(str(message.get("content", "")))
                        if token:
                            found[i][int(token.group(1))].append(int(token.group(2)))
        return found

    def log_tails(self) -> str:
        procs = (self.ingress, *self.workers)
        return "\n".join(f"--- {p.log_path.name}\n{p.log_tail(15)}" for p in procs)
