"""Memory benchmarks, each against a baseline measured in the same run.

1. Persisting one message (SessionStore.append) with 100, 10,000 and 100,000 messages already in
   the session: must stay flat (O(1) append, never a rewrite).
2. Prompt-token estimation per turn with 1,000 and 10,000 messages of history: warm cache (one
   message appended since the last estimate) versus recounting everything (a fresh estimator).
3. History search of a generated ~100 MB HISTORY.md versus `grep -i -c` on the same file.
4. Relevance of the ranked search versus requiring every word (bench/recall_eval.py).

Run: python bench/memory_bench.py [append|tokens|search|relevance …]   (a few minutes at most;
everything lives in a temp dir; no argument runs every section)
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import recall_eval  # noqa: E402
import recall_life  # noqa: E402

from memory.search import history_index  # noqa: E402
from memory.search.engine import CHUNK_BYTES, SCANS, search_history  # noqa: E402

SEARCH_MB = 100
SEARCH_RUNS = 5


def median_time(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``runs`` calls, in seconds."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def message(i: int) -> dict[str, str]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": f"message {i}: " + "lorem ipsum dolor sit amet " * 8}


# --- 1. persisting one message ---------------------------------------------------------------


def bench_append(tmp: Path) -> None:
    print("1. Persisting one message (SessionStore.append), median of 300 appends")
    try:
        from memory.session import SessionStore
    except ImportError as exc:
        print(f"   skipped: memory.session not available ({exc})")
        return
    figures: dict[int, float] = {}
    for existing in (100, 10_000, 100_000):
        folder = tmp / f"append-{existing}"
        store = SessionStore(folder)
        session = store.get("bench:dm:1")
        started = time.perf_counter()
        for i in range(existing):
            store.append(session, message(i))
        fill = time.perf_counter() - started
        reloaded = SessionStore(folder)  # as after a restart: the file is loaded, then appended to
        session = reloaded.get("bench:dm:1")
        assert len(session.messages) == existing
        samples = []
        for i in range(300):
            msg = message(existing + i)
            start = time.perf_counter()
            reloaded.append(session, msg)
            samples.append(time.perf_counter() - start)
        figures[existing] = statistics.median(samples)
        size = session.path.stat().st_size / 2**20
        print(
            f"   {existing:>7,} existing messages ({size:6.1f} MiB file): "
            f"{figures[existing] * 1e6:7.1f} µs per append   (filling took {fill:.1f} s)"
        )
        shutil.rmtree(folder)
    ratio = figures[100_000] / figures[100]
    verdict = "flat" if ratio <= 2 else "NOT flat"
    print(f"   ratio 100,000 / 100: {ratio:.2f}×  ({verdict}; must be within 2×)")


# --- 2. prompt-token estimation -------------------------------------------------------------


def bench_tokens(tmp: Path) -> None:
    print("2. Prompt-token estimation per turn (TokenEstimator.prompt_tokens)")
    try:
        from memory.session import SessionStore
        from memory.tokens import TokenEstimator
    except ImportError as exc:
        print(f"   skipped: memory.session / memory.tokens not available ({exc})")
        return
    system = "You are LightGrep, a helpful assistant.\n# Memory\n## Long-term Memory\n" + "x " * 400
    print(f"   estimator method: {TokenEstimator().method}")
    for history in (1_000, 10_000):
        store = SessionStore(tmp / f"tokens-{history}")
        session = store.get("bench:dm:2")
        for i in range(history):
            store.append(session, message(i))
        warm_estimator = TokenEstimator()
        warm_estimator.prompt_tokens(system, session)  # the cache is warm from earlier turns
        warm = []
        for i in range(50):
            store.append(session, message(history + i))
            start = time.perf_counter()
            warm_estimator.prompt_tokens(system, session)
            warm.append(time.perf_counter() - start)
        cold = []
        for _ in range(5):
            fresh = TokenEstimator()
            start = time.perf_counter()
            total = fresh.prompt_tokens(system, session)
            cold.append(time.perf_counter() - start)
        assert total == warm_estimator.prompt_tokens(system, session), "warm and cold disagree"
        w, c = statistics.median(warm), statistics.median(cold)
        print(
            f"   {history:>6,} messages ({total:,} tokens): warm {w * 1e6:8.1f} µs, "
            f"recount everything {c * 1e3:8.1f} ms  → warm is {c / w:,.0f}× faster"
        )


# --- 3. history search vs grep ----------------------------------------------------------------


def generate_history(path: Path, megabytes: int, seed: int = 7) -> int:
    """A HISTORY.md of about ``megabytes`` MiB in the consolidator's style; returns entries."""
    r = random.Random(seed)
    when = datetime(2015, 1, 1, 8, 0)
    target = megabytes * 2**20
    written = entries = 0
    with path.open("w", encoding="utf-8") as out:
        batch: list[str] = []
        while written < target:
            when += timedelta(minutes=r.randrange(5, 90))
            if r.random() < 0.05:
                text = recall_eval.raw_entry(r, when)
            else:
                text = f"[{when:%Y-%m-%d %H:%M}] {r.choice(recall_eval.MAKERS)(r).text}"
            block = text + "\n\n"
            batch.append(block)
            written += len(block.encode("utf-8"))
            entries += 1
            if len(batch) >= 5000:
                out.write("".join(batch))
                batch.clear()
        out.write("".join(batch))
    return entries


