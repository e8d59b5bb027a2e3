"""CPU of reading one streamed answer: bot/llm/sse.py's events and bot/llm/stream.py's assembly.

No sockets: the event stream a chat completion of --words words arrives as (one chunk per word,
the usage last, then [DONE], as OpenAI writes it) is handed to the reader whole (a fast server:
one read) and in pieces of --piece bytes (a body that arrives as the model writes it).

Prints µs per answer for each (median of --runs runs).

Run: python bench/sse_bench.py [--words 40] [--runs 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.llm.sse import events
from bot.llm.stream import Assembled


def body_of(words: int) -> bytes:
    """An answer's event stream as OpenAI sends it."""

    def event(delta: dict[str, object] | None, **extra: object) -> bytes:
        chunk: dict[str, object] = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1764547200,
            "model": "bench-model",
            "choices": [] if delta is None else [{"index": 0, "delta": delta, **extra}],
        }
        if delta is None:
            chunk["usage"] = extra
        return f"data: {json.dumps(chunk)}\n\n".encode()

    parts = [event({"role": "assistant", "content": ""}, finish_reason=None)]
    parts += [event({"content": f" word{i}"}, finish_reason=None) for i in range(words)]
    parts.append(event({}, finish_reason="stop"))
    parts.append(event(None, prompt_tokens=300, completion_tokens=words, total_tokens=300 + words))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


async def _pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def read(body: bytes, size: int) -> str:
    answer = Assembled()
    texts = []
    async for batch in events(_pieces(body, size)):
        texts.append("".join([answer.add(chunk) for chunk in batch]))
    return "".join(texts)


async def _run(body: bytes, size: int, answers: int) -> float:
    started = time.process_time()
    for _ in range(answers):
        await read(body, size)
    return (time.process_time() - started) / answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--piece", type=int, default=200, help="bytes per read when in pieces")
    parser.add_argument("--answers", type=int, default=2000, help="answers per run")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    body = body_of(args.words)
    expected = "".join(f" word{i}" for i in range(args.words))
    for size in (len(body), args.piece, 7):
        assert asyncio.run(read(body, size)) == expected, "the reader lost part of the answer"
    print(f"== reading a {args.words}-word streamed answer ({len(body)} bytes), median of runs")
    for name, size in (("whole", len(body)), (f"{args.piece} B pieces", args.piece)):
        figures = [asyncio.run(_run(body, size, args.answers)) for _ in range(args.runs)]
        print(f"  {name:14} {statistics.median(figures) * 1e6:7.1f} µs/answer")


if __name__ == "__main__":
    main()
