"""`lightgrep import chatgpt … --facts`: the estimate shown before any request, against what the
model then counted (issue 36, item 2's closing figure).

A ChatGPT export of --conversations conversations (--turns turns each, answers of ~90 words)
is generated and imported with `--facts --yes` by the real `lightgrep` in a child process,
against the fake OpenAI-compatible server of the tests on 127.0.0.1. The fake counts each
request's prompt with a tokenizer of its own (not ours: tests/rigs/fakes/openai_server.py,
ContextLimited, a window of --window tokens the bot is configured with too) and each answer's
tokens the same way; it answers save_memory with one new fact per conversation, so MEMORY.md
grows as on a real run. Reported: the requests, the prompt and answer tokens, and the cost at
example prices ($0.15 / $0.60 per million), estimated against counted, and their ratios.
One run: both sides are deterministic.

Run: python bench/facts_bench.py
     python bench/facts_bench.py --conversations 30 --turns 60 --window 4096
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.rigs.cli import write_config  # noqa: E402
from tests.rigs.exports import chatgpt_conversation, zipped  # noqa: E402
from tests.rigs.fakes.openai_server import (  # noqa: E402
    ContextLimited,
    FakeOpenAI,
    _server_tokens,
    save_memory_call,
)

PRICES = (0.15, 0.60)  # per million tokens read, written (example prices)
ANSWER = "Here is a longer answer about the garden, the bees, the weather and a recipe. " * 6


class Learner:
    """The fake model's side: a fact per conversation, its answer's tokens counted."""

    def __init__(self) -> None:
        self.completion_tokens = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        text = request["messages"][1]["content"]
        current = text.split("## Current MEMORY.md\n", 1)[1].split("\n\n## Conversation", 1)[0]
        numbers = sorted(set(re.findall(r"of conversation (\d+)", text)), key=int)
        facts = "".join(f"- The user visited town{n}x in spring\n" for n in numbers)
        said = ", ".join(sorted(set(re.findall(r"Question \d+ of conversation \d+", text))))
        answer = save_memory_call(
            f"[2023-04-01 10:00] The user asked {said}.", current.rstrip("\n") + "\n" + facts
        )
        arguments = answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        written = _server_tokens(arguments)
        self.completion_tokens += written
        answer["usage"]["completion_tokens"] = written
        return answer


def generate(path: Path, conversations: int, turns: int) -> Path:
    def items() -> Any:
        for number in range(conversations):
            item = chatgpt_conversation(number, turns, f"about topic {number}")
            for node in item["mapping"].values():
                message = node.get("message")
                if message and message["author"]["role"] == "assistant":
                    message["content"]["parts"] = [ANSWER]
            yield item

    return zipped(path, items())


async def measure(args: argparse.Namespace) -> dict[str, float]:
    fake = await FakeOpenAI().start()
    learner = Learner()
    limited = ContextLimited(args.window, learner)
    fake.default = limited
    try:
        with tempfile.TemporaryDirectory(prefix="facts-bench-") as name:
            folder = Path(name)
            prices = f'[prices]\n"fake-model" = {{ input = {PRICES[0]}, output = {PRICES[1]} }}\n'
            config = write_config(folder, fake, f"context_window_tokens = {args.window}\n{prices}")
            export = generate(folder / "export.zip", args.conversations, args.turns)
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot.cli", "import", "chatgpt", str(export),
                "--user", "telegram-42", "--config", str(config), "--facts", "--yes",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            )  # fmt: skip
            out, err = await proc.communicate()
            if proc.returncode != 0:  # stopped (MEMORY.md at its budget): its requests count
                print(err.decode().strip().splitlines()[-1])
            line = next(x for x in out.decode().splitlines() if "requests, about" in x)
    finally:
        await fake.stop()
    figures = re.search(r"in ([\d,]+) requests.*\(([\d,]+) read, ([\d,]+) written\)", line)
    assert figures is not None, line
    requests, prompt, written = (int(group.replace(",", "")) for group in figures.groups())
    asked = [r for r in fake.requests if r.get("tools")]
    counted_prompt = sum(limited.prompt_tokens(r) for r in asked)
    return {
        "requests": requests,
        "requests_counted": len(asked),
        "refused": len(limited.rejected),
        "prompt": prompt,
        "prompt_counted": counted_prompt,
        "written": written,
        "written_counted": learner.completion_tokens,
        "cost": (prompt * PRICES[0] + written * PRICES[1]) / 1e6,
        "cost_counted": (counted_prompt * PRICES[0] + learner.completion_tokens * PRICES[1]) / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--window", type=int, default=32768)
    args = parser.parse_args()
    got = asyncio.run(measure(args))
    print(
        f"{args.conversations} conversations of {args.turns} turns, window {args.window:,}: "
        f"{got['requests']:.0f} requests estimated, {got['requests_counted']:.0f} asked "
        f"({got['refused']:.0f} refused as too long)"
    )
    for what, unit in (("prompt", "tokens"), ("written", "tokens"), ("cost", "$")):
        estimated, counted = got[what], got[f"{what}_counted"]
        shown = (
            (f"{estimated:,.0f}", f"{counted:,.0f}")
            if unit == "tokens"
            else (f"${estimated:.4f}", f"${counted:.4f}")
        )
        ratio = estimated / counted if counted else float("nan")
        print(f"  {what:8} estimated {shown[0]:>10}  counted {shown[1]:>10}  ratio {ratio:.2f}")
    print(json.dumps(got))


if __name__ == "__main__":
    main()
