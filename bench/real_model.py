"""Consolidation against a real model: a scripted conversation with planted facts.

    python bench/real_model.py --base-url http://127.0.0.1:8777/v1 [--model M] [--window N]
        [--max-output N] [--no-stream] [--dump requests.jsonl]

Any OpenAI-compatible endpoint. The real Agent (real openai client) talks to it through a small
recording proxy on 127.0.0.1, so every request and the server's answer are counted as the
server saw them. Without --window and --max-output the bot sizes itself as `lightgrep run`
does (bot/agent/sizing.py: the window the server tells, else learnt from its first refusal).
It ends with /new (--no-file: not), so what was not consolidated is filed as a person's
conversation is in the end, and the memory formed is measured at every window size. Printed:
turns answered / failed / refused as too long, requests rejected for length, consolidation
requests (forced, auto, plain text) and outcomes by kind (save_memory, plain text, raw archive,
failed attempts, answers refused by the checks), MEMORY.md sections intact after each write,
planted facts in MEMORY.md and in the history entries that are not raw archives, the answers to
the questions, and time per turn. Streaming follows LIGHTGREP_AGENT_STREAM (default on) unless
--stream / --no-stream says otherwise; --dump writes every request and the server's raw answer,
one JSON line each (to see what a failing answer looked like).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from bot.agent.agent import Agent  # noqa: E402
from bot.agent.sizing import describe, size  # noqa: E402
from bot.agent.turn import TOO_LONG_REPLY  # noqa: E402
from bot.config import AgentConfig, Config, LLMConfig, MemoryConfig  # noqa: E402
from bot.inbound import Inbound  # noqa: E402
from bot.llm.overflow import context_overflow  # noqa: E402
from bot.outbound import BufferedOutbound  # noqa: E402
from memory.store import SECTIONS  # noqa: E402

# (text, facts it plants: lower-case words to find in the files later)
SCRIPT: list[tuple[str, list[str]]] = [
    ("Hi! My name is Marisol.", ["marisol"]),
    ("I live in Porto, in Portugal.", []),
    ("I work as a marine biologist at the aquarium.", ["biologist"]),
    ("What do you think about the ocean?", []),
    ("I have a tortoise called Pebble.", ["pebble"]),
    ("Pebble is 12 years old and loves strawberries.", []),
    ("Can you suggest a weekend activity?", []),
    ("I prefer green tea to coffee, always.", ["green tea"]),
    ("Tell me a short fact about octopuses.", []),
    ("I study coral reefs most days.", []),
    ("What should I cook tonight?", []),
    ("My favourite book is about whales.", []),
    ("Actually, I moved from Porto to Lisbon last month.", ["lisbon"]),
    ("Lisbon is sunny, I like it here.", []),
    ("Give me a tip for sleeping better.", []),
    ("I go diving on Sundays.", []),
    ("How do tides work, briefly?", []),
    ("I am learning to play the ukulele.", []),
    ("Recommend a film for tonight.", []),
]
QUESTIONS: list[tuple[str, str]] = [
    ("What is my name?", "marisol"),
    ("Which city do I live in now?", "lisbon"),
    ("What is my job?", "biolog"),
    ("What is my pet called?", "pebble"),
    ("What do I like to drink?", "tea"),
    ("How old is my tortoise?", "12"),
]
FACTS = ["marisol", "biologist", "pebble", "green tea", "lisbon"]


@dataclass
class Recorder:
    """What went over the wire: one row per chat request."""

    upstream: str
    dump: Path | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        root = re.sub(r"/v1/?$", "", self.upstream.rstrip("/"))
        url = root + request.path_qs
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        started = time.monotonic()
        async with aiohttp.ClientSession() as session, session.request(
            request.method, url, data=body, headers=headers
        ) as answer:
            data = b""
            try:  # (what the server sent, even a stream it broke off: the bot sees the same)
                async for piece in answer.content.iter_any():
                    data += piece
            except aiohttp.ClientPayloadError:
                pass
            status = answer.status
            kind = answer.content_type  # an event stream stays one, even an empty one
        if self.dump is not None:
            with self.dump.open("a") as dump:
                row = {"path": request.path, "sent": body.decode(errors="replace")}
                row.update(status=status, answer=data.decode(errors="replace"))
                dump.write(json.dumps(row) + "\n")
        if request.path.endswith("/chat/completions"):
            self._record(json.loads(body or b"{}"), status, data, time.monotonic() - started)
        return web.Response(status=status, body=data, content_type=kind)

    def _record(self, sent: dict[str, Any], status: int, data: bytes, took: float) -> None:
        try:
            answer = json.loads(data)
        except ValueError:
            answer = _streamed_usage(data) or data.decode(errors="replace")
        tools = [t.get("function", {}).get("name") for t in sent.get("tools") or []]
        overflow = status != 200 and context_overflow(answer)[0]
        usage = answer.get("usage") if isinstance(answer, dict) else None
        messages = sent.get("messages") or [{}]
        plain = str(messages[0].get("content") or "").startswith("You summarise conversations")
        self.rows.append(
            {
                "consolidation": "save_memory" in tools or plain,
                "plain": plain,
                "forced": isinstance(sent.get("tool_choice"), dict),
                "status": status,
                "overflow": overflow,
                "prompt_tokens": (usage or {}).get("prompt_tokens"),
                "seconds": took,
            }
        )


class LogCount(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def count(self, text: str) -> int:
        return sum(text in m for m in self.messages)


def _streamed_usage(data: bytes) -> dict[str, Any] | None:
    """{"usage": …} of a streamed answer's last chunk that has one; None if none does."""
    found = None
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                chunk = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(chunk, dict) and chunk.get("usage"):
                found = {"usage": chunk["usage"]}
    return found


