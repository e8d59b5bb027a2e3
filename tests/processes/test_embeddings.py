"""Ranking by meaning as a person sees it, with `lightgrep run` as a real process: the real
python-telegram-bot against the fake Telegram, the real openai client against the fake model
and the fake embeddings endpoint (/v1/embeddings, tests/rigs/fakes/embeddings_server.py).

An existing history is embedded in the background at its first search; /recall then finds an
entry that shares no word with the question; the endpoint killed, /recall answers from keywords
at once and the log says so; /forget removes the forgotten entry's vector; another model makes
the vectors embedded again with it."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memory.keys import encode_key
from memory.search import meaning
from tests.rigs.cli import STEP_TIMEOUT, read_until, run_cli, start_run, stopped, write_config
from tests.rigs.fakes.embeddings_server import FakeEmbeddings
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram, Sent

ANA = 42
DOG = "[2026-01-05 10:00] Ana adopted a labrador called Biscuit from the shelter."
FILLER = [
    f"[2026-02-{day:02d} 09:00] Ana worked on the garden: {thing}."
    for day, thing in enumerate(
        ["new fence posts", "tomato seedlings", "a compost bin", "pruned the apple tree"], 1
    )
]


@pytest.fixture
async def embeddings() -> AsyncIterator[FakeEmbeddings]:
    server = await FakeEmbeddings().start()
    yield server
    await server.stop()


def settings(tg: FakeTelegram, endpoint: FakeEmbeddings, model: str) -> str:
    return (
        "max_retries = 0\n"
        f'[search]\nembeddings = true\nbase_url = "{endpoint.base_url}"\n'
        f'model = "{model}"\nquery_model = "fake-query"\nbatch_size = 2\ntimeout_s = 3\n'
        f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
        f'api_base = "{tg.api_base}"\npoll_timeout_s = 1\n'
    )


def sha(entry: str) -> bytes:
    return hashlib.sha1(entry.encode()).digest()


async def embedded(history: Path, model: str, entries: int) -> meaning.Vectors:
    """The vectors file once it holds ``entries`` entries of ``model``."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        vectors = meaning.load(history)
        if vectors is not None and vectors.model == model and len(vectors.records) == entries:
            return vectors
        await asyncio.sleep(0.1)
    raise AssertionError(f"not embedded: {meaning.load(history)!r}")


async def test_recall_ranks_by_meaning_and_survives_the_endpoint(
    fake_llm: FakeOpenAI,
    fake_telegram: FakeTelegram,
    embeddings: FakeEmbeddings,
    tmp_path: Path,
    child_env: dict[str, str],
) -> None:
    tg = fake_telegram
    fake_llm.default = lambda request: completion("ok")
    home = tmp_path / "workspaces" / encode_key(f"telegram-{ANA}")
    home.mkdir(parents=True)
    history = home / "HISTORY.md"
    history.write_text("\n\n".join([DOG, *FILLER]) + "\n")
    config = write_config(tmp_path, fake_llm, settings(tg, embeddings, "fake-passage"))

    async def answer(count: int) -> Sent:
        await tg.wait_until(lambda: len(tg.sent_to(ANA)) >= count, STEP_TIMEOUT)
        return tg.sent_to(ANA)[count - 1]

    proc = await start_run(config, child_env)
    try:
        assert proc.stderr is not None
        await read_until(proc.stderr, "telegram is ready")
        # The first search answers by keywords and has the history embedded in the background.
        tg.dm(ANA, "/recall garden")
        assert "tomato seedlings" in (await answer(1)).text
        vectors = await embedded(history, "fake-passage", 5)
        assert sha(DOG) in {record[0] for record in vectors.records}
        assert all(len(r["input"]) <= 2 for r in embeddings.requests)  # batched as configured
        assert "embeddings.jsonl" in {p.name for p in home.iterdir()}  # counted in usage

        # No word in common with the entry: found by meaning, and said so.
        tg.dm(ANA, "/recall my puppy")
        found = (await answer(2)).text
        assert "labrador called Biscuit" in found and "close in meaning" in found
        assert embeddings.inputs("fake-query") == ["my puppy"]

        # A quoted phrase stays exact: no question embedded, no entry without it.
        tg.dm(ANA, '/recall "my puppy"')
        assert "No match" in (await answer(3)).text
        assert embeddings.inputs("fake-query") == ["my puppy"]

        # The endpoint killed: keyword results at once, the log says so once.
        await embeddings.stop()
        started = time.monotonic()
        tg.dm(ANA, "/recall garden puppy")
        down = (await answer(4)).text
        assert time.monotonic() - started < 2.5, "answered without waiting for the endpoint"
        assert "tomato seedlings" in down and "labrador" not in down
        await read_until(proc.stderr, "search ranks by keywords alone")
        await embeddings.start()

        # /forget: the entry's vector goes with it.
        tg.dm(ANA, "/forget Biscuit")
        await answer(5)
        tg.dm(ANA, "/forget confirm")
        assert "Forgotten" in (await answer(6)).text
        vectors = await embedded(history, "fake-passage", 4)
        assert sha(DOG) not in {record[0] for record in vectors.records}
        assert b"Biscuit" not in history.read_bytes()
    finally:
        await stopped(proc)

    # Another model: every entry embedded again with it, in the background.
    before = len(embeddings.inputs("fake-passage-2"))
    config = write_config(tmp_path, fake_llm, settings(tg, embeddings, "fake-passage-2"))
    proc = await start_run(config, child_env)
    try:
        assert proc.stderr is not None
        await read_until(proc.stderr, "telegram is ready")
        tg.dm(ANA, "/recall garden")
        assert "tomato seedlings" in (await answer(7)).text
        vectors = await embedded(history, "fake-passage-2", 4)
        assert len(embeddings.inputs("fake-passage-2")) - before == 4
    finally:
        await stopped(proc)


async def test_lightgrep_reindex_embeds_with_progress_and_says_when_it_cannot(
    fake_llm: FakeOpenAI, embeddings: FakeEmbeddings, tmp_path: Path, child_env: dict[str, str]
) -> None:
    home = tmp_path / "workspaces" / encode_key("telegram-7")
    home.mkdir(parents=True)
    history = home / "HISTORY.md"
    history.write_text("\n\n".join([DOG, *FILLER]) + "\n")
    config = write_config(
        tmp_path,
        fake_llm,
        "max_retries = 0\n"  # (of [llm], which write_config ends with; [search] follows it)
        f'[search]\nembeddings = true\nbase_url = "{embeddings.base_url}"\n'
        'model = "fake-passage"\nbatch_size = 2\n',
    )
    args = ("reindex", "--user", "telegram-7", "--config", str(config))
    code, out, err = await asyncio.to_thread(run_cli, child_env, *args)
    assert code == 0, err
    assert "telegram-7: 2/5 entries" in err and "telegram-7: 5/5 entries" in err
    assert "embedded 5 entries of 1 people with fake-passage" in out
    assert len(meaning.load(history).records) == 5  # type: ignore[union-attr]
    code, out, err = await asyncio.to_thread(run_cli, child_env, *args)
    assert code == 0 and "embedded 0 entries" in out, err  # nothing again

    await embeddings.stop()
    history.write_text(history.read_text() + "\n[2026-03-01 10:00] A new entry.\n")
    code, out, err = await asyncio.to_thread(run_cli, child_env, *args)
    assert code != 0 and "the embeddings endpoint failed: could not be reached" in err
