"""The Telegram adapter in the test's process, with the real Agent, against the fake Bot API
(fakes/telegram_server.py); the fixture `tg`, and what tests read back."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram import TelegramConfig, create
from adapters.telegram.adapter import TelegramAdapter
from bot.agent.agent import Agent
from bot.config import Config, LLMConfig, MemoryConfig
from memory.keys import encode_key
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram

GROUP = -1001234


@pytest.fixture
def tg(fake_telegram: FakeTelegram) -> FakeTelegram:
    """The fake Bot API (conftest's fake_telegram), by a short name."""
    return fake_telegram


def make_config(
    tg: FakeTelegram, llm: FakeOpenAI, workspaces_dir: Path, allow: list[str] | None = None
) -> Config:
    return Config(
        llm=LLMConfig(base_url=llm.base_url, api_key="sk-test", model="fake-model", max_retries=0),
        memory=MemoryConfig(workspaces_dir=workspaces_dir),
        platforms={
            "telegram": TelegramConfig(
                enabled=True,
                token=TOKEN,
                allow_from=["*"] if allow is None else allow,
                api_base=tg.api_base,
                poll_timeout_s=1,
            )
        },
    )


@asynccontextmanager
async def running(config: Config) -> AsyncIterator[TelegramAdapter]:
    """The adapter serving until the block ends; then stopped the way the CLI stops it."""
    agent = Agent(config)
    adapter = create(config, agent)
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))
    try:
        ready = asyncio.create_task(adapter.ready.wait())
        await asyncio.wait({task, ready}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if task.done():
            task.result()  # raises the start error
        assert adapter.ready.is_set()
        yield adapter
    finally:
        stop.set()
        done, _ = await asyncio.wait({task}, timeout=5)
        await agent.aclose()
        assert done, "the adapter did not stop"
        task.result()


async def eventually(predicate: Callable[[], bool], wait_s: float = 5.0) -> None:
    deadline = time.monotonic() + wait_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


def session_lines(workspaces_dir: Path, user: str, session: str) -> list[dict[str, Any]]:
    path = workspaces_dir / encode_key(user) / "sessions" / f"{encode_key(session)}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def last_user_text(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")


def by_prompt(answers: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    """An LLM that answers by a word in the user's newest message."""

    def answer(request: dict[str, Any]) -> Any:
        text = last_user_text(request)
        return next((item for word, item in answers.items() if word in text), completion("ok"))

    return answer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def webhook_config(tg: FakeTelegram, llm: FakeOpenAI, workspaces_dir: Path):
    config = make_config(tg, llm, workspaces_dir)
    section = config.platforms["telegram"]
    section.mode = "webhook"
    section.webhook_port = free_port()
    section.webhook_url = f"http://127.0.0.1:{section.webhook_port}/tg/hook"
    return config