def bench_search(tmp: Path) -> None:
    print(f"3. History search on a generated ~{SEARCH_MB} MB HISTORY.md vs `grep -i -c`")
    grep = shutil.which("grep")
    path = tmp / "HISTORY.md"
    started = time.perf_counter()
    entries = generate_history(path, SEARCH_MB)
    size = path.stat().st_size / 2**20
    took = time.perf_counter() - started
    print(f"   file: {size:.0f} MiB, {entries:,} entries (generated in {took:.1f} s)")
    if grep is None:
        print("   skipped: grep not found")
        return
    history_index.AUTO_BUILD = False  # built here, timed; "no index" is timed without one
    started = time.perf_counter()
    pause = longest_pause(lambda: history_index.build(path, CHUNK_BYTES))
    took = time.perf_counter() - started
    index_mb = history_index.index_path(path).stat().st_size / 2**20
    print(
        f"   index beside it: built in {took:.1f} s (in a thread, loop pause ≤ {pause * 1e3:.0f} "
        f"ms), {index_mb:.0f} MiB"
    )
    search_history(path, "warm-up")  # page cache warm for both sides
    subprocess.run([grep, "-i", "-c", "warm-up", str(path)], capture_output=True, check=False)
    print(
        "   per query: grep's median time; then search_history's median time and its ratio to\n"
        "   grep (a ratio per run, then the median) for a first search with the index present\n"
        "   and current (a fresh process after the bot ran: nothing loaded, the files in the\n"
        "   page cache), a first search without an index (a file never indexed: the scan), and\n"
        "   the same search repeated; ⏸ the longest the event loop waited while it ran in a thread"
    )
    rows = [
        search_vs_grep(grep, path, word, [word])
        for word in ("Lindqvist", "deadlock", "euros")  # rare, uncommon, in 19% of entries
    ]
    question = "what did Dr. Lindqvist say about my migraines"
    print(f"   natural question ({len(question.split())} words) {question!r}:")
    rows.append(search_vs_grep(grep, path, question, question.split(), "  all 8 words"))
    search_vs_grep(grep, path, question, ["Lindqvist", "say", "migraines"], "  3 kept words")
    rows.append(search_vs_grep(grep, path, "paid euros late", ["paid", "euros", "late"]))
    rows.append(search_vs_grep(grep, path, '"electricity bill"', ["electricity bill"]))
    pattern = r"dead\w+ in (billing|search)"
    rows.append(search_vs_grep(grep, path, pattern, [pattern], "regex", regex=True))
    # a number (also looked for in words) and a typo (a second scan, one edit away)
    rows.append(search_vs_grep(grep, path, "paid 40 euros", ["paid", "40", "euros"]))
    rows.append(search_vs_grep(grep, path, "Lindqvst migraines", ["Lindqvst", "migraines"]))
    first, scan, again, paused = (max(column) for column in zip(*rows, strict=True))
    print(
        f"   worst: first search {first:.2f}× with the index "
        f"({'within' if first <= 2 else 'NOT within'} the 2× target), {scan:.2f}× without; "
        f"repeated {again:.2f}× ({'within' if again <= 0.5 else 'NOT within'} 0.5×); "
        f"loop pause ≤ {paused * 1e3:.0f} ms ({'within' if paused <= 0.05 else 'NOT within'} "
        "50 ms)"
    )
    for pattern in (".*.*.*.*z", "(a+)+$"):
        def fresh(p: str = pattern) -> object:
            SCANS.clear()  # a first search: its tally would be remembered
            return search_history(path, p, regex=True)

        s = median_time(fresh, 3)
        print(f"   regex {pattern!r}: {s * 1e3:.0f} ms (RE2: linear in the file)")
    # Dates (memory/search/dates.py): grep is given the stamps of the days (and the month's
    # name); "no index" is the scan every date query took before the index answered them.
    now = datetime(2016, 6, 1, 12, 0)  # a Wednesday
    week = [f"2016-05-{d}" for d in range(23, 30)]
    print(f"   dates, as on {now:%Y-%m-%d}:")
    dated = [
        search_vs_grep(grep, path, "last week", week, "  last week", now=now),
        search_vs_grep(grep, path, "in March", ["2016-03-", "march"], "  in March", now=now),
        search_vs_grep(grep, path, "on 2016-05-03", ["2016-05-03"], "  on 2016-05-03", now=now),
        search_vs_grep(
            grep, path, "what did I pay last week", ["pay", *week], "  +pay last week", now=now
        ),
    ]
    first, scan, again, paused = (max(column) for column in zip(*dated, strict=True))
    print(
        f"   dates, worst: first search {first:.2f}× with the index "
        f"({'within' if first <= 1 else 'NOT within'} the 1× target), {scan:.2f}× scanned"
    )
    index_mb = history_index.index_path(path).stat().st_size / 2**20
    print(f"   index / HISTORY.md: {index_mb / (path.stat().st_size / 2**20):.1%}")


