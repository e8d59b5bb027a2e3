"""Fairness benchmark: does one person's flood delay everyone else? `lightgrep run` as a real
process against the fake Bot API and a fake model with a fixed latency, on 127.0.0.1.

Three runs, each with a fresh bot and folder; in each, another allowed user (the probe) sends
--probes messages, each as soon as the previous one is answered, and we time each answer:
  unloaded   the probe alone (the baseline);
  flood      an allowed user has just sent --flood messages at once (default 250);
  strangers  someone not on the allow list has just sent --strangers DMs at once (default 130).
Prints the probe's median and worst answer time in each run and its ratio to the baseline (the
goal: under 2x), the flood's drain time and whether each of its messages was answered exactly
once, and what the strangers cost (refusals sent, model calls).

Run: python bench/fairness_bench.py                 (250-message flood, 130 strangers, 200 ms)
     python bench/fairness_bench.py --flood 500 --latency 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    token,
    write_config,
)

PROBE, FLOODER, STRANGER = 2001, 3001, 6661


@dataclass
class Run:
    name: str
    probe_s: list[float] = field(default_factory=list)
    flood_drained_s: float | None = None
    flood_answered: int = 0
    flood_duplicates: int = 0
    stranger_refusals: int = 0
    model_calls_for_strangers: int = 0
    exit_code: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.probe_s) if self.probe_s else float("nan")


async def run_once(args: argparse.Namespace, name: str, folder: Path) -> Run:
    rng = random.Random(args.seed)
    llm = await BenchLLM(args.latency, reply_words=10).start()
    telegram = await BenchTelegram().start()
    config = write_config(folder, llm, telegram, window_tokens=args.window)
    allowed = f'allow_from = ["{PROBE}", "{FLOODER}"]'
    config.write_text(config.read_text().replace('allow_from = ["*"]', allowed))
    bot = BotProcess(config, child_env(folder), folder / "bot.log")
    result = Run(name)
    try:
        await bot.start()
        started = time.monotonic()
        if name == "flood":
            for seq in range(args.flood):
                telegram.send(FLOODER, seq, rng)
            await _until(lambda: llm.chat_calls > 0, 30)  # the flood is being answered
        elif name == "strangers":
            for seq in range(args.strangers):
                telegram.dm(STRANGER, f"let me in {seq}")
            await asyncio.sleep(0.05)
        for seq in range(args.probes):
            name_ = telegram.send(PROBE, seq, rng)
            await _until(lambda n=name_: bool(telegram.answers.get(n)), 120)
            result.probe_s.append(telegram.answers[name_][0] - telegram.injected_at[name_])
        if name == "flood":
            flood = [token(FLOODER, seq) for seq in range(args.flood)]
            await _until(lambda: all(telegram.answers.get(n) for n in flood), args.timeout)
            result.flood_drained_s = time.monotonic() - started
            await asyncio.sleep(0.5)  # a duplicate answer would come now
            result.flood_answered = sum(1 for n in flood if telegram.answers.get(n))
            result.flood_duplicates = sum(len(telegram.answers.get(n, [])) - 1 for n in flood)
        if name == "strangers":
            result.stranger_refusals = len(telegram.sent_to(STRANGER))
            result.model_calls_for_strangers = sum(
                1 for r in llm.chat_requests if "let me in" in str(r.get("messages"))
            )
        result.exit_code = await bot.terminate()
    except TimeoutError:
        print(f"  {name}: TIMED OUT; bot log tail:\n{bot.log_tail()}")
        result.exit_code = -1
    finally:
        if bot.proc is not None and bot.proc.returncode is None:
            await bot.kill()
        await telegram.stop()
        await llm.stop()
    return result


async def _until(check, within_s: float) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(within_s):
        while not check():  # noqa: ASYNC110  (checks several fakes)
            await asyncio.sleep(0.005)


def report(runs: list[Run], args: argparse.Namespace) -> bool:
    base = runs[0].median
    print(f"== fairness: model latency {args.latency * 1000:.0f} ms, probe of {args.probes} "
          f"messages (each waits for its answer)")  # fmt: skip
    ok = True
    for run in runs:
        ratio = run.median / base if base else float("nan")
        line = (f"  {run.name:10s} probe answer  median {run.median * 1000:6.0f} ms  "
                f"worst {max(run.probe_s, default=float('nan')) * 1000:6.0f} ms  "
                f"= {ratio:4.2f}x unloaded")  # fmt: skip
        print(line)
        if run.name != "unloaded":
            ok = ok and ratio < 2.0
        ok = ok and run.exit_code == 0
    for run in runs:
        if run.name == "flood":
            clean = run.flood_answered == args.flood and not run.flood_duplicates
            ok = ok and clean
            drained, ideal = run.flood_drained_s or 0.0, args.flood * args.latency
            print(f"  flood      {args.flood} messages answered {run.flood_answered}, "
                  f"duplicates {run.flood_duplicates}, drained in {drained:.1f} s "
                  f"(ideal {ideal:.1f} s: one user's turns run in order)")  # fmt: skip
        if run.name == "strangers":
            refusals, calls = run.stranger_refusals, run.model_calls_for_strangers
            print(f"  strangers  {args.strangers} DMs from a stranger: refusals sent "
                  f"{refusals}, model calls {calls}")  # fmt: skip
            ok = ok and run.model_calls_for_strangers == 0 and run.stranger_refusals <= 1
    print(f"  verdict    {'OK' if ok else 'FAILED'} (goal: under 2x unloaded, nothing lost)")
    return ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=250, help="messages of the flooding user")
    parser.add_argument("--strangers", type=int, default=130, help="DMs of the stranger")
    parser.add_argument("--probes", type=int, default=7, help="messages of the probe user")
    parser.add_argument("--latency", type=float, default=0.2, help="model latency, seconds")
    parser.add_argument("--window", type=int, default=65536, help="context_window_tokens")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for the flood")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = []
    for name in ("unloaded", "flood", "strangers"):
        with tempfile.TemporaryDirectory(prefix="lightgrep-fair-") as tmp:
            runs.append(await run_once(args, name, Path(tmp)))
    return 0 if report(runs, args) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
