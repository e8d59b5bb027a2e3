"""Files that cannot be written, as a user of any platform meets them: one clear sentence (was
the message saved or not), no traceback, the answer never held up by consolidation, and the bot
carrying on once the disk recovers.

The bot runs as a real `lightgrep chat` child process: as root, file permissions only bind a
process without CAP_DAC_OVERRIDE, and a full disk is simulated with a file size limit
(RLIMIT_FSIZE: the kernel then refuses a write as it refuses one on a full disk).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from tests.rigs.cli import STEP_TIMEOUT, run_chat, without_write_override, write_config
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)


class Chat:
    """A `lightgrep chat` over pipes, one message at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def say(self, text: str, paragraphs: int = 1) -> str:
        """The answer: what is printed up to the blank line that ends it (an answer of several
        paragraphs has blank lines inside)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{text}\n".encode())
        await self.proc.stdin.drain()
        answer = b""
        async with asyncio.timeout(STEP_TIMEOUT):
            for _ in range(paragraphs):
                answer += await self.proc.stdout.readuntil(b"\n\n")
        return answer.decode().strip()


@asynccontextmanager
async def chatting(
    config: Path, env: dict[str, str], preexec: Callable[[], None], *args: str
) -> AsyncIterator[Chat]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", "--config", str(config), *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, preexec_fn=preexec,
    )  # fmt: skip
    chat = Chat(proc)
    try:
        yield chat
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0
    assert proc.stderr is not None
    chat.stderr = (await proc.stderr.read()).decode()  # type: ignore[attr-defined]


def records(workspace: Path) -> list[dict]:
    [path] = (workspace / "sessions").iterdir()
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def said(workspace: Path) -> list[tuple[str, str]]:
    """(role, text) of every stored message, without the time line the model is shown."""
    return [(r["role"], r["content"].split("\n")[-1]) for r in records(workspace) if "role" in r]


async def test_an_unwritable_session_file_is_one_sentence_and_the_bot_recovers(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    config = write_config(tmp_path, fake_llm)
    workspace = tmp_path / "workspaces" / "cli-tester"
    code, _, err = await run_chat(config, child_env, b"hello\n")
    assert code == 0, err
    [session_file] = (workspace / "sessions").iterdir()

    def lock_file_then_answer(request: dict) -> object:  # the disk fails mid-turn
        session_file.chmod(0o444)
        return completion("An answer I could not keep.")

    async with chatting(config, child_env, without_write_override) as chat:
        session_file.chmod(0o444)
        refused = await chat.say("one")
        assert refused.startswith("I couldn't save your message (I'm not allowed to write")
        assert "haven't answered it" in refused
        session_file.chmod(0o644)  # the disk is fine again
        assert await chat.say("two") == "ok"
        fake_llm.default = lock_file_then_answer
        kept = await chat.say("three", paragraphs=2)
        assert kept.startswith("An answer I could not keep.")
        assert kept.endswith("(Your message is saved, but this answer is not: I'm not allowed "
                             "to write my files.)")  # fmt: skip
        session_file.chmod(0o644)
        fake_llm.default = lambda request: completion("ok")
        assert await chat.say("four") == "ok"
    assert "Traceback" not in chat.stderr  # type: ignore[attr-defined]
    assert said(workspace)[2:] == [
        ("user", "two"),  # "one" was not saved, as the user was told
        ("assistant", "ok"),
        ("user", "three"),
        ("user", "four"),
        ("assistant", "ok"),
    ]
    assert [t for t in user_texts(fake_llm)] == ["hello", "two", "three", "four"]


def user_texts(fake: FakeOpenAI) -> list[str]:
    return [
        [m for m in r["messages"] if m["role"] == "user"][-1]["content"].split("\n")[-1]
        for r in fake.chat_requests
    ]


async def test_a_full_disk_is_one_sentence_and_the_bot_recovers(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    config = write_config(tmp_path, fake_llm)
    workspace = tmp_path / "workspaces" / "cli-tester"
    code, _, err = await run_chat(config, child_env, b"hello\n")
    assert code == 0, err
    [session_file] = (workspace / "sessions").iterdir()
    full = session_file.stat().st_size

    def disk_full() -> None:  # no file of the bot may grow past the session file's size
        resource.setrlimit(resource.RLIMIT_FSIZE, (full, resource.RLIM_INFINITY))

    async with chatting(config, child_env, disk_full, "--verbose") as chat:
        refused = await chat.say("one")
        assert refused.startswith("I couldn't save your message (a file has reached its size")
        limit = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        resource.prlimit(chat.proc.pid, resource.RLIMIT_FSIZE, limit)  # space again
        assert await chat.say("two") == "ok"
    assert "Traceback" not in chat.stderr  # type: ignore[attr-defined]
    assert "File too large" in chat.stderr  # type: ignore[attr-defined]  # the details: logged
    assert said(workspace) == [("user", "hello"), ("assistant", "ok"),
                               ("user", "two"), ("assistant", "ok")]  # fmt: skip


async def test_an_unwritable_history_never_holds_up_an_answer(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Every message over the window asks for a consolidation that cannot be written: each one
    is still answered, and once HISTORY.md can be written the backlog is filed."""

    def answer(request: dict) -> object:
        if is_consolidation(request):
            return save_memory_call("[2026-01-01 10:00] Talked about tea.", "## Preferences\n- tea")
        return completion("tea " * 150)

    fake_llm.default = answer
    config = write_config(
        tmp_path, fake_llm, "context_window_tokens = 1200\nmax_output_tokens = 150\n"
    )
    workspace = tmp_path / "workspaces" / "cli-tester"
    workspace.mkdir(parents=True)
    history = workspace / "HISTORY.md"
    history.write_text("")
    history.chmod(0o444)
    async with chatting(config, child_env, without_write_override) as chat:
        answers = [await chat.say(f"message {n}") for n in range(12)]
        tried = sum(is_consolidation(r) for r in fake_llm.requests)
        history.chmod(0o644)  # the disk recovers
        answers.append(await chat.say("message 12"))
    assert answers == ["tea " * 149 + "tea"] * 13  # all answered, none held up
    assert tried >= 3  # consolidation was tried, and failed to write
    assert "Talked about tea." in history.read_text() or "[RAW]" in history.read_text()
    assert "Traceback" not in chat.stderr  # type: ignore[attr-defined]
    log = (Path(child_env["HOME"]) / ".local/share/lightgrep/chat.log").read_text()
    assert "Permission denied" in log and "HISTORY.md" in log  # the details are in the log
    assert os.stat(history).st_size > 0
