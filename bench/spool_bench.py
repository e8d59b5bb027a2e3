"""The event loop's longest pause while one person floods the Telegram spool, before and after
its disk work moved to a thread of its own (adapters/telegram/spool.py).

One update stays pending while FLOOD others are each added (fsynced) and marked done, as the
intake does for a flood: the done part grows, and every ~270 updates the file is compacted
(an atomic rewrite: fsync of the file and of its folder). Meanwhile a ticker on the same loop
sleeps 1 ms at a time; a pause is how much later than asked it woke (what everybody else's turns
wait). "idle": the ticker alone for as long, the machine's own noise. "before": the same
Spool with its disk work run at once on the loop (as it was); "after": as it is. Each is run
ROUNDS times, alternating; the medians of each round's longest pause, of its p99 pause, and of
its whole flood's time are printed, with the ratios.

Run: python bench/spool_bench.py   (a few seconds; in a temp dir beside the code, on its disk)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.telegram.spool import Spool  # noqa: E402

FLOOD = 1500
ROUNDS = 5
TICK_S = 0.001


class OnTheLoop(Spool):
    """The baseline: every piece of disk work runs at once, on the caller's thread (the loop)."""

    def _submit(self, work: Callable[[], Any]) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(work())
        except BaseException as exc:  # the caller sees it as it would from the thread
            done.set_exception(exc)
        return done


def update(uid: int) -> dict[str, object]:
    return {
        "update_id": uid,
        "message": {
            "message_id": uid,
            "date": 1_700_000_000,
            "chat": {"id": 7, "type": "private", "first_name": "User7"},
            "from": {"id": 7, "is_bot": False, "first_name": "User7"},
            "text": f"message number {uid} of the flood " + "x" * 100,
        },
    }


async def ticker(stop: asyncio.Event, pauses: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        asked = loop.time()
        await asyncio.sleep(TICK_S)
        pauses.append(max(0.0, loop.time() - asked - TICK_S))


async def flood(spool: Spool) -> tuple[float, float, float]:
    """(longest pause, p99 pause, seconds of the flood)."""
    spool.load()
    await spool.add([update(1)])
    stop = asyncio.Event()
    pauses: list[float] = []
    ticking = asyncio.create_task(ticker(stop, pauses))
    await asyncio.sleep(TICK_S * 3)
    started = time.perf_counter()
    for uid in range(2, FLOOD + 2):
        await spool.add([update(uid)])
        spool.done(uid)
        await asyncio.sleep(0)  # the intake yields between updates: the others' turns run here
    await spool.flush()
    took = time.perf_counter() - started
    stop.set()
    await ticking
    again = Spool(spool.path)
    assert [u["update_id"] for u in again.load()] == [1], "the pending update was lost"
    ordered = sorted(pauses)
    return ordered[-1], ordered[len(ordered) * 99 // 100], took


async def idle(seconds: float) -> tuple[float, float, float]:
    stop = asyncio.Event()
    pauses: list[float] = []
    ticking = asyncio.create_task(ticker(stop, pauses))
    await asyncio.sleep(seconds)
    stop.set()
    await ticking
    ordered = sorted(pauses)
    return ordered[-1], ordered[len(ordered) * 99 // 100], seconds


async def main() -> None:
    results: dict[str, list[tuple[float, float, float]]] = {"idle": [], "before": [], "after": []}
    with tempfile.TemporaryDirectory(dir=ROOT, prefix=".spool-bench-") as tmp:  # a real disk
        for n in range(ROUNDS):
            for name, kind in (("before", OnTheLoop), ("after", Spool)):
                path = Path(tmp) / f"{name}-{n}.spool"
                results[name].append(await flood(kind(path)))
            results["idle"].append(await idle(results["after"][-1][2]))
    print(f"spool: one update pending, {FLOOD} others added and done; {ROUNDS} rounds, medians")
    medians = {}
    for name, rows in results.items():
        longest, p99, took = (statistics.median(column) for column in zip(*rows, strict=True))
        medians[name] = (longest, p99, took)
        print(
            f"  {name:6}: longest loop pause {longest * 1000:6.1f} ms, p99 {p99 * 1000:5.2f} ms, "
            f"flood {took:5.2f} s ({took / FLOOD * 1e3:.2f} ms an update)"
        )
    before, after = medians["before"], medians["after"]
    print(
        f"  after/before: longest pause {after[0] / before[0]:.2f}x, p99 "
        f"{after[1] / before[1]:.2f}x, flood time {after[2] / before[2]:.2f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
