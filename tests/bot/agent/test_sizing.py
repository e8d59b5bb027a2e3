"""The window follows the server when the config does not size it (issue 23): the server tells,
it does not (a known hosted model, or the default), or it is too small to run at all. An
explicit setting always wins. Driven through `lightgrep` itself: doctor in-process, chat as a
real process against a fake server that enforces its window as llama-cpp-python does."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.cli.common import sized
from bot.cli.core import build_core
from bot.cli.main import main
from bot.config import load_config
from tests.rigs.agent import ask, dm, make_agent
from tests.rigs.cli import run_chat
from tests.rigs.fakes.openai_server import (
    ContextLimited,
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)
from tests.rigs.fakes.telegram_server import TOKEN

WINDOWS = {
    "llama.cpp": ("props", lambda n: {"default_generation_settings": {"n_ctx": n}}),
    "vllm": ("max_model_len", lambda n: n),
    "ollama": ("ollama_show", lambda n: {"parameters": f"num_ctx {n}", "model_info": {}}),
}
SOURCES = {
    "llama.cpp": "llama.cpp /props n_ctx",
    "vllm": "vLLM /v1/models max_model_len",
    "ollama": "Ollama /api/show num_ctx",
}


pytestmark = pytest.mark.usefixtures("keep_logging")


def tells(fake: FakeOpenAI, server: str, tokens: int) -> None:
    """The fake reports `tokens` as its window the way `server` does."""
    name, value = WINDOWS[server]
    setattr(fake, name, value(tokens))


def config_file(folder: Path, fake: FakeOpenAI, extra: str = "", model: str = "fake-model") -> Path:
    """No window, answer or memory size set: all automatic."""
    path = folder / "config.toml"
    path.write_text(
        f'[llm]\nbase_url = "{fake.base_url}"\nmodel = "{model}"\napi_key = "k"\n{extra}'
        f'[memory]\nworkspaces_dir = "{folder / "workspaces"}"\n'
    )
    return path


async def doctor(config: Path, capsys: Any) -> tuple[int, str]:
    code = await asyncio.to_thread(main, ["doctor", "--config", str(config)])
    lines = capsys.readouterr().out.splitlines()
    return code, next(line for line in lines if "context window" in line)


def share(line: str, part: str) -> tuple[int, int]:
    """(tokens, percent) of one share in a doctor line: "conversation 1,266 (61 %)"."""
    found = re.search(rf"{part} ([\d,]+) \((\d+) %\)", line)
    assert found, line
    return int(found.group(1).replace(",", "")), int(found.group(2))


def chatty(request: dict[str, Any]) -> dict[str, Any]:
    """A small local model: a few words each turn, a save_memory that keeps the sections."""
    if is_consolidation(request):
        memory = "## User Information\n- Is called Ada\n\n## Preferences\n\n## Project Context\n"
        said = re.findall(r"tomato number (\d+)", json.dumps(request["messages"]))
        # (keeping a number said: an entry keeping none is refused, checks.keeps_said)
        entry = f"[2026-12-01 10:00] Ada talked about her garden, tomatoes {', '.join(said)}."
        return save_memory_call(entry, memory + "\n## Important Notes\n")
    return completion("That sounds lovely, tell me more about the garden. " * 3)


# ---- the server tells ---------------------------------------------------------------------------


@pytest.mark.parametrize("server", sorted(WINDOWS))
@pytest.mark.parametrize(("window", "conversation_at_least"), [(2048, 50), (4096, 60)])
async def test_the_servers_window_sizes_the_bot_with_room_for_the_conversation(
    fake_llm: FakeOpenAI,
    tmp_path: Path,
    clean_env: None,
    capsys: Any,
    server: str,
    window: int,
    conversation_at_least: int,
) -> None:
    tells(fake_llm, server, window)
    code, line = await doctor(config_file(tmp_path, fake_llm), capsys)
    assert code == 0 and line.startswith("OK"), line
    assert f"{window:,} tokens (told by the server, {SOURCES[server]})" in line
    assert share(line, "conversation")[1] >= conversation_at_least
    assert share(line, "answer")[0] == window // 8
    assert share(line, "memory")[0] == window // 10
    assert share(line, "fixed part")[0] * 8 <= window  # the lean form for a small window


async def test_a_chat_on_a_2048_server_answers_every_message(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """What issue 23 saw: the shipped defaults (an answer of 2,048, a quarter of the window for
    memory) with a small server refused every message as too long, or consolidated every turn.
    Sized from the server's /props, every message is answered and no request is over its
    window; /status shows the shares."""
    # llama.cpp's server (the one with /props), counting usage in streams too: llama-cpp-
    # python's streams report none, and its case is the next tests' (its window it names only
    # when refusing; until its whole answers are seen, the estimate borrows their ratio, which
    # under load was seen once to let a turn's request over the window: recovered, answered).
    limited = ContextLimited(2048, chatty, server="llama.cpp")
    fake_llm.default = limited
    fake_llm.props = {"default_generation_settings": {"n_ctx": 2048}}
    said = [f"In my garden I grew tomato number {i} and some basil today." for i in range(24)]
    stdin = ("\n".join(said) + "\n/status\n/quit\n").encode()

    code, out, err = await run_chat(config_file(tmp_path, fake_llm), child_env, stdin)

    assert code == 0, err
    assert limited.rejected == []
    assert "too long" not in out and "couldn't reach" not in out
    assert out.count("That sounds lovely") >= len(said) * 3
    turns = [r for r in fake_llm.chat_requests if not is_consolidation(r)]
    assert len(turns) >= len(said) and all(r["max_tokens"] == 256 for r in turns)
    assert fake_llm.consolidation_requests  # the window is small: it did consolidate
    assert len(fake_llm.consolidation_requests) < len(said) // 2  # but not every turn
    shares = re.search(
        r"Window 2,048 tokens \(told by the server, llama.cpp /props n_ctx\): "
        r"fixed part (\d+)%, memory 10%, conversation (\d+)%, answer 12%",
        out,
    )
    assert shares, out
    assert int(shares.group(2)) >= 50


# ---- the server does not tell -------------------------------------------------------------------


async def test_a_known_hosted_model_gets_its_documented_window_and_capped_shares(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys: Any
) -> None:
    """gpt-4o-mini's 128,000 tokens: the answer stays at 2,048 and MEMORY.md at 1,500 (a tenth
    would be 12,800 tokens on every request)."""
    config = config_file(tmp_path, fake_llm, model="gpt-4o-mini")
    code, line = await doctor(config, capsys)
    assert code == 0 and "128,000 tokens (known for gpt-4o-mini)" in line, line
    assert share(line, "answer")[0] == 2048 and share(line, "memory")[0] == 1500
    assert "prompt form full" in line
    assert "the server does not say its own window" in line


async def test_an_unknown_model_on_a_silent_server_gets_the_default(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys: Any
) -> None:
    code, line = await doctor(config_file(tmp_path, fake_llm), capsys)
    assert code == 0 and "65,536 tokens (the default" in line, line
    assert share(line, "answer")[0] == 2048 and share(line, "memory")[0] == 1500
    # The figure is a stand-in, said where it is given (issue 33: read as the server's own).
    learnt = "65,536 tokens (the default until the server names its own, when it first refuses"
    assert learnt in line and line.count("refuses") == 1, line


async def test_an_explicit_setting_wins_over_the_server(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys: Any
) -> None:
    tells(fake_llm, "llama.cpp", 8192)
    extra = "context_window_tokens = 3000\nmax_output_tokens = 100\n"
    path = config_file(tmp_path, fake_llm, extra)
    path.write_text(path.read_text() + "max_memory_tokens = 50\n")
    code, line = await doctor(path, capsys)
    assert code == 0, line
    assert "3,000 tokens (configured; the server's 8,192 (llama.cpp /props n_ctx))" in line
    assert share(line, "answer")[0] == 100 and share(line, "memory")[0] == 50

    config = load_config(path)
    agent = build_core(config, await sized(config), "chat").agent
    asked = len(fake_llm.chat_requests)  # (doctor's tiny request came before)
    await ask(agent, dm("42", "hello"))
    await agent.aclose()
    assert [r["max_tokens"] for r in fake_llm.chat_requests[asked:]] == [100]
    assert agent.consolidator.memory_budget == 50 and agent.window.tokens == 3000


# ---- too small ----------------------------------------------------------------------------------


async def test_a_window_too_small_for_one_turn_stops_chat_at_start(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.props = {"default_generation_settings": {"n_ctx": 256}}
    code, out, err = await run_chat(config_file(tmp_path, fake_llm), child_env, b"hello\n")
    assert code == 1 and out == ""
    (line,) = [text for text in err.splitlines() if text.startswith("lightgrep:")]
    assert "context window: 256 tokens (told by the server" in line and "cannot hold" in line
    assert "a bigger window on the server" in line
    assert fake_llm.chat_requests == []  # nothing was asked, nothing refused


async def test_the_issues_config_stops_run_at_start_with_the_fix(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys: Any
) -> None:
    """A window of 2,500 with max_output_tokens = 2048 (issue 23): `run` used to start, log a
    warning and answer every message with "too long". Now it does not start, and says what to
    change; doctor's line says the same."""
    extra = "context_window_tokens = 2500\nmax_output_tokens = 2048\n"
    path = config_file(tmp_path, fake_llm, extra)
    path.write_text(
        path.read_text() + f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
    )
    code = await asyncio.to_thread(main, ["run", "--config", str(path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "lightgrep: context window: 2,500 tokens (configured)" in err and "cannot hold" in err
    assert "a smaller [llm] max_output_tokens (or unset: automatic)" in err
    assert fake_llm.chat_requests == []
    code, line = await doctor(path, capsys)
    assert code == 1 and line.startswith("FAIL") and "smaller [llm] max_output_tokens" in line


@pytest.mark.parametrize("server", ["llama-cpp-python", "llama.cpp", "openai"])
async def test_a_server_that_names_its_window_only_when_refusing_sizes_the_bot_then(
    fake_llm: FakeOpenAI, workspaces_dir: Path, server: str
) -> None:
    """llama-cpp-python has no /props: its window shows only in its refusal of a request over
    it ("This model's maximum context length is 2048 tokens"). From then on the bot is sized
    to it (answer 256, MEMORY.md 204, the lean prompt), and every message is answered."""
    limited = ContextLimited(2048, chatty, server=server, tool_template=400)
    fake_llm.default = limited
    agent = make_agent(fake_llm, workspaces_dir, window=None, max_output_tokens=None)
    assert agent.window.tokens == 65536  # the server does not say, the model is not known
    replies = [
        (await ask(agent, dm("42", f"My tomato number {i} is red. " * 4))).text for i in range(16)
    ]
    await agent.aclose()

    assert all(text.startswith("That sounds lovely") for text in replies), replies
    window, memory = agent.window, agent.consolidator.memory_budget
    assert (window.tokens, window.budget.answer, memory) == (2048, 256, 204)
    assert agent.window.sizing.fixed * 8 <= 2048  # the lean prompt, as the server counts it
    # (not as it counted the full tools before: more than half is left to the conversation)
    assert agent.window.sizing.conversation * 2 >= 2048, agent.window.sizing.shares()
    # Only the first request asked for an answer of 2,048 (llama-cpp-python's empty stream is
    # asked again whole, for its reason); after it, 256, or a consolidation's memory + entry.
    big = [i for i, r in enumerate(fake_llm.chat_requests) if r["max_tokens"] > 404]
    assert big == ([0, 1] if server == "llama-cpp-python" else [0])
    assert all(fake_llm.chat_requests[i] in limited.rejected for i in big)


@pytest.mark.parametrize(("window", "over"), [(768, "the prompt"), (2048, "prompt + answer")])
async def test_chat_with_no_window_set_is_sized_from_the_first_refusal(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str], window: int, over: str
) -> None:
    """Issue 31: through `lightgrep chat` with no window configured, the CLI handed the agent
    a config with the assumed 65,536 filled in, which then counted as "configured": every
    refusal of llama-cpp-python (no /props; it names its window only when refusing) was
    ignored, "grown too long" came turn after turn, and /status said "65,536 tokens
    (configured)". Its first request is over the window by its prompt alone (768), or by the
    prompt plus the answer of 2,048 asked for (2048)."""
    limited = ContextLimited(window, chatty)
    fake_llm.default = limited
    said = [f"In my garden I grew tomato number {i} and some basil today." for i in range(8)]
    stdin = ("\n".join(said) + "\n/status\n/quit\n").encode()

    code, out, err = await run_chat(config_file(tmp_path, fake_llm), child_env, stdin)

    assert code == 0, err
    first = limited.rejected[1]  # the first turn's request, asked whole for its reason
    prompt = limited.prompt_tokens(first)
    assert (prompt > window) if over == "the prompt" else (prompt <= window < prompt + 2048)
    assert "too long" not in out and "couldn't reach" not in out, out
    assert out.count("That sounds lovely") == len(said) * 3, out
    named = f"Window {window:,} tokens (told by the server, named by the server refusing"
    assert named in out and "memory 10%" in out, out
    # Once sized, every request fits: only the first turn's (streamed, then whole) was refused.
    assert len(limited.rejected) == 2 and limited.rejected == fake_llm.chat_requests[:2]


async def test_a_consolidation_the_server_refuses_as_too_long_sizes_the_bot(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The conversation fitted the window the bot assumed, so only the filing (/new: all of it
    in one request) went over the server's: that refusal names the window too, and the rest is
    filed in requests that fit, not archived raw after three refusals."""
    limited = ContextLimited(1600, chatty, server="vllm")
    agent = make_agent(fake_llm, workspaces_dir, window=None, max_output_tokens=64)
    fake_llm.default = lambda request: completion("Nice.")  # the turns: short, all fit
    for i in range(20):
        await ask(agent, dm("42", f"My tomato number {i} is red and round and tasty. " * 6))
    assert agent.window.tokens == 65536
    fake_llm.default = limited
    await ask(agent, dm("42", "/new"))
    await agent.aclose()

    assert limited.rejected and agent.window.tokens == 1600
    history = (workspaces_dir / "telegram-42" / "HISTORY.md").read_text()
    assert "[RAW]" not in history and "garden" in history
