"""A flood with [limits] on: what one person's 300 messages cost, and what another person waits.

Through the real Agent and openai client against the fake provider (0.2 s a call, 1,000 tokens
reported). The flooder sends 300 messages at once with messages_per_minute = 10 and
tokens_per_day = 5,000; meanwhile another person asks one question. Printed: model calls spent,
messages saved, refusals, the median cost of a refusal, and the other person's answer time
against the same question asked with nobody flooding (the baseline, same run).

Run: python bench/limits_flood.py   (a few seconds; everything lives in a temp dir)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.config import LimitsConfig  # noqa: E402
from tests.rigs.agent import ask, dm, make_agent  # noqa: E402
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, completion  # noqa: E402

FLOOD = 300
LATENCY_S = 0.2


async def timed(coro: object) -> tuple[float, str]:
    started = time.perf_counter()
    reply = await coro  # type: ignore[misc]
    return time.perf_counter() - started, reply.text


async def main() -> None:
    fake = await FakeOpenAI().start()
    fake.default = lambda r: Delay(LATENCY_S, completion("ok", prompt_tokens=800,
                                                         completion_tokens=200))
    limits = LimitsConfig(messages_per_minute=10, tokens_per_day=5_000)
    with tempfile.TemporaryDirectory() as folder:
        agent = make_agent(fake, Path(folder), limits=limits)
        await ask(agent, dm("8", "warm up"))  # the client's first connection is not the baseline
        baseline, _ = await timed(ask(agent, dm("7", "unloaded question")))
        calls_before = len(fake.requests)
        flood = [asyncio.create_task(timed(ask(agent, dm("42", f"flood {i}"))))
                 for i in range(FLOOD)]
        await asyncio.sleep(0)
        other, _ = await timed(ask(agent, dm("7", "question during the flood")))
        results = await asyncio.gather(*flood)
        await agent.aclose()
    await fake.stop()
    refusals = [t for t, text in results if "didn't save" in text]
    answered = [t for t, text in results if text == "ok"]
    print(f"flood: {FLOOD} messages from one person, limits 10/minute and 5,000 tokens/day")
    print(f"  answered {len(answered)}, refused {len(refusals)}; model calls spent by the flood: "
          f"{len(fake.requests) - calls_before - 1}")
    print(f"  median refusal {statistics.median(refusals) * 1000:.2f} ms (no model call, "
          "nothing saved)")
    print(f"other person: {other:.3f} s during the flood vs {baseline:.3f} s unloaded "
          f"({other / baseline:.2f}x)")


if __name__ == "__main__":
    asyncio.run(main())
