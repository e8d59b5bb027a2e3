"""What hostile input costs the Telegram intake: half-open webhook connections, the spool with
one update pending, and /forget questions nobody answers (issue 22, findings 6 and 12).

1. Webhook: a real `lightgrep run` in webhook mode (soft fd limit 1024, as on most hosts)
   against the fake Bot API and model. Five deliveries are timed with nobody else connected
   (the baseline), then five while this process holds HALF_OPEN connections that each sent the
   start of a request head and nothing more; then how many of those the bot had closed, and
   after how long. A delivery counts as unanswered after 15 s.
2. Spool: one update pending while N others are added and handled (adapters/telegram/spool.py
   directly): the file's size, the awaited `add()` (its fsync, in the spool's thread) and the
   median and longest `done()` (on the loop: it only queues its mark; bench/spool_bench.py
   measures the loop's pauses).
3. Confirmations: 100,000 people each ask /forget once (a 400-character phrase), 50 a second
   of a simulated clock, and never answer: questions held and their bytes (tracemalloc).

Run: python bench/webhook_hostile.py   (about a minute; everything lives in a temp dir)
"""

from __future__ import annotations

import asyncio
import gc
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.telegram.spool import Spool  # noqa: E402
from bench.harness import BotProcess, child_env, write_config  # noqa: E402
from bot.commands.confirm import Confirmations  # noqa: E402
from tests.rigs.fakes.openai_server import FakeOpenAI, completion  # noqa: E402
from tests.rigs.fakes.telegram_server import FakeTelegram  # noqa: E402

HALF_OPEN = 1100
BOT_FD_LIMIT = 1024
DELIVERIES = 5
ANSWER_WAIT_S = 15.0
WATCH_S = 30.0  # how long the half-open connections are watched for being closed
HEAD = b"POST /hook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
SPOOL_UPDATES = 10_000
ASKERS = 100_000


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def deliver_timed(tg: FakeTelegram, user: int, text: str) -> tuple[int, float, float | None]:
    """(status of the POST, its seconds, seconds until the answer or None)."""
    before = len(tg.sent_to(user))
    tg.dm(user, text)
    started = time.monotonic()
    try:
        [status] = await asyncio.wait_for(tg.deliver(tg.last_update_id, attempts=1), 12)
    except TimeoutError:
        status = 0
    posted = time.monotonic() - started
    try:
        await tg.wait_sent(user, before + 1, wait_s=ANSWER_WAIT_S - posted)
    except TimeoutError:
        return status, posted, None
    return status, posted, time.monotonic() - started


Conns = list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]


async def open_half(port: int, count: int) -> Conns:
    conns: Conns = []
    failed = 0

    async def one() -> None:
        nonlocal failed
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 3)
            writer.write(HEAD)
            conns.append((reader, writer))
        except (OSError, TimeoutError):
            failed += 1

    for start in range(0, count, 50):
        await asyncio.gather(*(one() for _ in range(min(50, count - start))))
    print(f"  opened {len(conns)} half-open connections ({failed} could not connect)")
    return conns


async def watch_closed(conns: Conns, since: float) -> list[float]:
    """Seconds (from `since`) after which the bot closed each connection, within WATCH_S."""
    closed: list[float] = []

    async def one(reader: asyncio.StreamReader) -> None:
        try:
            async with asyncio.timeout(max(0.0, since + WATCH_S - time.monotonic())):
                while await reader.read(4096):
                    pass
        except TimeoutError:
            return
        except ConnectionError:
            pass
        closed.append(time.monotonic() - since)

    await asyncio.gather(*(one(r) for r, _ in conns))
    return closed


def summary(results: list[tuple[int, float, float | None]]) -> str:
    statuses = [s for s, _, _ in results]
    answered = [a for _, _, a in results if a is not None]
    median = f"{statistics.median(answered) * 1000:.0f} ms" if answered else "-"
    return (
        f"POST statuses {statuses}, answered {len(answered)}/{len(results)}, median answer {median}"
    )


