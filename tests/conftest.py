"""Shared fixtures: fake far ends on 127.0.0.1 and a fresh workspaces folder per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    server = await FakeTelegram().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def workspaces_dir(tmp_path: Path) -> Path:
    path = tmp_path / "workspaces"
    path.mkdir()
    return path
