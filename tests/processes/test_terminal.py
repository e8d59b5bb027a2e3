"""`lightgrep chat` in a real pseudo-terminal, as a person uses it: the line editor, the spinner,
Markdown, Ctrl-C, the log file; and the same chat through a pipe, which must stay plain."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from tests.rigs.cli import end_chat, run_chat, run_cli, start_chat, write_config
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, Status, completion, is_consolidation

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"  # what a terminal sends around a paste
ESC_ENTER = "\x1b\r"
UP = "\x1b[A"


def user_texts(fake: FakeOpenAI) -> list[str]:
    """What the model was sent as the newest user message of each chat request."""
    texts = []
    for request in fake.chat_requests:
        if is_consolidation(request):
            continue
        newest = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
        texts.append(newest.split("\n", 1)[1])  # after the "[Current time: …]" line
    return texts


def session_lines(workspaces: Path, user: str) -> list[dict]:
    [path] = (workspaces / user / "sessions").iterdir()
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_pastes_new_lines_markdown_and_history_across_runs(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str], private_home: Path
) -> None:
    fake_llm.default = lambda request: completion("Here is **bold** and `code`.")
    config = write_config(tmp_path, fake_llm)
    long_line = " ".join(f"{n:05d}" for n in range(850))  # 5,099 characters, no line break
    proc, terminal = await start_chat(config, child_env, "--user", "ada")
    try:
        await terminal.expect("you>")
        terminal.type(f"{PASTE_START}{long_line}{PASTE_END}\r")
        await terminal.expect("Here is bold and code.")  # rendered: no ** and no backticks
        assert "\x1b[1m" in terminal.raw.decode()  # bold, as the terminal shows it
        await terminal.expect("you>")
        terminal.type(f"{PASTE_START}first line\r\nsecond line\r\nthird{PASTE_END}\r")
        await terminal.expect("Here is bold")
        await terminal.expect("you>")
        terminal.type(f"typed one{ESC_ENTER}typed two\r")
        await terminal.expect("Here is bold")
        await terminal.expect("you>")
        terminal.type("\x04")
    finally:
        assert await end_chat(proc, terminal) == 0
    assert user_texts(fake_llm) == [
        long_line,  # whole: no 4,095-character line limit
        "first line\nsecond line\nthird",  # a pasted block is one message
        "typed one\ntyped two",
    ]
    # The input history is the user's own private file in the data folder.
    [history] = (private_home / ".local/share/lightgrep/terminal-history").iterdir()
    assert history.name == "cli-ada.txt"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600

    proc, terminal = await start_chat(config, child_env, "--user", "ada")
    try:
        await terminal.expect("you>")
        terminal.type(UP)  # the last message of the previous run
        await terminal.expect("typed two")
        terminal.type("\r")
        await terminal.expect("Here is bold")
        await terminal.expect("you>")
        terminal.type("\x04")
    finally:
        assert await end_chat(proc, terminal) == 0
    assert user_texts(fake_llm)[-1] == "typed one\ntyped two"


async def test_thinking_then_ctrl_c_cancels_the_answer_and_ctrl_c_again_leaves(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str], private_home: Path
) -> None:
    fake_llm.queue(Delay(30, completion("too late")), completion("Second answer."))
    config = write_config(tmp_path, fake_llm)
    proc, terminal = await start_chat(config, child_env, "--user", "bob")
    try:
        await terminal.expect("you>")
        terminal.type("a slow question\r")
        await terminal.expect("thinking…")  # a sign of life while the model thinks
        await fake_llm.wait_requests(1)  # the model has the question
        terminal.type("\x03")  # Ctrl-C while the answer is under way
        await terminal.expect("Your message is saved; the unfinished answer was not kept.")
        await terminal.expect("you>")  # back at the prompt: the chat goes on
        terminal.type("and now?\r")
        await terminal.expect("Second answer.")
        await terminal.expect("you>")
        terminal.type("half a thought\x03")  # Ctrl-C with text typed: drops the text…
        terminal.type("\x03")  # …and at an empty prompt: leaves
    finally:
        assert await end_chat(proc, terminal) == 0
    assert "too late" not in terminal.seen
    records = [r for r in session_lines(tmp_path / "workspaces", "cli-bob") if "role" in r]
    contents = [(r["role"], r["content"].split("\n")[-1]) for r in records]
    assert contents == [
        ("user", "a slow question"),  # saved, without an answer
        ("user", "and now?"),
        ("assistant", "Second answer."),
    ]
    assert len(user_texts(fake_llm)) == 2  # "half a thought" was never sent


async def test_logs_go_to_the_log_file_and_consolidation_is_announced(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str], private_home: Path
) -> None:
    def answer(request: dict) -> object:
        if is_consolidation(request):
            return Delay(0.5, Status(500, {"error": {"message": "consolidation is down"}}))
        return completion("tea " * 1000)

    fake_llm.default = answer
    fake_llm.queue(Status(400, {"error": {"message": "the model is unhappy"}}))
    settings = "context_window_tokens = 1000\nmax_output_tokens = 100\nmax_retries = 0\n"
    config = write_config(tmp_path, fake_llm, settings)
    proc, terminal = await start_chat(config, child_env, "--user", "cy")
    try:
        await terminal.expect("you>")
        terminal.type("hello\r")
        await terminal.expect("refused that request")  # a 400 is not an outage
        await terminal.expect("you>")
        terminal.type("tell me about tea\r")
        await terminal.expect("tea tea")
        await terminal.expect("filing older messages into your memory")
        await terminal.expect("you>")
        terminal.type("\x04")
    finally:
        assert await end_chat(proc, terminal) == 0
    shown = terminal.seen + terminal.raw.decode(errors="replace")
    assert "WARNING" not in shown and "INFO" not in shown  # no log lines in the conversation
    log = (private_home / ".local/share/lightgrep/chat.log").read_text()
    assert "LLM call failed" in log and "WARNING" in log
    assert "log in " in shown  # the start line says where the log is


async def test_the_spinner_and_markdown_stay_out_of_a_pipe(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.queue(Delay(0.3, completion("Here is **bold**.")))
    config = write_config(tmp_path, fake_llm)
    code, out, err = await run_chat(config, child_env, b"hello\n")
    assert code == 0, err
    assert out == "Here is **bold**.\n\n"  # exactly the answer, as written
    assert "lightgrep" in err or "memory in" in err  # where memory is, on stderr


async def test_a_non_ascii_user_name_round_trips(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.queue(completion("Hola José."))
    config = write_config(tmp_path, fake_llm)
    code, out, err = await run_chat(config, child_env, b"/status\nhola\n", "--user", "José")
    assert code == 0 and "Hola José." in out, err
    homes = [p.name for p in (tmp_path / "workspaces").iterdir() if p.is_dir()]
    assert homes == ["cli-Jos%C3%A9"]  # the key cli-José, encoded once for the file system
    code, _, err = run_cli(child_env, "memory", "--config", str(config), "cli-José")
    assert code == 0 and "nothing remembered about cli-José" in err
    nfd = "cli-Jose\u0301"  # the same name as a Mac keyboard spells it
    code, _, err = run_cli(child_env, "memory", "--config", str(config), nfd)
    assert code == 0, err