async def webhook_part(folder: Path) -> None:
    print(f"1. webhook: {HALF_OPEN} half-open connections, bot fd limit {BOT_FD_LIMIT}")
    llm = await FakeOpenAI().start()
    llm.default = lambda request: completion("ok")
    tg = await FakeTelegram().start()
    port = free_port()
    config = write_config(folder, llm, tg, 8000)
    with config.open("a") as extra:
        extra.write(
            f'mode = "webhook"\nwebhook_url = "http://127.0.0.1:{port}/hook"\n'
            f"webhook_port = {port}\n"
        )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (BOT_FD_LIMIT, hard))  # the child inherits it
    bot = BotProcess(config, child_env(folder), folder / "bot.log")
    try:
        await bot.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    conns: Conns = []
    try:
        baseline = [await deliver_timed(tg, 1, f"baseline {n}") for n in range(DELIVERIES)]
        print(f"  baseline:        {summary(baseline)}")
        since = time.monotonic()
        conns = await open_half(port, HALF_OPEN)
        watching = asyncio.ensure_future(watch_closed(conns, since))
        attacked = [await deliver_timed(tg, 2, f"attacked {n}") for n in range(DELIVERIES)]
        print(f"  under the flood: {summary(attacked)}")
        closed = await watching
        held = len(conns) - len(closed)
        print(
            f"  closed by the bot within {WATCH_S:.0f} s: {len(closed)}/{len(conns)}"
            + (
                f" (median after {statistics.median(closed):.1f} s, last {max(closed):.1f} s)"
                if closed
                else ""
            )
            + f"; still held: {held}"
        )
        log = (folder / "bot.log").read_text(errors="replace")
        print(f"  'out of system resource' in the bot's log: {log.count('out of system resource')}")
    finally:
        for _, writer in conns:
            writer.close()
        await bot.terminate()
        await tg.stop()
        await llm.stop()


async def spool_part(folder: Path) -> None:
    print(f"2. spool: one update pending, {SPOOL_UPDATES} others added and handled")
    spool = Spool(folder / "bench.spool")
    spool.load()

    def update(uid: int) -> dict[str, object]:
        return {
            "update_id": uid,
            "message": {
                "message_id": uid,
                "date": 1_700_000_000,
                "chat": {"id": 7, "type": "private", "first_name": "User7"},
                "from": {"id": 7, "is_bot": False, "first_name": "User7"},
                "text": f"message number {uid} of the flood",
            },
        }

    await spool.add([update(1)])
    adds, dones = [], []
    for uid in range(2, SPOOL_UPDATES + 2):
        started = time.perf_counter()
        await spool.add([update(uid)])
        adds.append(time.perf_counter() - started)
        spool.done(uid)
        dones.append(time.perf_counter() - adds[-1] - started)
    await spool.flush()
    size = spool.path.stat().st_size
    print(f"  file: {size / 1000:.1f} kB ({size / SPOOL_UPDATES:.1f} B per update handled)")
    for name, pauses in (("await add() (fsync)", adds), ("done()", dones)):
        ordered = sorted(pauses)
        p99 = ordered[len(ordered) * 99 // 100]
        print(
            f"  {name}: median {statistics.median(pauses) * 1e6:.0f} µs, "
            f"p99 {p99 * 1000:.2f} ms, longest {ordered[-1] * 1000:.1f} ms"
        )
    again = Spool(spool.path)
    print(f"  pending after a restart: {[u['update_id'] for u in again.load()]}")


def confirmations_part() -> None:
    print(f"3. confirmations: {ASKERS} people ask /forget once, 50 a second, never answer")
    now = [0.0]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    confirmations = Confirmations(clock=lambda: now[0])
    for n in range(ASKERS):
        now[0] = n / 50
        confirmations.ask(f"telegram-{n}", "forget", f"my old address {n} " + "x" * 380)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    count = len(confirmations._pending)  # the old class has no len()
    print(f"  questions held: {count}, {held / 1e6:.1f} MB")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        await spool_part(folder)
        confirmations_part()
        await webhook_part(folder)


if __name__ == "__main__":
    asyncio.run(main())
