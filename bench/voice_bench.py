"""What a voice reply costs (issue 36, item 1).

1. The event loop: choosing what of an answer is read aloud (bot/media/voice.py: `speakable`,
   then `spoken_part`) runs on the loop, on the first [voice] max_chars × SCANNED characters of
   the answer. Timed on an ordinary Markdown answer of that size and on hostile ones of the same
   size (every line full of "__", "[", "**", "<", backticks: text a model can be led to write),
   beside one `str.split()` of the same text (the floor of looking at it at all). Goal: the
   slowest under 50 ms (a tenth of the 0.5 s a person may hold the loop).
2. The turn: an in-process Agent (the real openai client against the fake model, the real
   Speaker against the fake speech endpoint, both on 127.0.0.1) answering the same message with
   /voice off and /voice always; the difference is what the answer's last message waits for
   (the speech call, its bytes, the count in speech.jsonl), on a server that answers at once.

Figures are medians. Run: python bench/voice_bench.py [--turns 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.agent.agent import Agent  # noqa: E402
from bot.config import Config, LLMConfig, MemoryConfig, VoiceConfig  # noqa: E402
from bot.inbound import Inbound  # noqa: E402
from bot.media.voice import SCANNED, speakable, spoken_part  # noqa: E402
from bot.outbound import BufferedOutbound  # noqa: E402
from tests.rigs.fakes.openai_server import FakeOpenAI, completion  # noqa: E402
from tests.rigs.fakes.speech_server import FakeSpeech  # noqa: E402

GOAL_MS = 50.0
MAX_CHARS = 1500  # [voice] max_chars's default
ANSWER = (
    "## Lyon this week\n\n**Sunny** on Monday, see [the forecast](https://weather.example/lyon)."
    "\n- take a *hat*\n- `sunscreen`\n\n```python\nprint('hi')\n```\nEnjoy it! "
)
HOSTILE = {
    "dunders": "__x ",
    "brackets": "[a ",
    "stars": "**a ",
    "angles": "<a",
    "autolinks": "<http:",
    "backticks": "`a",
    "pictures": "![a",
}


def median_ms(fn: Callable[[], object], runs: int = 9) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def loop_figures() -> float:
    size = MAX_CHARS * SCANNED
    print(f"1. What is read aloud, on the loop: {size:,} characters looked at (median ms)")
    floor = median_ms(lambda: (ANSWER * (size // len(ANSWER) + 1))[:size].split())
    print(f"   floor, str.split() of them: {floor:.2f} ms")
    slowest = 0.0
    for name, piece in {"ordinary answer": ANSWER, **HOSTILE}.items():
        text = (piece * (size // len(piece) + 1))[:size]
        took = median_ms(lambda text=text: spoken_part(speakable(text), MAX_CHARS))
        slowest = max(slowest, took)
        print(f"   {name:16} {took:7.2f} ms  ({took / floor:5.1f}× the floor)")
    verdict = "met" if slowest < GOAL_MS else "NOT met"
    print(f"   slowest {slowest:.2f} ms; goal under {GOAL_MS:.0f} ms: {verdict}")
    return slowest


async def turn_figures(turns: int) -> None:
    llm, speech = await FakeOpenAI().start(), await FakeSpeech().start()
    llm.default = lambda request: completion(ANSWER * 3)
    try:
        with tempfile.TemporaryDirectory() as folder:
            config = Config(
                llm=LLMConfig(base_url=llm.base_url, api_key="sk-bench", model="fake-model"),
                memory=MemoryConfig(workspaces_dir=Path(folder)),
                voice=VoiceConfig(enabled=True, base_url=speech.base_url, chars_per_day=0),
            )
            agent = Agent(config)
            try:
                times = {}
                for mode, user in (("off", "bench-1"), ("always", "bench-2")):
                    await ask(agent, user, f"/voice {mode}")
                    await ask(agent, user, "warm up")
                    samples = [await ask(agent, user, f"weather {n}?") for n in range(turns)]
                    times[mode] = statistics.median(samples)
            finally:
                await agent.aclose()
        voiced = len(speech.requests)
    finally:
        await llm.stop()
        await speech.stop()
    spoken = len(spoken_part(speakable(ANSWER * 3), MAX_CHARS))
    print(f"2. A turn, {turns} each, the answer {len(ANSWER) * 3} characters ({spoken} read aloud)")
    print(f"   /voice off     {times['off']:7.1f} ms")
    print(f"   /voice always  {times['always']:7.1f} ms  ({voiced} voices asked for)")
    added = times["always"] - times["off"]
    print(f"   added by the voice {added:.1f} ms ({times['always'] / times['off']:.2f}×)")


async def ask(agent: Agent, user: str, text: str) -> float:
    out = BufferedOutbound()
    inbound = Inbound("telegram", f"telegram:dm:{user}", user, text)
    started = time.perf_counter()
    await agent.handle(inbound, out)
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    slowest = loop_figures()
    asyncio.run(turn_figures(args.turns))
    return 0 if slowest < GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())
