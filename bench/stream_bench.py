"""Time to the first visible text of an answer, before streaming and with it.

A fake model writes its answer at 20 tokens/s (one SSE chunk per token, over a real socket);
the real Telegram adapter and Agent run against the fake Bot API, once with `[agent] stream =
false` (the whole answer sent when it is done: what the bot did before) and once with streaming
(a draft in a private chat, a message then edits in a group). For each, from the moment the
person's message is handed to the bot (getUpdates), it measures when the chat first shows any of
the answer (a draft with text, or a message) and when it shows the whole answer.

    .venv/bin/python bench/stream_bench.py [--tokens 80] [--runs 3] [--rate 20]

Prints the medians per mode and chat, and the ratio of time to first text (before / after).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.telegram import TelegramConfig, create  # noqa: E402
from adapters.telegram.markup import markdown_to_html  # noqa: E402
from bot.agent.agent import Agent  # noqa: E402
from bot.config import AgentConfig, Config, LLMConfig, MemoryConfig  # noqa: E402
from tests.rigs.fakes.openai_server import FakeOpenAI, Streamed  # noqa: E402
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram, visible_text  # noqa: E402

GROUP = -100777


def answer_of(tokens: int) -> list[str]:
    """An answer of `tokens` pieces, each a word and its space, in short paragraphs."""
    return [f"word{n}" + ("\n\n" if n % 20 == 19 else " ") for n in range(tokens)]


async def one_run(stream: bool, chat: str, tokens: int, rate: float) -> tuple[float, float]:
    """(seconds to the first visible text, seconds to the whole answer) of one answer."""
    tg, llm = await FakeTelegram().start(), await FakeOpenAI().start()
    pieces = answer_of(tokens)
    llm.default = lambda request: Streamed(pieces, every_s=1 / rate)
    whole = visible_text(markdown_to_html("".join(pieces).strip()))
    with tempfile.TemporaryDirectory() as folder:
        config = Config(
            llm=LLMConfig(base_url=llm.base_url, api_key="sk-bench", model="m", max_retries=0),
            memory=MemoryConfig(workspaces_dir=Path(folder)),
            agent=AgentConfig(stream=stream),
            platforms={
                "telegram": TelegramConfig(
                    enabled=True, token=TOKEN, allow_from=["*"], api_base=tg.api_base,
                    poll_timeout_s=1,
                )
            },
        )  # fmt: skip
        agent = Agent(config)
        adapter = create(config, agent)
        stop = asyncio.Event()
        task = asyncio.create_task(adapter.run(stop))
        try:
            await asyncio.wait_for(adapter.ready.wait(), 10)
            chat_id = 42 if chat == "private" else GROUP
            start = time.monotonic()
            if chat == "private":
                tg.dm(42, "write something")
            else:
                tg.group(GROUP, 42, "@lightgrep_bot write something")

            def first_text() -> float | None:
                drafts = [d.at for d in tg.drafts if d.chat_id == chat_id and d.text.strip()]
                sent = [s.at for s in tg.sent_to(chat_id)]
                times = drafts + sent
                return min(times) if times else None

            await tg.wait_until(lambda: first_text() is not None, 60)
            first = (first_text() or start) - start
            await tg.wait_until(lambda: tg.seen_in(chat_id) == whole, 120)
            done = time.monotonic() - start
            assert not tg.too_fast and not tg.refused, (tg.too_fast, tg.refused)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await agent.aclose()
            await tg.stop()
            await llm.stop()
    return first, done


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=80, help="tokens per answer")
    parser.add_argument("--runs", type=int, default=3, help="answers per mode and chat")
    parser.add_argument("--rate", type=float, default=20.0, help="tokens per second")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    print(
        f"model: {args.tokens} tokens at {args.rate:g} tokens/s "
        f"({args.tokens / args.rate:.1f} s to write); {args.runs} runs each; medians\n"
    )
    print(f"{'chat':8} {'mode':22} {'first text':>11} {'whole answer':>13}")
    for chat in ("private", "group"):
        firsts: dict[bool, float] = {}
        for stream in (False, True):
            runs = [await one_run(stream, chat, args.tokens, args.rate) for _ in range(args.runs)]
            first = statistics.median(r[0] for r in runs)
            done = statistics.median(r[1] for r in runs)
            firsts[stream] = first
            mode = "streamed" if stream else "whole (stream = false)"
            if stream:
                mode += " draft" if chat == "private" else " edits"
            print(f"{chat:8} {mode:22} {first:10.2f}s {done:12.2f}s")
        print(f"{chat:8} {'first text, before/after':22} {firsts[False] / firsts[True]:10.1f}x\n")


if __name__ == "__main__":
    asyncio.run(main())
