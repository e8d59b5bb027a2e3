"""/recall over big consolidated transcripts: build time, query time, the event loop's pauses.

    python bench/recall_transcripts.py [--megabytes 50] [--queries 40]

A workspace with `--megabytes` MiB of session files (8 transcripts of chat messages, user and
assistant, all but the last 20 messages of each consolidated) and a 1 MiB HISTORY.md. Measured,
the search called as /recall calls it (memory/search/transcripts.search in a thread, the event
loop ticking every 5 ms beside it):
- the first search: the derived text of the consolidated messages written from nothing;
- the word index of that text (memory/search/history_index.py) built in the background after;
- query medians once it is there, beside the same queries over HISTORY.md alone (the baseline,
  in the same run: what /recall cost before);
- the next search after 200 more messages were consolidated (appended, not rebuilt);
- the event loop's longest pause through all of it (goal: under 0.5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory.search import history_index, transcripts
from memory.search.engine import CHUNK_BYTES, search_history

WORDS = [
    "garden",
    "weekend",
    "coffee",
    "train",
    "office",
    "meeting",
    "recipe",
    "bread",
    "paint",
    "bike",
    "market",
    "river",
    "walk",
    "dinner",
    "kitchen",
    "sister",
    "brother",
    "doctor",
    "school",
    "holiday",
    "rain",
    "summer",
    "winter",
    "project",
    "budget",
    "invoice",
    "camera",
    "phone",
    "laptop",
    "book",
    "film",
    "song",
    "guitar",
    "piano",
    "runner",
    "tennis",
    "football",
    "museum",
    "concert",
]
NAMES = [
    "Ingrid",
    "Tomas",
    "Priya",
    "Luca",
    "Marisol",
    "Hugo",
    "Anika",
    "Jonas",
    "Elena",
    "Maya",
    "Okafor",
    "Nala",
]
PLACES = [
    "Rotterdam",
    "Lisbon",
    "Porto",
    "Kyoto",
    "Valencia",
    "Dublin",
    "Prague",
    "Seoul",
    "Reykjavik",
    "Berlin",
]
FILES = 8
TAIL = 20  # messages per transcript left unconsolidated


def sentence(r: random.Random, words: int) -> str:
    out = [r.choice(WORDS) for _ in range(words)]
    for _ in range(r.randrange(0, 3)):
        out.insert(r.randrange(len(out)), r.choice(NAMES + PLACES))
    return " ".join(out).capitalize() + "."


def write_transcripts(sessions: Path, megabytes: float, r: random.Random) -> int:
    """Session files in the bot's layout; returns the number of messages written."""
    sessions.mkdir(parents=True)
    per_file = int(megabytes * 2**20 / FILES)
    total = 0
    for n in range(FILES):
        lines: list[str] = []
        size, count = 0, 0
        key = f"telegram:dm:{n}"
        lines.append(json.dumps({"_type": "metadata", "key": key, "last_consolidated": 0}))
        while size < per_file:
            role = "user" if count % 2 == 0 else "assistant"
            text = " ".join(sentence(r, r.randrange(8, 30)) for _ in range(r.randrange(1, 4)))
            stamp = f"2026-{1 + count % 11:02d}-{1 + count % 27:02d}T10:{count % 60:02d}:00+00:00"
            line = json.dumps({"role": role, "content": text, "timestamp": stamp})
            lines.append(line)
            size += len(line) + 1
            count += 1
        meta = {"_type": "metadata", "key": key, "last_consolidated": count - TAIL}
        lines.append(json.dumps(meta))
        (sessions / f"telegram_dm_{n}.jsonl").write_text("\n".join(lines) + "\n")
        total += count
    return total


def write_history(path: Path, r: random.Random) -> None:
    entries = []
    while sum(map(len, entries)) < 2**20:
        entries.append(f"[2026-03-{1 + len(entries) % 28:02d} 10:00] {sentence(r, 40)}")
    path.write_text("\n\n".join(entries) + "\n")


