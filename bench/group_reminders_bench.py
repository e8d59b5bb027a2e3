"""What counting a group's reminders costs (issue 32, finding 5: [limits] reminders_per_group).

    python bench/group_reminders_bench.py [--members 50] [--pending 100] [--history 2000]

Every /remind in a group counts the reminders waiting there, whoever set them: the files of
the people the group index names are read (bot.reminders.desk.ReminderBook.in_group), in a
thread. A generated workspaces folder: `--members` people in one group, each with `--pending`
reminders waiting and `--history` lines of sent ones. Printed: the first count (every file read)
and the count after one member's file changed (a flood of /remind in the group: only the
setter's file changed), medians of `--samples`, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bot.config import Config, MemoryConfig  # noqa: E402
from bot.reminders.desk import ReminderBook  # noqa: E402
from memory import clock  # noqa: E402
from memory.workspace import Workspaces  # noqa: E402

CHAT = "telegram:group:-100"


def folder(base: Path, members: int, pending: int, history: int) -> Workspaces:
    workspaces = Workspaces(base)
    due = clock.iso(clock.now() + timedelta(hours=1))
    place = {"chat": "-100"}
    for member in range(members):
        root = workspaces.root_of(f"telegram-{member}")
        root.mkdir(parents=True, exist_ok=True)
        lines = []
        for n in range(history // 2):  # sent one-shots: a set and a delivered each
            lines.append({"type": "set", "id": f"old{n}", "due": due, "what": "done", "chat": CHAT})
            lines.append({"type": "delivered", "id": f"old{n}", "due": due})
        for n in range(pending):
            lines.append(
                {"type": "set", "id": f"r{n}", "due": due, "what": "x" * 100, "chat": CHAT,
                 "private": False, "platform": "telegram", "place": place}
            )  # fmt: skip
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (root / "reminders.jsonl").write_text(text)
    book = ReminderBook(Config(memory=MemoryConfig(workspaces_dir=base)), workspaces, bool)
    for member in range(members):
        book.groups.add(CHAT, f"telegram-{member}")
    return workspaces


async def measure(workspaces: Workspaces, samples: int) -> tuple[float, float, int]:
    firsts, agains, found = [], [], 0
    config = Config(memory=MemoryConfig(workspaces_dir=workspaces.base_dir))
    for sample in range(samples):
        book = ReminderBook(config, workspaces, bool)  # as after a start: nothing read yet
        started = time.perf_counter()
        found = len(await book.in_group(CHAT))
        firsts.append(time.perf_counter() - started)
        change = {"type": "cancelled", "id": f"none{sample}", "at": clock.iso()}
        book.file_of("telegram-0").append(change)  # one member's /remind or cancel
        started = time.perf_counter()
        await book.in_group(CHAT)
        agains.append(time.perf_counter() - started)
    return statistics.median(firsts), statistics.median(agains), found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--pending", type=int, default=100)
    parser.add_argument("--history", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        workspaces = folder(Path(base), args.members, args.pending, args.history)
        first, again, found = asyncio.run(measure(workspaces, args.samples))
    print(
        f"{args.members} members, {args.pending} waiting and {args.history} lines sent each "
        f"({found:,} in the group)"
    )
    print(f"count, every file read:          median {first * 1000:8.1f} ms")
    print(f"count, after one member changed: median {again * 1000:8.1f} ms")
    print(f"ratio: {first / again:.1f}x")


if __name__ == "__main__":
    main()
