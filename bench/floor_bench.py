"""Floor benchmark: one sequential Telegram turn of `lightgrep run` beside the least a bot can do.

The floor bot (`floor_bot`, below) is a minimal aiohttp program doing a turn's five steps and
nothing else: getUpdates, append the user's message to a JSONL file, one chat completion (the
conversation so far), append the answer, sendMessage. The libraries bot (`library_bot`) does the
same five steps through python-telegram-bot's `Bot` and the openai SDK, each on its own default
HTTP and again on lightgrep's aiohttp transports: what the clients the project must use cost by
themselves. All run as real processes against their
own fake Bot API and one instant fake LLM on 127.0.0.1 (tests/rigs/fakes), one turn at a time: a
message is sent once the previous one is answered. Turns alternate between the bots in
blocks, so a machine shared with other work slows all alike.

Prints, per bot: p50 / p90 of a turn (message pushed → sendMessage received) and CPU ms per
turn, and the ratios to the floor (issue 13's target: lightgrep ≤ 1.5x for the p50) and of
lightgrep to the libraries on aiohttp.

Run: python bench/floor_bench.py                 (10 users × 20 turns each per bot)
     python bench/floor_bench.py --turns 400 --block 20
     python bench/floor_bench.py --no-stream      (lightgrep asks for answers whole)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    FIRST_USER_ID,
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    percentile,
    write_config,
)
from tests.rigs.fakes.telegram_server import TOKEN

SYSTEM = "You are a helpful assistant. Answer briefly."
WINDOW_TOKENS = 1_000_000  # no consolidation: the floor bot has none


# ---- the floor bot ------------------------------------------------------------------------------


async def floor_bot(api_base: str, llm_base: str, folder: Path) -> None:
    """getUpdates → append → chat completion → append → sendMessage, until SIGTERM."""
    import aiohttp  # here: the driver below does not need it

    bot = f"{api_base}/bot{TOKEN}"
    histories: dict[int, list[dict[str, Any]]] = {}
    offset = 0
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.post(
                f"{bot}/getUpdates", data={"offset": str(offset), "timeout": "5"}
            ) as response:
                updates = (await response.json())["result"]
            for update in updates:
                offset = update["update_id"] + 1
                message = update.get("message") or {}
                chat, text = message["chat"]["id"], message.get("text", "")
                history = histories.setdefault(chat, [])
                path = folder / f"{chat}.jsonl"
                _append(path, {"role": "user", "content": text, "id": message["message_id"]})
                history.append({"role": "user", "content": text})
                body = {"model": "fake-model", "messages": [_system(), *history]}
                async with http.post(f"{llm_base}/chat/completions", json=body) as response:
                    answer = (await response.json())["choices"][0]["message"]["content"]
                _append(path, {"role": "assistant", "content": answer})
                history.append({"role": "assistant", "content": answer})
                form = {"chat_id": str(chat), "text": answer}
                async with http.post(f"{bot}/sendMessage", data=form) as response:
                    await response.read()


async def library_bot(api_base: str, llm_base: str, folder: Path, on_aiohttp: bool) -> None:
    """The same five steps through the clients the project must use, nothing else: PTB's `Bot`
    for getUpdates and sendMessage, the openai SDK for the chat completion; each on its default
    HTTP, or `on_aiohttp` on the aiohttp transports lightgrep gives them. What these libraries
    cost by themselves: the least lightgrep can reach while it uses them."""
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient  # here: the driver does not need them
    from telegram import Bot

    from adapters.telegram.request import AiohttpRequest
    from bot.llm.http import AiohttpTransport

    histories: dict[int, list[dict[str, Any]]] = {}
    offset = 0
    http = DefaultAsyncHttpxClient(transport=AiohttpTransport()) if on_aiohttp else None
    llm = AsyncOpenAI(base_url=llm_base, api_key="sk-bench", max_retries=0, http_client=http)
    requests = {"request": AiohttpRequest(), "get_updates_request": AiohttpRequest(1)}
    async with Bot(TOKEN, base_url=f"{api_base}/bot", **(requests if on_aiohttp else {})) as bot:
        while True:
            for update in await bot.get_updates(offset=offset, timeout=5):
                offset = update.update_id + 1
                message = update.message
                if message is None:
                    continue
                chat, text = message.chat.id, message.text or ""
                history = histories.setdefault(chat, [])
                path = folder / f"{chat}.jsonl"
                _append(path, {"role": "user", "content": text, "id": message.message_id})
                history.append({"role": "user", "content": text})
                completion = await llm.chat.completions.create(
                    model="fake-model",
                    messages=[_system(), *history],  # type: ignore[list-item]
                )
                answer = completion.choices[0].message.content or ""
                _append(path, {"role": "assistant", "content": answer})
                history.append({"role": "assistant", "content": answer})
                await bot.send_message(chat, answer)


def _system() -> dict[str, str]:
    return {"role": "system", "content": SYSTEM}


def _append(path: Path, record: dict[str, Any]) -> None:
    """One O_APPEND write per line, as memory/session.py does it."""
    line = json.dumps(record, ensure_ascii=False).encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class FloorProcess(BotProcess):
    """The floor bot as a process (BotProcess's CPU and RSS readings, its own command)."""

    def __init__(
        self, api_base: str, llm_base: str, folder: Path, env: dict[str, str], kind: str = "floor"
    ) -> None:
        super().__init__(folder / "unused.toml", env, folder / f"{kind}.log")
        self.args = [kind, api_base, llm_base, str(folder / kind)]
        self.folder = folder / kind

    async def start(self, ready_timeout_s: float = 30.0) -> None:
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--bot", *self.args,
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=self.env,
            )  # fmt: skip
        deadline = time.monotonic() + ready_timeout_s
        while not (self.folder / "ready").exists():
            if self.proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"floor bot did not start:\n{self.log_tail()}")
            await asyncio.sleep(0.02)