def consolidate_more(sessions: Path, r: random.Random, messages: int) -> None:
    """`messages` more messages said and consolidated in the first transcript."""
    path = sorted(sessions.iterdir())[0]
    lines = path.read_text().splitlines()
    meta = json.loads(lines[-1])
    count = meta["last_consolidated"] + TAIL
    added = []
    for i in range(messages):
        role = "user" if (count + i) % 2 == 0 else "assistant"
        added.append(
            json.dumps(
                {"role": role, "content": sentence(r, 20), "timestamp": "2026-12-01T10:00:00+00:00"}
            )
        )
    meta["last_consolidated"] = count + messages - TAIL
    with path.open("a") as f:
        f.write("\n".join([*added, json.dumps(meta)]) + "\n")


class Ticker:
    """The event loop's longest pause: a 5 ms sleep that wakes late by that much (overall, and
    in the phase since the last `phase()`)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.recent = 0.0
        self.running = True

    async def run(self) -> None:
        while self.running:
            started = time.perf_counter()
            await asyncio.sleep(0.005)
            late = time.perf_counter() - started - 0.005
            self.worst, self.recent = max(self.worst, late), max(self.recent, late)

    def phase(self) -> str:
        """The longest pause since the last call, as printed."""
        worst, self.recent = self.recent, 0.0
        return f"loop's longest pause {1000 * worst:.0f} ms"


def median_ms(calls: list[Callable[[], Any]]) -> float:
    times = []
    for call in calls:
        started = time.perf_counter()
        call()
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


async def run(args: argparse.Namespace) -> None:
    r = random.Random(33)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "telegram-42"
        sessions = root / "sessions"
        messages = write_transcripts(sessions, args.megabytes, r)
        history = root / "HISTORY.md"
        write_history(history, r)
        size = sum(p.stat().st_size for p in sessions.iterdir()) / 2**20
        print(
            f"{size:.1f} MiB of transcripts ({messages:,} messages, {FILES} files), "
            "1 MiB HISTORY.md"
        )
        ticker = Ticker()
        ticking = asyncio.create_task(ticker.run())

        def search(query: str) -> Any:
            return transcripts.search(history, sessions, query, limit=5)

        started = time.perf_counter()
        first = await asyncio.to_thread(search, "Rotterdam")
        built = time.perf_counter() - started
        derived = transcripts.derived_path(root)
        print(
            f"first search (derived text written, {derived.stat().st_size / 2**20:.1f} MiB): "
            f"{built:.2f} s, {first.total:,} hits; {ticker.phase()}"
        )
        started = time.perf_counter()
        while history_index.lookup(derived, CHUNK_BYTES) is None:
            await asyncio.sleep(0.05)
            if time.perf_counter() - started > 600:
                raise SystemExit("the index was not built in 10 minutes")
        print(
            f"its word index built in the background: {time.perf_counter() - started:.2f} s; "
            f"{ticker.phase()}"
        )
        queries = [r.choice(NAMES + PLACES) + " " + r.choice(WORDS) for _ in range(args.queries)]
        queries += [r.choice(PLACES) for _ in range(args.queries)]
        # In a thread, as /recall runs them: the ticker goes on measuring the loop.
        both = await asyncio.to_thread(median_ms, [lambda q=q: search(q) for q in queries])
        alone = await asyncio.to_thread(
            median_ms, [lambda q=q: search_history(history, q, limit=5) for q in queries]
        )
        nothing_new = await asyncio.to_thread(
            median_ms, [lambda: transcripts.refresh(root, sessions) for _ in range(20)]
        )
        # (each query asked once: a repeated one would come from the scan cache)
        print(
            f"query median, HISTORY.md and transcripts: {both:.1f} ms; HISTORY.md alone "
            f"(before): {alone:.1f} ms ({both / alone:.1f}x); of which bringing the derived "
            f"text up to date when nothing new was consolidated: {nothing_new:.1f} ms; "
            f"{ticker.phase()}"
        )
        consolidate_more(sessions, r, 200)
        started = time.perf_counter()
        await asyncio.to_thread(search, "Lisbon")
        took = 1000 * (time.perf_counter() - started)
        print(f"next search after 200 more messages consolidated: {took:.0f} ms; {ticker.phase()}")
        ticker.running = False
        await ticking
        print(f"event loop's longest pause overall: {1000 * ticker.worst:.0f} ms (goal < 500 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=50.0)
    parser.add_argument("--queries", type=int, default=40)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
