"""`lightgrep chat` with a streaming model: the answer shows as it is written, in a real
pseudo-terminal (rendered block by block) and through a pipe (exactly as written)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.rigs.cli import end_chat, run_chat, start_chat, write_config
from tests.rigs.fakes.openai_server import FakeOpenAI, Streamed, pieces_of

ANSWER = "The **first** paragraph.\n\nThe second paragraph.\n\nThe third and last paragraph."


async def test_the_first_paragraph_shows_while_the_rest_is_written(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.queue(Streamed(pieces_of(ANSWER), every_s=0.25))
    config = write_config(tmp_path, fake_llm)
    proc, terminal = await start_chat(config, child_env, "--user", "ada")
    try:
        await terminal.expect("you>")
        terminal.type("write three paragraphs\r")
        await terminal.expect("The first paragraph.")  # rendered: no **
        assert "last" not in terminal.seen, "the first paragraph should show before the end"
        await terminal.expect("The third and last paragraph.")
        await terminal.expect("you>")
        terminal.type("\x04")
    finally:
        assert await end_chat(proc, terminal) == 0
    assert fake_llm.streamed == 1


async def test_a_streamed_answer_through_a_pipe_is_exactly_the_answer_and_saved(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.queue(Streamed(pieces_of("  " + ANSWER + "\n\n"), every_s=0.01))
    config = write_config(tmp_path, fake_llm)
    code, out, err = await run_chat(config, child_env, b"hello\n", "--user", "ada")
    assert code == 0, err
    assert out == ANSWER + "\n\n"
    [session] = (tmp_path / "workspaces" / "cli-ada" / "sessions").iterdir()
    lines = [json.loads(line) for line in session.read_text().splitlines()]
    assert lines[-1]["role"] == "assistant" and lines[-1]["content"] == ANSWER
