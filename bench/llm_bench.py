"""CPU of one chat completion in the bot's own process: LLMClient.chat and .stream alone, and
through the fallback chain (bot/llm/chain.py) with one healthy endpoint and a fallback never
asked: what a chain adds per call.

The fake OpenAI server runs in a child process (tests/rigs/fakes, instant answers of --reply-words
words, streamed in one write as a fast server sends them), so the CPU measured here is the
client's only: the openai SDK's request path, our aiohttp transport, the event-stream reader and
the answer's assembly. The floor is a bare aiohttp POST of the same body, its JSON read, in
the same run (the least an HTTP chat call can cost).

Prints, per mode: CPU µs per call (median of --runs runs of --calls calls each) and the ratio
to the floor; then the chain's against the single client's, chat and stream.

Run: python bench/llm_bench.py [--calls 2000] [--runs 5] [--profile /tmp/llm.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import multiprocessing
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import filler
from bot.llm.chain import ChainLLM, Link
from bot.llm.client import LLMClient
from memory.llm import ChatResult

SYSTEM = "You are a helpful assistant. Answer briefly.\n" * 20


def _serve(reply_words: int, ports: Any) -> None:
    """The child: a FakeOpenAI answering every request with the same completion."""
    from tests.rigs.fakes.openai_server import FakeOpenAI, completion

    async def main() -> None:
        fake = FakeOpenAI()
        reply = f"ack {filler(random.Random(7), reply_words)}"
        answer = completion(reply, prompt_tokens=300, completion_tokens=60)
        fake.default = lambda body: answer
        await fake.start()
        fake.requests = _Forgetful()
        ports.put(fake.port)
        await asyncio.Event().wait()

    asyncio.run(main())


class _Forgetful(list[Any]):
    """The fake's request log, kept empty: thousands of calls would only grow it."""

    def append(self, item: Any) -> None:
        pass


def _messages() -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    rng = random.Random(3)
    for _ in range(5):
        history.append({"role": "user", "content": filler(rng, 15)})
        history.append({"role": "assistant", "content": filler(rng, 40)})
    history.append({"role": "user", "content": "and now?"})
    return history


async def _floor(base_url: str, calls: int) -> float:
    import aiohttp

    messages = _messages()
    async with aiohttp.ClientSession() as http:
        started = time.process_time()
        for _ in range(calls):
            body = {"model": "fake-model", "messages": messages}
            async with http.post(f"{base_url}/chat/completions", json=body) as response:
                json.loads(await response.read())
        return (time.process_time() - started) / calls


async def _client(base_url: str, calls: int, stream: bool, chain: bool = False) -> float:
    client = LLMClient(model="fake-model", base_url=base_url, api_key="sk-bench")
    llm: LLMClient | ChainLLM = client
    if chain:  # [llm] and one [[llm.fallback]] (never asked: the first is healthy)
        spare = LLMClient(model="spare", base_url="http://127.0.0.1:9/v1", api_key="sk-bench")
        links = [Link(client, "fake-model@bench", None, False), Link(spare, "spare", 2048, False)]
        llm = ChainLLM(links, on_call=lambda endpoint, outcome, seconds: None)
    messages = _messages()

    async def on_text(text: str) -> None:
        pass

    try:
        await llm.chat(messages)  # the connection and the SDK's first-use work
        started = time.process_time()
        for _ in range(calls):
            if stream:
                await llm.stream(messages, on_text=on_text)
            else:
                await llm.chat(messages)
        return (time.process_time() - started) / calls
    finally:
        await llm.aclose()


class _Instant:
    """A client whose answer is ready at once: what the chain itself costs, without HTTP."""

    model = "instant"
    max_output_tokens = None
    answer = ChatResult("ack")

    async def chat(self, messages: Any, **options: Any) -> ChatResult:
        return self.answer

    async def stream(self, messages: Any, *, on_text: Any, **options: Any) -> ChatResult:
        await on_text("ack")
        return self.answer


async def _overhead(calls: int, stream: bool, chain: bool) -> float:
    """CPU per call of `_Instant` alone or as the first of a two-endpoint chain."""
    instant: Any = _Instant()
    llm: Any = instant
    if chain:
        links = [Link(instant, "instant", None, False), Link(instant, "spare", 2048, False)]
        llm = ChainLLM(links, on_call=lambda endpoint, outcome, seconds: None)
    messages = _messages()

    async def on_text(text: str) -> None:
        pass

    started = time.process_time()
    for _ in range(calls):
        if stream:
            await llm.stream(messages, on_text=on_text)
        else:
            await llm.chat(messages)
    return (time.process_time() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per run and mode")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reply-words", type=int, default=40)
    parser.add_argument("--profile", help="cProfile the streamed calls into this file")
    args = parser.parse_args()

    ports: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(args.reply_words, ports), daemon=True)
    server.start()
    try:
        base_url = f"http://127.0.0.1:{ports.get(timeout=30)}/v1"
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(asyncio.run, _client(base_url, args.calls, True))
            profiler.dump_stats(args.profile)
            print(f"profile of {args.calls} streamed calls in {args.profile}")
            return
        figures: dict[str, list[float]] = {
            "floor": [], "chat": [], "stream": [], "chain-chat": [], "chain-stream": []
        }  # fmt: skip
        modes = [("chat", False, False), ("stream", True, False)]
        modes += [("chain-chat", False, True), ("chain-stream", True, True)]
        for run in range(args.runs):  # interleaved: a machine shared with other work slows all
            figures["floor"].append(asyncio.run(_floor(base_url, args.calls)))
            for mode, stream, chain in modes if run % 2 else modes[::-1]:  # neither always first
                figures[mode].append(asyncio.run(_client(base_url, args.calls, stream, chain)))
        floor = statistics.median(figures["floor"])
        print(f"== CPU per chat call, {args.reply_words}-word answers, median of {args.runs} runs")
        for mode, values in figures.items():
            cpu = statistics.median(values)
            spread = f"{min(values) * 1e6:.0f}–{max(values) * 1e6:.0f}"
            ratio = cpu / floor
            print(f"  {mode:12}  {cpu * 1e6:6.0f} µs/call  (runs {spread})  {ratio:.2f}x floor")
        for mode in ("chat", "stream"):
            single = statistics.median(figures[mode])
            chained = statistics.median(figures[f"chain-{mode}"])
            print(
                f"  chain beside the single client, {mode}: {(chained - single) * 1e6:+.0f} "
                f"µs/call, {chained / single:.3f}x"
            )
        print("== the chain alone, before an instant client (no HTTP), 100,000 calls a run")
        for stream in (False, True):
            bare = [asyncio.run(_overhead(100_000, stream, False)) for _ in range(args.runs)]
            chained_ = [asyncio.run(_overhead(100_000, stream, True)) for _ in range(args.runs)]
            added = statistics.median(chained_) - statistics.median(bare)
            mode = "stream" if stream else "chat"
            print(f"  {mode:6}  +{added * 1e6:.1f} µs/call added by the chain")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