# ---- the driver ---------------------------------------------------------------------------------


class Runner:
    """Sequential turns against one bot: push a message, wait for its answer."""

    def __init__(self, name: str, telegram: BenchTelegram, bot: BotProcess, users: int) -> None:
        self.name = name
        self.telegram = telegram
        self.bot = bot
        self.users = users
        self.turns_ms: list[float] = []
        self.cpu_s = 0.0
        self.seq = 0
        self.rng = random.Random(3)
        self._answered = asyncio.Event()
        telegram.on_answer = lambda _name, _sent: self._answered.set()

    async def block(self, turns: int, record: bool = True) -> None:
        cpu = self.bot.cpu_seconds()
        for _ in range(turns):
            user = FIRST_USER_ID + self.seq % self.users
            self._answered.clear()
            name = self.telegram.send(user, self.seq // self.users, self.rng)
            self.seq += 1
            await asyncio.wait_for(self._answered.wait(), 30)
            if record:
                answered = self.telegram.answers[name][0]
                self.turns_ms.append((answered - self.telegram.injected_at[name]) * 1000)
        if record:
            self.cpu_s += self.bot.cpu_seconds() - cpu


async def run(args: argparse.Namespace, folder: Path) -> tuple[Runner, ...]:
    llm = await BenchLLM(0.0, reply_words=args.reply_words).start()
    tg_floor, tg_bot = await BenchTelegram().start(), await BenchTelegram().start()
    env = child_env(folder)
    tg_libraries, tg_aiohttp = await BenchTelegram().start(), await BenchTelegram().start()
    floor = FloorProcess(tg_floor.api_base, llm.base_url, folder, env)
    libraries = FloorProcess(tg_libraries.api_base, llm.base_url, folder, env, "libraries")
    aiohttp = FloorProcess(tg_aiohttp.api_base, llm.base_url, folder, env, "aiohttp")
    config = write_config(folder, llm, tg_bot, WINDOW_TOKENS, stream=not args.no_stream)
    bot = BotProcess(config, env, folder / "bot.log", profile=args.profile)
    try:
        await floor.start()
        await libraries.start()
        await aiohttp.start()
        await bot.start()
        runners = (Runner("floor", tg_floor, floor, args.users),
                   Runner("libraries", tg_libraries, libraries, args.users),
                   Runner("on aiohttp", tg_aiohttp, aiohttp, args.users),
                   Runner("lightgrep", tg_bot, bot, args.users))  # fmt: skip
        for runner in runners:
            await runner.block(args.warmup, record=False)
        done = 0
        while done < args.turns:
            size = min(args.block, args.turns - done)
            for runner in runners:
                await runner.block(size)
            done += size
        return runners
    finally:
        for process in (floor, libraries, aiohttp, bot):
            if process.proc is not None:
                await process.terminate(10)
        for server in (tg_floor, tg_libraries, tg_aiohttp, tg_bot, llm):
            await server.stop()


def report(runners: tuple[Runner, ...], args: argparse.Namespace) -> None:
    print(f"== sequential turns: {args.turns} per bot in blocks of {args.block}, "
          f"{args.users} users, instant fake LLM, lightgrep's stream "
          f"{'off' if args.no_stream else 'on'}, {os.cpu_count()} CPUs "
          f"(load average {os.getloadavg()[0]:.1f})")  # fmt: skip
    rows = []
    for runner in runners:
        p50, p90 = percentile(runner.turns_ms, 50), percentile(runner.turns_ms, 90)
        cpu = runner.cpu_s * 1000 / max(1, len(runner.turns_ms))
        rows.append((p50, p90, cpu))
        print(f"  {runner.name:10s} turn p50 {p50:6.2f} ms   p90 {p90:6.2f} ms   "
              f"CPU {cpu:5.2f} ms/turn")  # fmt: skip
    floor, libraries, aiohttp, bot = rows
    for (name, row), (base, of) in (
        (("lightgrep", bot), ("floor", floor)),
        (("libraries", libraries), ("floor", floor)),
        (("on aiohttp", aiohttp), ("floor", floor)),
        (("lightgrep", bot), ("on aiohttp", aiohttp)),
    ):
        print(f"  ratio      p50 {row[0] / of[0]:5.2f}x    p90 {row[1] / of[1]:5.2f}x    "
              f"CPU {row[2] / of[2]:5.2f}x   ({name} / {base})")  # fmt: skip
    print("  (issue 13's target: lightgrep / floor p50 ≤ 1.5x)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="measured turns per bot")
    parser.add_argument("--block", type=int, default=20, help="turns per bot before switching")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured turns per bot")
    parser.add_argument("--users", type=int, default=10, help="users taking turns")
    parser.add_argument("--reply-words", type=int, default=40, help="words per LLM answer")
    parser.add_argument("--no-stream", action="store_true", help="lightgrep with stream = false")
    parser.add_argument(
        "--profile",
        metavar="FILE",
        type=lambda path: Path(path).resolve(),  # the bot runs in another folder
        help="run lightgrep under cProfile, writing FILE (slows it down)",
    )
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lightgrep-floor-") as tmp:
        runners = await run(args, Path(tmp))
    report(runners, args)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bot"]:
        kind, api, llm_url, where = sys.argv[2:6]
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / "ready").touch()  # the first getUpdates waits for the first message
        if kind == "floor":
            asyncio.run(floor_bot(api, llm_url, Path(where)))
        else:
            asyncio.run(library_bot(api, llm_url, Path(where), on_aiohttp=kind == "aiohttp"))
    else:
        sys.exit(asyncio.run(main()))
