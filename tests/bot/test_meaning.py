"""Ranking by meaning's files and fusion, with the real embeddings client (bot/llm/embeddings.py)
against the fake /v1/embeddings endpoint: passages, a torn vectors file, entries written
embedded in the background and counted, /link's merge keeping both people's vectors."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.llm.embeddings import Embeddings
from memory.control.link import _merge_history
from memory.search import engine, meaning
from memory.store import MemoryStore
from memory.workspace import Workspaces
from tests.rigs.fakes.embeddings_server import FakeEmbeddings

DOG = "[2026-01-05 10:00] Ana adopted a labrador called Biscuit from the shelter."
GARDEN = "[2026-02-01 09:00] Ana worked on the garden: new fence posts."


@pytest.fixture
async def endpoint() -> AsyncIterator[FakeEmbeddings]:
    server = await FakeEmbeddings().start()
    yield server
    await server.stop()


@pytest.fixture
def installed(endpoint: FakeEmbeddings) -> Iterator[meaning.Meaning]:
    embedder = Embeddings(model="fake", base_url=endpoint.base_url, api_key=None, batch_size=2)
    m = meaning.Meaning(embedder, timeout_s=2)
    meaning.install(m)
    yield m
    meaning.install(None)


def test_an_entry_is_cut_into_near_equal_passages_of_at_most_150_words() -> None:
    entry = "[2026-01-01 10:00] " + " ".join(f"w{i}" for i in range(301))
    parts = meaning.passages(entry)
    assert [len(p.split()) for p in parts] == [101, 101, 99]
    assert parts[0].startswith("w0 ")  # the stamp is no part of the meaning
    assert meaning.passages("[2026-01-01 10:00] short one") == ["short one"]


def test_fusion_puts_first_what_both_rank_high() -> None:
    assert meaning.fuse(["a", "b", "c"], ["c", "d", "b"], k=20, weight=1.0)[:2] == ["c", "b"]
    # as chosen (K 5, weight 0.1): the keywords lead, what only meaning found comes after
    assert meaning.fuse(["a", "b", "c"], ["d", "c"]) == ["a", "b", "c", "d"]
    assert meaning.fuse(["a", "b"], ["b", "a"]) == ["a", "b"]  # a tie: the keywords' order
    assert meaning.fuse(["a", "b"], []) == ["a", "b"]  # no vectors: keywords as they were


async def wait_vectors(history: Path, entries: int) -> meaning.Vectors:
    async with asyncio.timeout(10):
        while True:
            vectors = meaning.load(history)
            if vectors is not None and len(vectors.records) == entries:
                return vectors
            await asyncio.sleep(0.05)


async def test_written_entries_are_embedded_in_the_background_and_counted(
    installed: meaning.Meaning, endpoint: FakeEmbeddings, tmp_path: Path
) -> None:
    store = MemoryStore(tmp_path)
    store.append_history(DOG)
    store.append_history(GARDEN)
    await wait_vectors(store.history_path, 2)
    lines = [json.loads(x) for x in (tmp_path / "embeddings.jsonl").read_text().splitlines()]
    assert {line["model"] for line in lines} == {"fake"}
    assert sum(line["prompt_tokens"] for line in lines) == sum(
        len(t.split()) for t in endpoint.inputs("fake")
    )
    found = await asyncio.to_thread(
        engine.search_history, store.history_path, "my puppy", limit=1, meaning=installed
    )
    assert found.hits[0].text == DOG and found.hits[0].why == [("meaning", "")]


async def test_a_torn_last_record_is_embedded_again(
    installed: meaning.Meaning, endpoint: FakeEmbeddings, tmp_path: Path
) -> None:
    store = MemoryStore(tmp_path)
    store.history_path.write_text(f"{DOG}\n\n{GARDEN}\n")
    assert await asyncio.to_thread(installed.index, store.history_path) == 2
    path = meaning.vectors_path(store.history_path)
    os.truncate(path, path.stat().st_size - 10)  # a crash mid-append
    assert len(meaning.load(store.history_path).records) == 1  # type: ignore[union-attr]
    assert await asyncio.to_thread(installed.index, store.history_path) == 1
    assert len(meaning.load(store.history_path).records) == 2  # type: ignore[union-attr]


async def test_link_keeps_both_peoples_vectors_at_the_merged_offsets(
    installed: meaning.Meaning, endpoint: FakeEmbeddings, tmp_path: Path
) -> None:
    workspaces = Workspaces(tmp_path)
    ana, bob = workspaces.get("telegram-1"), workspaces.get("discord-2")
    ana.memory.append_history(DOG)
    bob.memory.append_history(GARDEN)
    await wait_vectors(ana.history_path, 1)
    await wait_vectors(bob.history_path, 1)
    asked = len(endpoint.requests)
    _merge_history(bob, ana)
    merged = meaning.load(ana.history_path)
    assert merged is not None and len(merged.records) == 2
    data = ana.history_path.read_bytes()
    for _sha, offset, length in merged.records:
        assert meaning.read_entry(ana.history_path, offset, length, _sha) is not None
    assert data.count(b"[2026-") == 2
    assert not meaning.vectors_path(bob.history_path).exists()
    assert len(endpoint.requests) == asked  # nothing embedded again