def search_vs_grep(
    grep: str,
    path: Path,
    query: str,
    words: list[str],
    grep_label: str = "",
    regex: bool = False,
    now: datetime | None = None,
) -> tuple[float, float, float, float]:
    """Print and return how many times `grep -i -c`'s time search_history takes, same file.

    Several words go to grep as ``-F -e w1 -e w2 …``: lines holding any of them, like the ranking;
    a regex as ``-E``. Each run times grep, then a first search with the index (the remembered
    scans and loaded indexes forgotten), the same search again, then a first search with the
    index moved aside (the scan), one after the other, and a ratio is taken per run, so a
    machine busy with other work slows both sides of it alike; the figures are medians over the
    runs. Returns the ratios (first with the index, first without, repeated) and the longest
    loop pause of the first searches (the median over three, each run in a thread as the bot
    runs it).
    """
    args = [grep, "-i", "-c"] + (["-E"] if regex else ["-F"] if len(words) > 1 else [])
    args += [part for word in words for part in ("-e", word)] + [str(path)]
    counted = subprocess.run(args, capture_output=True, text=True, check=False).stdout.strip()
    index_file = history_index.index_path(path)
    aside = index_file.with_name(index_file.name + ".aside")

    def search() -> object:
        return search_history(path, query, regex=regex, now=now)

    def forget() -> None:  # untimed: freeing what the last run remembered is no part of it
        SCANS.clear()
        history_index.unload()

    def no_index() -> object:
        os.rename(index_file, aside)
        try:
            return search()
        finally:
            os.rename(aside, index_file)

    total = search_history(path, query, regex=regex, now=now).total
    times: list[tuple[float, float, float, float]] = []
    for _ in range(SEARCH_RUNS):
        g = median_time(lambda: subprocess.run(args, capture_output=True, check=False), 1)
        forget()
        c = median_time(search, 1)
        w = median_time(search, 1)
        forget()
        n = median_time(no_index, 1)
        times.append((g, c, n, w))
    g, c, n, w = (statistics.median(column) for column in zip(*times, strict=True))
    ratios = [statistics.median(row[k] / row[0] for row in times) for k in (1, 2, 3)]
    pauses = []
    for work in (search, no_index):
        samples = []
        for _ in range(3):  # the median of three: a busy machine's scheduler adds its own delays
            forget()
            samples.append(longest_pause(work))
        pauses.append(statistics.median(samples))
    label = grep_label or repr(query)
    print(
        f"   {label:20} grep {g * 1e3:4.0f} ms ({counted:>6} lines) | first, index "
        f"{c * 1e3:4.0f} ms = {ratios[0]:4.2f}× ⏸{pauses[0] * 1e3:3.0f} | no index "
        f"{n * 1e3:5.0f} ms = {ratios[1]:5.2f}× ⏸{pauses[1] * 1e3:3.0f} | repeated "
        f"{w * 1e3:3.0f} ms = {ratios[2]:4.2f}× | {total:>7,} entries"
    )
    return ratios[0], ratios[1], ratios[2], max(pauses)


def longest_pause(work: Callable[[], object]) -> float:
    """The longest the event loop waited for its turn while ``work`` ran in a thread, as the
    bot runs a search (asyncio.to_thread): a 1 ms timer is asked for again and again, and
    the longest it came late is the longest any other user's turn was held up."""

    async def measure() -> float:
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(None, work)
        worst = 0.0
        while not job.done():
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - started - 0.001)
        await job
        return worst

    return asyncio.run(measure())


# --- 4. relevance ----------------------------------------------------------------------------


def bench_relevance(tmp: Path) -> None:
    print("4. Relevance: ranked search vs requiring every word")
    folder = tmp / "recall"
    folder.mkdir()
    recall_eval.evaluate(folder, show=0)
    life = recall_life.build()
    print(f"   one person's life (bench/recall_life.py), {len(life.questions)} questions:")
    recall_life.report(life, recall_life.write(folder, life))


def main() -> None:
    started = time.perf_counter()
    print(f"LightGrep memory benchmarks — Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="lightgrep-bench-") as name:
        tmp = Path(name)
        sections = [bench_append, bench_tokens, bench_search, bench_relevance]
        chosen = [arg.removeprefix("bench_") for arg in sys.argv[1:]]
        for section in sections:
            if not chosen or section.__name__.removeprefix("bench_") in chosen:
                section(tmp)
                print()
    print(f"total runtime {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
