"""What a reply costs the turn that carries it, on the event loop (issue 26).

1. The bot's answer found by the platform id it was sent as, in a session of 1,000 / 10,000 /
   100,000 messages whose answer was consolidated (read from the disk: the `sent` record is
   found by its bytes), beside reading the file once (`read_bytes`, the floor of any lookup).
   This one runs in a thread (bot/agent/replies.py): it is no pause of the loop.
2. "Already in the conversation?" for a reply whose text no message holds, with 20,000 /
   130,000 tokens unconsolidated (a 32k and a 128k window): once with a rare word (the usual
   case) and once with words every message holds but in another order (the worst case: each
   message compared is split into words, the newest 64 KB of them), beside one lowercase copy
   of the whole conversation.

Each figure is a median; the second is the pause a turn with a reply adds to the loop. Run:
python bench/reply_bench.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncio  # noqa: E402

from bot.agent.replies import reply_record  # noqa: E402
from bot.inbound import Quoted  # noqa: E402
from memory.session import SessionStore, sent_on_disk  # noqa: E402

RUNS = 7


def median_ms(fn: Callable[[], object], runs: int = RUNS) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def filled(folder: Path, messages: int) -> tuple[SessionStore, str]:
    """A session of `messages` messages (each answer sent under an id), all but the last
    exchange consolidated; the platform id of the first answer."""
    store = SessionStore(folder)
    session = store.get("telegram:dm:1")
    text = "lorem ipsum dolor sit amet " * 8
    for i in range(0, messages, 2):
        store.append(session, {"role": "user", "content": f"q{i} {text}", "message_id": f"1:{i}"})
        store.append(session, {"role": "assistant", "content": f"a{i} {text}"})
        store.record_sent(session, f"1:{i}", [f"1:{i + 1}"])
    store.set_last_consolidated(session, messages - 2)
    store.evict(session.key)
    return store, "1:1"


def lookup_case(messages: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store, first = filled(Path(tmp), messages)
        path = store.get("telegram:dm:1").path
        found = sent_on_disk(path, first)
        assert found is not None and found.startswith("a0 "), found
        lookup = median_ms(lambda: sent_on_disk(path, first))
        floor = median_ms(path.read_bytes)
        size = path.stat().st_size / 1e6
        print(
            f"   {messages:>7,} messages ({size:5.1f} MB): {lookup:7.2f} ms; "
            f"reading the file once {floor:7.2f} ms ({lookup / floor:4.2f}x)"
        )


async def in_conversation_case(tokens: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(Path(tmp))
        session = store.get("telegram:dm:1")
        text = "the quick brown fox jumps over the lazy dog " * 5  # ~50 tokens
        for i in range(tokens // 50):
            role = "user" if i % 2 == 0 else "assistant"
            store.append(session, {"role": role, "content": f"{i} {text}"})
        whole = " ".join(str(m["content"]) for m in session.messages)
        floor = median_ms(whole.lower)
        for case, said in (
            ("rare word", "a sentence nobody in this conversation ever wrote"),
            ("worst case", "the lazy dog jumps over the quick brown fox"),
        ):
            quoted = Quoted(None, said)
            samples = []
            for _ in range(RUNS):
                started = time.perf_counter()
                await reply_record(quoted, store, session, 1500)  # no id: all on the loop
                samples.append(time.perf_counter() - started)
            check = statistics.median(samples) * 1000
            print(
                f"   {tokens:>7,} tokens unconsolidated, {case}: {check:7.2f} ms; "
                f"one lowercase copy {floor:6.2f} ms ({check / floor:5.1f}x)"
            )


async def main() -> None:
    print("1. An answer found by its platform id after consolidation (ms, median)")
    for messages in (1_000, 10_000, 100_000):
        lookup_case(messages)
    print("2. Whether a reply's text is already in the conversation, on the loop (ms, median)")
    for tokens in (20_000, 130_000):
        await in_conversation_case(tokens)


if __name__ == "__main__":
    asyncio.run(main())
