"""The reply port: the order of the core's calls, the privacy before any text, plain data only
(so the calls could cross a message broker), and the two implementations in the project."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapters.terminal.adapter import PrintedOutbound
from bot.agent.prompt import ContextBuilder
from bot.outbound import BufferedOutbound, Button, OutFile
from tests.rigs.agent import dm, make_agent
from tests.rigs.fakes.openai_server import FakeOpenAI, completion


class RecordingOutbound:
    """An adapter that writes down every call as JSON, the way a broker would carry it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def begin(self, *, private: bool = False) -> None:
        self.calls.append(json.dumps(["begin", private]))

    async def add_text(self, text: str) -> None:
        self.calls.append(json.dumps(["text", text]))

    async def attach_file(self, file: OutFile) -> None:
        data = None if file.data is None else file.data.hex()
        path = None if file.path is None else str(file.path)
        self.calls.append(json.dumps(["file", file.name, file.mime, data, path]))

    async def offer(self, buttons: tuple[Button, ...]) -> None:
        self.calls.append(json.dumps(["buttons", [[b.label, b.command] for b in buttons]]))

    async def finish(self) -> None:
        self.calls.append(json.dumps(["finish"]))

    def decoded(self) -> list[list[Any]]:
        return [json.loads(call) for call in self.calls]


@pytest.mark.parametrize(
    ("text", "private"),
    [
        ("hello there", False),
        ("/memory", True),
        ("/recall tea", True),
        ("/help", False),
        ("/status", False),
        ("/new", False),
        ("/frobnicate", False),
        ("   ", False),
    ],
)
async def test_every_answer_is_begin_then_text_then_finish_with_privacy_first(
    fake_llm: FakeOpenAI, workspaces_dir: Path, text: str, private: bool
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(completion("Hi!"))
    out = RecordingOutbound()
    await agent.handle(dm("42", text), out)
    await agent.aclose()
    calls = out.decoded()
    assert calls[0] == ["begin", private]
    assert calls[-1] == ["finish"]
    middle = calls[1:-1]
    assert middle and all(call[0] == "text" for call in middle)
    assert "".join(call[1] for call in middle).strip()


async def test_a_question_offers_its_buttons_after_the_text_as_plain_data(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    agent.workspaces.get("telegram-42").memory.write("## Notes\n- a fact\n")
    out = RecordingOutbound()
    await agent.handle(dm("42", "/wipe"), out)
    await agent.aclose()
    calls = out.decoded()
    assert [call[0] for call in calls] == ["begin", "text", "buttons", "finish"]
    assert calls[0] == ["begin", True] and "/wipe confirm" in calls[1][1]
    [erase, keep] = calls[2][1]
    assert erase[1].startswith("/wipe confirm ") and keep == ["Keep it", "/wipe cancel"]


async def test_nothing_to_send_is_still_begun_and_finished(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """A redelivered message whose answer a later message's turn gives: no text, but the
    adapter still learns the answer is over (to stop typing, to acknowledge)."""
    crashed = make_agent(fake_llm, workspaces_dir)
    workspace = crashed.workspaces.get("telegram-42")
    session = workspace.sessions.get("telegram:dm:42")
    for n, text in ((1, "first"), (2, "second")):
        message = ContextBuilder(tools=()).user_message(text) | {"message_id": f"42:{n}"}
        workspace.sessions.append(session, message)
    agent = make_agent(fake_llm, workspaces_dir)
    out = RecordingOutbound()
    await agent.handle(replace(dm("42", "first"), message_id="42:1"), out)
    await agent.aclose()
    assert out.decoded() == [["begin", False], ["finish"]]
    assert fake_llm.requests == []


async def test_a_failed_turn_is_not_finished(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    """The core raising means no finish: the adapter, not the port, says something went wrong."""
    not_a_folder = tmp_path / "workspaces"
    not_a_folder.write_text("a file where the workspaces folder should be")
    agent = make_agent(fake_llm, not_a_folder)
    out = RecordingOutbound()
    with pytest.raises(OSError):
        await agent.handle(dm("42", "hello"), out)
    await agent.aclose()
    assert ["finish"] not in out.decoded()


async def test_the_buffer_collects_the_whole_answer_once_finished() -> None:
    out = BufferedOutbound()
    await out.begin(private=True)
    await out.add_text("Hello, ")
    await out.attach_file(OutFile("notes.md", "text/markdown", data=b"# notes\n"))
    await out.add_text("world.")
    with pytest.raises(RuntimeError):
        _ = out.reply  # not finished: there is no answer to send yet
    await out.finish()
    assert out.reply.text == "Hello, world."
    assert out.reply.private
    assert [f.name for f in out.reply.files] == ["notes.md"]


def test_a_file_has_either_bytes_or_a_path(tmp_path: Path) -> None:
    assert OutFile("a.txt", "text/plain", data=b"a").data == b"a"
    assert OutFile("a.txt", "text/plain", path=tmp_path / "a.txt").path == tmp_path / "a.txt"
    with pytest.raises(ValueError):
        OutFile("a.txt", "text/plain")
    with pytest.raises(ValueError):
        OutFile("a.txt", "text/plain", data=b"a", path=tmp_path / "a.txt")


async def test_the_terminal_prints_text_as_it_comes(tmp_path: Path) -> None:
    screen = io.StringIO()
    out = PrintedOutbound(screen.write, tmp_path)
    await out.begin(private=True)
    await out.add_text("Hel")
    assert screen.getvalue() == "Hel"  # shown before the answer is complete
    await out.add_text("lo.")
    await out.attach_file(OutFile("notes.md", "text/markdown", data=b"x"))
    await out.finish()
    assert screen.getvalue().startswith("Hello.\n")
    # A file is saved where the person can open it, and its path is shown.
    assert str(tmp_path / "notes.md") in screen.getvalue() and screen.getvalue().endswith("\n\n")
    assert (tmp_path / "notes.md").read_bytes() == b"x"
