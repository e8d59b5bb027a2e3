"""What cost caps and `lightgrep usage` cost.

1. The check every message goes through (`Limits.check`, then `check_tokens` when its turn
   starts), with the token caps only and with the four cost caps on as well, on usage files
   of two full months (62 days, 3 models a day, folded as the bot folds them): the median time
   of one check, and the ratio of the two, in the same run.
2. `lightgrep usage --csv` on a folder of N people (each with a usage file of 200 calls over this
   month and the last, 2 models): wall time and the child's peak memory for N and 10 N people.
   A peak that stays flat as N grows is what streaming means.

    .venv/bin/python bench/usage_bench.py [people]
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.config import LimitsConfig, Price  # noqa: E402
from bot.limits import Limits  # noqa: E402
from bot.usage import Prices, UsageBook  # noqa: E402
from memory.usage import UsageLog  # noqa: E402
from memory.workspace import Workspaces  # noqa: E402

MODELS = ("big-model", "small-model", "")  # "": lines from before models were kept
PRICES = {"big-model": Price(2.5, 10.0, 1.25), "small-model": Price(0.15, 0.6)}


def two_months(log: UsageLog, now: datetime) -> None:
    """A call of each model every day since the start of last month, folded as the bot does."""
    day = (now.replace(day=1) - timedelta(days=1)).replace(day=1)
    while day <= now:
        for model in MODELS:
            log.record(900, 100, day, model=model, cached_prompt_tokens=300)
        day += timedelta(days=1)


def check_medians(folder: Path, rounds: int = 2000) -> dict[str, float]:
    now = datetime.now(UTC)
    book = UsageBook(Workspaces(folder / "workspaces"))
    two_months(book.of("telegram-42"), now)
    two_months(book.everyone, now)
    high = 10_000.0  # never reached: every check looks at everything
    caps = {
        "token caps only": LimitsConfig(tokens_per_day=10**9, global_tokens_per_day=10**9),
        "token and cost caps": LimitsConfig(
            tokens_per_day=10**9,
            global_tokens_per_day=10**9,
            cost_per_day=high,
            cost_per_month=high,
            global_cost_per_day=high,
            global_cost_per_month=high,
        ),
    }
    found = {}
    for name, config in caps.items():
        limits = Limits(config, book, prices=Prices(PRICES, "big-model"))
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            assert limits.check_tokens("telegram-42") is None
            times.append(time.perf_counter() - started)
        found[name] = statistics.median(times) * 1e6
    return found


def folder_of(base: Path, people: int) -> Path:
    """A workspaces folder of `people` people, 200 calls each, and the bot's own file."""
    now = datetime.now(UTC)
    workspaces = base / f"workspaces-{people}"
    workspaces.mkdir(mode=0o700)
    lines = []
    for n in range(200):
        at = (now - timedelta(hours=n * 6)).isoformat()
        model = MODELS[n % 2]
        call = {"at": at, "model": model, "prompt_tokens": 900 + n, "completion_tokens": 100}
        lines.append(json.dumps({**call, "cached_prompt_tokens": 300}))
    text = "\n".join(lines) + "\n"
    for person in range(people):
        home = workspaces / f"telegram-{person}"
        home.mkdir(mode=0o700)
        (home / "usage.jsonl").write_text(text)
    (workspaces / ".usage.jsonl").write_text(text)
    return workspaces


def run_usage(base: Path, workspaces: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and peak memory (MiB) of one `lightgrep usage --csv`."""
    config = base / f"{workspaces.name}.toml"
    config.write_text(
        f'[memory]\nworkspaces_dir = "{workspaces}"\n[llm]\nmodel = "big-model"\n[prices]\n'
        '"big-model" = { input = 2.5, output = 10, cached_input = 1.25 }\n'
        '"small-model" = { input = 0.15, output = 0.6 }\n'
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(base)}
    argv = [sys.executable, "-m", "bot.cli", "usage", "--csv", "--config", str(config)]
    code = (
        "import resource, sys, runpy\n"
        f"sys.argv = {argv[2:]!r}\n"
        "try:\n    runpy.run_module('bot.cli', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    rows = done.stdout.count("\n") - 1
    assert rows >= 2 * (len(list(workspaces.iterdir())) - 1), done.stdout[-500:]
    peak_kib = int(done.stderr.strip().splitlines()[-1])
    return wall, cpu, peak_kib // 1024


def main() -> None:
    people = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        found = check_medians(base)
        plain, costed = found["token caps only"], found["token and cost caps"]
        print("Limits.check_tokens, median of 2,000 (two months of usage, 3 models a day):")
        for name, micros in found.items():
            print(f"  {name:<22} {micros:8.1f} µs")
        print(f"  ratio cost/token-only   {costed / plain:8.2f}×")
        print("lightgrep usage --csv (200 calls per person, 2 models):")
        results = {}
        for count in (people, people * 10):
            workspaces = folder_of(base, count)
            runs = [run_usage(base, workspaces) for _ in range(3)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            peak = max(r[2] for r in runs)
            results[count] = (wall, peak)
            print(f"  {count:>6,} people  {wall:6.2f} s wall  {cpu:6.2f} s CPU  {peak:4d} MiB peak")
        (small_wall, small_peak), (big_wall, big_peak) = results.values()
        print(f"  10× the people: {big_wall / small_wall:.1f}× the time, "
              f"{big_peak / small_peak:.2f}× the peak memory")  # fmt: skip


if __name__ == "__main__":
    main()
