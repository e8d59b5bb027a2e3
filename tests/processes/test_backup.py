"""`lightgrep backup` beside a real `lightgrep run` under Telegram traffic (the fake Telegram and
LLM servers): the backup waits for a person whose turn is under way, everyone else keeps being
answered meanwhile, and the archive restored elsewhere holds every message answered before the
backup started exactly once, loads, and passes `lightgrep doctor`."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bench.crash_loop import Traffic
from bench.harness import (
    FIRST_USER_ID,
    TOKEN_RE,
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    last_user_text,
    read_workspaces,
    write_config,
)
from memory.session import SessionStore
from tests.rigs.fakes.openai_server import Held

WAIT_S = 30.0
# Two cold starts of `lightgrep` beside the bot's, its traffic and consolidations, on a loaded
# machine (see tests/processes/test_crash.py for the measure).
pytestmark = pytest.mark.timeout(150)


async def lightgrep(config: Path, env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args, "--config", str(config),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=config.parent,
        env=env,
    )  # fmt: skip


async def finished(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
    return proc.returncode or 0, out.decode(), err.decode()


async def until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def servers() -> AsyncIterator[tuple[BenchLLM, BenchTelegram]]:
    llm = await BenchLLM(latency_s=0.05, reply_words=30).start()
    telegram = await BenchTelegram().start()
    try:
        yield llm, telegram
    finally:
        await telegram.stop()
        await llm.stop()


def hold_one_turn(llm: BenchLLM, user: int) -> tuple[asyncio.Event, asyncio.Event]:
    """The next turn of `user` is held at the model until the second event is set (the first
    is set once it is held)."""
    held, release = asyncio.Event(), asyncio.Event()
    answer = llm.default

    def holding(body: dict[str, Any]) -> Any:
        found = TOKEN_RE.search(last_user_text(body))
        item = answer(body)
        if found and int(found.group(1)) == user and not held.is_set():
            held.set()
            return Held(release, item)
        return item

    llm.default = holding
    return held, release


def leftovers(folder: Path, prefix: str) -> list[str]:
    return [path.name for path in folder.iterdir() if path.name.startswith(prefix)]


def turn_is_whole(workspaces: Path, name: str) -> bool:
    """The user message holding `name` is followed by the bot's answer in its session."""
    for sessions in workspaces.glob("*/sessions"):
        store = SessionStore(sessions)
        keys = store.keys()
        for key in keys:
            messages = store.read_all(store.get(key))
            for number, message in enumerate(messages):
                if message.get("role") == "user" and name in str(message.get("content")):
                    later = messages[number + 1 :]
                    return any(m.get("role") == "assistant" for m in later)
    return False


async def test_a_backup_under_traffic_restores_every_answered_message_once(
    tmp_path: Path, servers: tuple[BenchLLM, BenchTelegram]
) -> None:
    llm, telegram = servers
    env = child_env(tmp_path)
    config = write_config(tmp_path, llm, telegram, window_tokens=1400)  # consolidations too
    bot = BotProcess(config, env, tmp_path / "bot.log")
    await bot.start()
    traffic = Traffic(telegram, users=3, burst=1, seed=3)
    try:
        traffic.start()
        await until(lambda: len(telegram.answers) >= 18, "the first answers")
        held, release = hold_one_turn(llm, FIRST_USER_ID)
        await asyncio.wait_for(held.wait(), WAIT_S)
        held_name = next(iter(traffic.waiting[FIRST_USER_ID]))
        answered_before = {name for name, times in telegram.answers.items() if times}

        backup = await lightgrep(config, env, "backup", "create", str(tmp_path / "b.tar.gz"))
        # The backup waits for the held person; the others keep talking and being answered.
        others_before = len(telegram.answers)
        await until(lambda: len(telegram.answers) >= others_before + 6, "answers meanwhile")
        assert backup.returncode is None, await finished(backup)
        release.set()
        code, out, err = await finished(backup)
        assert code == 0, err
        assert "wrote " in out and "b.tar.gz" in out
        # Out of a container: to stdout, a pipe whose descriptor the bot fills alike.
        with (tmp_path / "piped.tar.gz").open("wb") as piped:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot.cli", "backup", "create", "-", "--config", str(config),
                stdin=asyncio.subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=tmp_path, env=env,
            )  # fmt: skip
            data, err_bytes = await asyncio.wait_for(proc.communicate(), WAIT_S)
            piped.write(data)
        assert proc.returncode == 0, err_bytes.decode()

        traffic.running = False
        await until(lambda: not traffic.owed(), "the last answers")
        assert await bot.terminate() == 0
    finally:
        if bot.proc is not None and bot.proc.returncode is None:
            await bot.kill()
    assert llm.consolidations >= 1  # a backup taken between consolidations, not in one
    assert not (tmp_path / "workspaces" / ".lightgrep.sock").exists()  # gone with the bot
    assert leftovers(tmp_path, ".b.tar.gz") == []  # no temp file left beside it

    code, out, err = await finished(
        await lightgrep(config, env, "backup", "verify", str(tmp_path / "b.tar.gz"))
    )
    assert code == 0 and "whole" in out, err
    code, out, err = await finished(
        await lightgrep(config, env, "backup", "verify", str(tmp_path / "piped.tar.gz"))
    )
    assert code == 0 and "whole" in out, err

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    restored_config = write_config(elsewhere, llm, telegram, window_tokens=1400)
    code, out, err = await finished(
        await lightgrep(restored_config, env, "backup", "restore", str(tmp_path / "b.tar.gz"))
    )
    assert code == 0, err
    restored = read_workspaces(elsewhere / "workspaces")
    assert restored.problems == [] and restored.torn_last_lines == 0
    assert restored.duplicated == []
    assert {name: restored.user_tokens.get(name) for name in answered_before} == dict.fromkeys(
        answered_before, 1
    )
    assert turn_is_whole(elsewhere / "workspaces", held_name)  # taken once its turn was over

    code, out, err = await finished(await lightgrep(restored_config, env, "doctor"))
    assert code == 0, out + err
    assert "workspaces" in out


async def test_a_bot_killed_during_a_backup_leaves_no_archive_looking_whole(
    tmp_path: Path, servers: tuple[BenchLLM, BenchTelegram]
) -> None:
    """The bot dies (SIGKILL) while a backup waits for a person whose turn is under way: the
    backup ends with one line, and neither an archive under the asked name nor a temp file."""
    llm, telegram = servers
    env = child_env(tmp_path)
    config = write_config(tmp_path, llm, telegram, window_tokens=4000)
    bot = BotProcess(config, env, tmp_path / "bot.log")
    await bot.start()
    try:
        held, release = hold_one_turn(llm, FIRST_USER_ID)
        telegram.send(FIRST_USER_ID, 0, random.Random(1))
        await asyncio.wait_for(held.wait(), WAIT_S)
        backup = await lightgrep(config, env, "backup", "create", str(tmp_path / "b.tar"))
        await until(lambda: any(tmp_path.glob(".b.tar.*.tmp")), "the backup's temp file")
        await asyncio.sleep(0.5)  # connected, waiting for the held person
        assert backup.returncode is None
        await bot.kill()
        code, out, err = await finished(backup)
    finally:
        release.set()
        if bot.proc is not None and bot.proc.returncode is None:
            await bot.kill()
    assert code != 0 and err.startswith("lightgrep: backup stopped"), (code, out, err)
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b.tar").exists()
    assert leftovers(tmp_path, ".b.tar") == []
