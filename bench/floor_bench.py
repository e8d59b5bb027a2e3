"""Floor benchmark: one sequential Telegram turn of `lightgrep run` beside the least a bot can do.

The floor bot (`--floor-bot`, below) is a minimal aiohttp program doing a turn's five steps and
nothing else: getUpdates, append the user's message to a JSONL file, one chat completion (the
conversation so far), append the answer, sendMessage. Both run as real processes against their
own fake Bot API and one instant fake LLM on 127.0.0.1 (tests/fakes), one turn at a time: a
message is sent once the previous one is answered. Turns alternate between the two bots in
blocks, so a machine shared with other work slows both alike.

Prints, per bot: p50 / p90 of a turn (message pushed → sendMessage received) and CPU ms per
turn, and the ratios lightgrep / floor (issue 13's target: ≤ 1.5x for the p50).

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
from tests.fakes.telegram_server import TOKEN

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

    def __init__(self, api_base: str, llm_base: str, folder: Path, env: dict[str, str]) -> None:
        super().__init__(folder / "unused.toml", env, folder / "floor.log")
        self.args = [api_base, llm_base, str(folder / "floor")]
        self.folder = folder / "floor"

    async def start(self, ready_timeout_s: float = 30.0) -> None:
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--floor-bot", *self.args,
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


async def run(args: argparse.Namespace, folder: Path) -> tuple[Runner, Runner]:
    llm = await BenchLLM(0.0, reply_words=args.reply_words).start()
    tg_floor, tg_bot = await BenchTelegram().start(), await BenchTelegram().start()
    env = child_env(folder)
    floor = FloorProcess(tg_floor.api_base, llm.base_url, folder, env)
    config = write_config(folder, llm, tg_bot, WINDOW_TOKENS, stream=not args.no_stream)
    bot = BotProcess(config, env, folder / "bot.log", profile=args.profile)
    try:
        await floor.start()
        await bot.start()
        runners = (Runner("floor", tg_floor, floor, args.users),
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
        for process in (floor, bot):
            if process.proc is not None:
                await process.terminate(10)
        for server in (tg_floor, tg_bot, llm):
            await server.stop()


def report(floor: Runner, bot: Runner, args: argparse.Namespace) -> None:
    print(f"== sequential turns: {args.turns} per bot in blocks of {args.block}, "
          f"{args.users} users, instant fake LLM, lightgrep's stream "
          f"{'off' if args.no_stream else 'on'}, {os.cpu_count()} CPUs "
          f"(load average {os.getloadavg()[0]:.1f})")  # fmt: skip
    rows = []
    for runner in (floor, bot):
        p50, p90 = percentile(runner.turns_ms, 50), percentile(runner.turns_ms, 90)
        cpu = runner.cpu_s * 1000 / max(1, len(runner.turns_ms))
        rows.append((p50, p90, cpu))
        print(f"  {runner.name:10s} turn p50 {p50:6.2f} ms   p90 {p90:6.2f} ms   "
              f"CPU {cpu:5.2f} ms/turn")  # fmt: skip
    (f50, f90, fcpu), (b50, b90, bcpu) = rows
    print(f"  ratio      p50 {b50 / f50:5.2f}x    p90 {b90 / f90:5.2f}x    "
          f"CPU {bcpu / fcpu:5.2f}x   (lightgrep / floor; target p50 ≤ 1.5x)")  # fmt: skip


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
        floor, bot = await run(args, Path(tmp))
    report(floor, bot, args)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--floor-bot"]:
        api, llm_url, where = sys.argv[2:5]
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / "ready").touch()  # the first getUpdates waits for the first message
        asyncio.run(floor_bot(api, llm_url, Path(where)))
    else:
        sys.exit(asyncio.run(main()))