def sections_intact(text: str) -> bool:
    return all(f"## {name}" in text for name in SECTIONS)


async def first_model(base_url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{base_url}/models") as answer:
        return (await answer.json())["data"][0]["id"]


async def run(args: argparse.Namespace) -> None:
    recorder = Recorder(args.base_url, args.dump)
    app = web.Application(client_max_size=64 * 1024**2)
    app.router.add_route("*", "/{tail:.*}", recorder.handle)  # /v1/… and /props, /api/show
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    model = args.model or await first_model(args.base_url)
    logs = LogCount()
    logging.getLogger().addHandler(logs)
    logging.getLogger().setLevel(logging.INFO)
    folder = Path(tempfile.mkdtemp(prefix="lightgrep-real-"))
    config = Config(
        llm=LLMConfig(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="bench",
            model=model,
            context_window_tokens=args.window,  # None: automatic
            max_output_tokens=args.max_output,
            temperature=0.2,
            timeout_s=args.timeout,
            max_retries=0,
        ),
        memory=MemoryConfig(workspaces_dir=folder, keep_memory_versions=1000),
        agent=AgentConfig(stream=args.stream),
    )
    sizing = await size(config)
    agent = Agent(config, sizing=sizing)
    ways: list[str] = []
    agent.consolidator.writer.on_way = ways.append
    print(f"sized at start: {describe(sizing)}")
    workspace = agent.workspaces.get("bench-user")
    inbound = Inbound(
        platform="terminal", session_key="terminal:bench", user_key="bench-user", text=""
    )
    times: list[float] = []
    answered = failed = too_long = 0
    answers: list[tuple[str, str, bool]] = []
    turns = ([(t, "") for t, _ in SCRIPT] + list(QUESTIONS))[: args.turns]
    for i, (text, expected) in enumerate(turns):
        started = time.monotonic()
        out = BufferedOutbound()
        await agent.handle(replace(inbound, text=text), out)
        reply = out.reply
        times.append(time.monotonic() - started)
        if "couldn't reach" in reply.text or "refused that request" in reply.text:
            failed += 1
        elif reply.text == TOO_LONG_REPLY:
            too_long += 1
        else:
            answered += 1
        if expected:
            answers.append((text, reply.text, expected in reply.text.lower()))
        if args.verbose:
            print(f"[{i + 1:2}] {text}\n     → {reply.text[:160]!r} ({times[-1]:.1f} s)")
        await agent.background.wait_all()
    if args.file:  # /new: the rest of the conversation filed, as a person's is in the end
        await agent.handle(replace(inbound, text="/new"), BufferedOutbound())
        await agent.background.wait_all()
    await agent.aclose()
    await runner.cleanup()

    memory = workspace.memory.read()
    history = workspace.history_path.read_text() if workspace.history_path.exists() else ""
    entries = [e for e in re.split(r"\n\s*\n(?=\[\d{4}-)", history) if e.strip()]
    summaries = "\n".join(e for e in entries if "[RAW]" not in e.splitlines()[0]).lower()
    versions = [p.read_text() for p in workspace.memory.versions()]
    writes = [*versions[1:], memory] if versions else ([memory] if memory else [])
    rows = recorder.rows
    turn_rows = [r for r in rows if not r["consolidation"]]
    cons = [r for r in rows if r["consolidation"]]
    mode = "streamed" if args.stream else "not streamed"
    print(
        f"model {model} at {args.base_url}; turns {mode}; window at the end: "
        f"{describe(agent.window.sizing)}"
    )
    print(f"turns: {len(turns)}  answered {answered}  failed {failed}  too long {too_long}")
    print(
        f"requests: {len(turn_rows)} turn, {len(cons)} consolidation; rejected for length: "
        f"{sum(r['overflow'] for r in rows)} (turn {sum(r['overflow'] for r in turn_rows)}, "
        f"consolidation {sum(r['overflow'] for r in cons)}); other errors "
        f"{sum(r['status'] != 200 and not r['overflow'] for r in rows)}"
    )
    tool_requests = [r for r in cons if not r["plain"]]
    print(
        f"consolidation requests: forced {sum(r['forced'] for r in tool_requests)}, auto "
        f"{sum(not r['forced'] for r in tool_requests)}, plain text "
        f"{sum(r['plain'] for r in cons)}"
    )
    print(
        f"consolidations: by save_memory {ways.count('save_memory')}, in plain text "
        f"{ways.count('plain text')}, raw archives {history.count('[RAW]')}; failed attempts "
        f"{logs.count('consolidation failed')}, answers refused by the checks "
        f"{logs.count('answer not written')}; asked first at the end: "
        f"{agent.consolidator.writer.ways[0]}; history entries {len(entries)}"
    )
    intact = sum(sections_intact(w) for w in writes)
    print(f"MEMORY.md writes: {len(writes)}, sections intact in {intact}")
    in_memory = [f for f in FACTS if f in memory.lower()]
    in_summaries = [f for f in FACTS if f in summaries]
    print(f"facts in MEMORY.md: {len(in_memory)} of {len(FACTS)} ({', '.join(in_memory)})")
    print(
        f"facts in history entries that are not raw archives: {len(in_summaries)} of "
        f"{len(FACTS)} ({', '.join(in_summaries)})"
    )
    print(f"questions answered right: {sum(ok for *_, ok in answers)} of {len(answers)}")
    peak = max((r["prompt_tokens"] or 0) for r in rows) if rows else 0
    unknown = sum(r["prompt_tokens"] is None and r["status"] == 200 for r in rows)
    print(f"largest prompt the server counted: {peak} ({unknown} answers reported no usage)")
    print(
        f"time per turn: median {statistics.median(times):.2f} s, max {max(times):.2f} s, "
        f"total {sum(times):.0f} s"
    )
    print(f"memory:\n{memory}")
    print(f"workspace kept in {folder}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8777/v1")
    parser.add_argument("--model", help="default: the first model the server lists")
    parser.add_argument("--window", type=int, help="context_window_tokens (default: automatic)")
    parser.add_argument("--max-output", type=int, help="max_output_tokens (default: automatic)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("-v", "--verbose", action="store_true")
    stream = os.environ.get("LIGHTGREP_AGENT_STREAM", "true").strip().lower() != "false"
    parser.add_argument(
        "--stream", action=argparse.BooleanOptionalAction, default=stream, help="[agent] stream"
    )
    parser.add_argument("--dump", type=Path, help="write every request and raw answer here")
    parser.add_argument("--turns", type=int, help="only the first N turns (a slow machine)")
    parser.add_argument(
        "--file",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="end with /new: what was not consolidated is filed (default: on)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
