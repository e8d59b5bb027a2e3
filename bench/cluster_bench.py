"""Cluster benchmark: `lightgrep ingress` + 1 or 2 `lightgrep worker`s over a real nats-server,
beside `lightgrep run` on the same load, and the kill figures.

The fake Bot API and fake LLM (fixed latency, 200 ms by default) run in this process; every bot
is a real process. Throughput: `--users` users each keep one message waiting (the next sent as
soon as the answer comes), for `--seconds` after a warm-up; answered per second, the median and
p99 time from sending to the answer, and the CPU each process used per answered turn (that
figure holds on any machine; the throughput depends on the cores free: on 2 cores, the fakes,
nats-server, the ingress and the workers share them).

Kills: traffic of `--kill-users` users, and `--kills` SIGKILLs, rotating between a worker (it is
restarted on its folder), the ingress (restarted) and nats-server (restarted on its storage),
at random moments; then everything owed is answered and every process stops on SIGTERM.
Figures: sent, persisted once, persisted twice (must be 0), answered, answers sent more than
once (allowed: at-least-once delivery), lost (sent and never persisted or never answered: must
be 0). Exit code 1 on a loss or a duplicate on disk.

Run: python bench/cluster_bench.py [--users 300] [--seconds 15] [--kills 6]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cluster_harness import ClusterRig
from bench.crash_loop import Traffic
from bench.harness import (
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    percentile,
    write_config,
)
from tests.rigs.nats_server import NatsServer

WARM_UP_S = 3.0


@dataclass
class Throughput:
    label: str
    answered: int
    seconds: float
    latencies_ms: list[float]
    cpu_ms_per_turn: dict[str, float]

    @property
    def per_second(self) -> float:
        return self.answered / self.seconds


async def measure(
    label: str, procs: dict[str, Any], telegram: BenchTelegram, users: int, seconds: float
) -> Throughput:
    """Keep `users` messages in flight; count the answers of the measured window."""
    traffic = Traffic(telegram, users=users, burst=1, seed=1)
    latencies: list[float] = []
    window = [float("inf"), float("inf")]
    answered_in_window = 0
    inner = telegram.on_answer

    def on_answer(name: str, sent: object) -> None:
        nonlocal answered_in_window
        now = time.monotonic()
        if window[0] <= now <= window[1]:
            answered_in_window += 1
            if name in telegram.injected_at:
                latencies.append((now - telegram.injected_at[name]) * 1000)
        if inner is not None:
            inner(name, sent)  # type: ignore[arg-type]

    telegram.on_answer = on_answer
    traffic.start()
    await asyncio.sleep(WARM_UP_S)
    cpu_before = {name: p.cpu_seconds() for name, p in procs.items()}
    window[0] = time.monotonic()
    window[1] = window[0] + seconds
    await asyncio.sleep(seconds)
    cpu = {name: p.cpu_seconds() - cpu_before[name] for name, p in procs.items()}
    traffic.running = False
    turns = max(1, answered_in_window)
    return Throughput(
        label, answered_in_window, seconds, latencies,
        {name: 1000 * c / turns for name, c in cpu.items()},
    )  # fmt: skip


async def run_alone(folder: Path, args: argparse.Namespace) -> Throughput:
    folder.mkdir(parents=True)  # noqa: ASYNC240 - the bench's own folder
    llm = await BenchLLM(latency_s=args.latency, reply_words=30).start()
    telegram = await BenchTelegram().start()
    bot = BotProcess(
        write_config(folder, llm, telegram, window_tokens=50_000), child_env(folder),
        folder / "bot.log",
    )  # fmt: skip
    try:
        await bot.start()
        result = await measure("lightgrep run", {"run": bot}, telegram, args.users, args.seconds)
        await bot.terminate()
        return result
    finally:
        if bot.proc is not None and bot.proc.returncode is None:
            await bot.kill()
        await telegram.stop()
        await llm.stop()


async def run_cluster(folder: Path, args: argparse.Namespace, workers: int) -> Throughput:
    ranges = ("0-15",) if workers == 1 else ("0-7", "8-15")
    nats = await NatsServer(folder / "nats", folder / "nats.log").start()
    llm = await BenchLLM(latency_s=args.latency, reply_words=30).start()
    telegram = await BenchTelegram().start()
    rig = ClusterRig(folder, llm, telegram, nats, ranges=ranges)
    try:
        await rig.start()
        procs: dict[str, Any] = {"ingress": rig.ingress}
        procs |= {f"worker{i}": w for i, w in enumerate(rig.workers)}
        procs["nats-server"] = _Cpu(nats)
        label = f"ingress + {workers} worker{'s' if workers > 1 else ''}"
        result = await measure(label, procs, telegram, args.users, args.seconds)
        await rig.terminate()
        return result
    finally:
        await rig.kill_all()
        await telegram.stop()
        await llm.stop()
        await nats.stop()


class _Cpu:
    """nats-server's CPU time, read as BotProcess reads a bot's."""

    def __init__(self, nats: NatsServer) -> None:
        self._nats = nats

    def cpu_seconds(self) -> float:
        assert self._nats.proc is not None
        try:
            stat = Path(f"/proc/{self._nats.proc.pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class KillTally:
    kills: dict[str, int]
    sent: int
    persisted_once: int
    persisted_twice: int
    answered: int
    answered_more_than_once: int
    lost: list[str]
    exit_codes: list[int]


async def kill_loop(folder: Path, args: argparse.Namespace) -> KillTally:
    nats = await NatsServer(folder / "nats", folder / "nats.log").start()
    llm = await BenchLLM(latency_s=args.latency, reply_words=30).start()
    telegram = await BenchTelegram().start()
    rig = ClusterRig(folder, llm, telegram, nats)
    rng = random.Random(args.seed)
    kills = {"worker": 0, "ingress": 0, "nats": 0}
    try:
        await rig.start()
        traffic = Traffic(telegram, users=args.kill_users, burst=2, seed=args.seed)
        traffic.start()
        for number in range(args.kills):
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            what = ("worker", "ingress", "nats")[number % 3]
            kills[what] += 1
            if what == "worker":
                worker = rng.choice(rig.workers)
                await worker.kill()
                await worker.start()
            elif what == "ingress":
                await rig.ingress.kill()
                telegram.epoch += 1
                await rig.ingress.start()
            else:
                await nats.kill()
                await asyncio.sleep(0.3)
                await nats.start()
        traffic.running = False
        await until(lambda: not traffic.owed(), 120.0)
        codes = await rig.terminate()
        on_file = rig.messages()
        copies: dict[str, int] = {}
        for users in on_file.values():
            for user, seqs in users.items():
                for seq in seqs:
                    name = f"LG{user}m{seq}"
                    copies[name] = copies.get(name, 0) + 1
        sent = traffic.sent
        return KillTally(
            kills=kills,
            sent=len(sent),
            persisted_once=sum(1 for n in sent if copies.get(n) == 1),
            persisted_twice=sum(1 for n in sent if copies.get(n, 0) > 1),
            answered=sum(1 for n in sent if telegram.answers.get(n)),
            answered_more_than_once=sum(1 for n in sent if len(telegram.answers.get(n, [])) > 1),
            lost=[n for n in sent if not copies.get(n) or not telegram.answers.get(n)],
            exit_codes=codes,
        )
    finally:
        await rig.kill_all()
        await telegram.stop()
        await llm.stop()
        await nats.stop()


async def until(predicate: Callable[[], bool], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while not predicate() and time.monotonic() < deadline:  # noqa: ASYNC110 - polled state
        await asyncio.sleep(0.05)


def report(results: list[Throughput], baseline: Throughput) -> None:
    print(
        f"\nthroughput: {baseline.label!r} baseline, fake LLM {ARGS.latency * 1000:.0f} ms, "
        f"{ARGS.users} users each with one message waiting, {ARGS.seconds:.0f} s measured"
    )
    print(f"{'setup':<22} {'answers/s':>9} {'vs run':>7} {'p50 ms':>7} {'p99 ms':>7}  CPU ms/turn")
    for r in [baseline, *results]:
        cpu = ", ".join(f"{name} {ms:.1f}" for name, ms in r.cpu_ms_per_turn.items())
        print(
            f"{r.label:<22} {r.per_second:>9.1f} {r.per_second / baseline.per_second:>6.2f}x "
            f"{statistics.median(r.latencies_ms or [0]):>7.0f} "
            f"{percentile(r.latencies_ms, 99):>7.0f}  {cpu}"
        )


ARGS = argparse.Namespace()


async def main(argv: list[str] | None = None) -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--kill-users", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-throughput", action="store_true")
    ARGS = args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lightgrep-cluster-bench-") as tmp:
        base = Path(tmp)
        if not args.skip_throughput:
            baseline = await run_alone(base / "run", args)
            results = [await run_cluster(base / f"cluster{n}", args, n) for n in (1, 2)]
            report(results, baseline)
        tally = await kill_loop(base / "kills", args)
    kills = ", ".join(f"{n} {what}" for what, n in tally.kills.items())
    print(f"\nkills: {kills} (SIGKILL, restarted), {args.kill_users} users talking throughout")
    print(
        f"sent {tally.sent}, persisted once {tally.persisted_once}, persisted twice "
        f"{tally.persisted_twice}, answered {tally.answered} (more than once: "
        f"{tally.answered_more_than_once}), lost {len(tally.lost)}; exit codes on SIGTERM "
        f"{tally.exit_codes}"
    )
    if tally.lost:
        print(f"LOST: {tally.lost[:20]}")
    return 1 if tally.lost or tally.persisted_twice else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
