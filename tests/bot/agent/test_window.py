"""The context window held honestly, against fakes that behave like real servers at their limits:
they enforce a context length with the providers' own wordings, count tokens their own way,
copy the schema back, answer garbage, or put raw newlines into JSON strings."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.cli.main import main
from bot.llm.client import LLMClient
from memory.consolidation.consolidator import MemoryConsolidator
from memory.store import MEMORY_TEMPLATE
from memory.tokens import TokenEstimator
from memory.workspace import Workspace, Workspaces
from tests.rigs.agent import ask, dm, make_agent, session_records, user_home
from tests.rigs.fakes.openai_server import (
    CONTEXT_ERRORS,
    ContextLimited,
    FakeOpenAI,
    Status,
    completion,
    garbage_save,
    is_consolidation,
    raw_newline_call,
    save_memory_call,
    schema_echo,
    tool_call,
)
from tests.rigs.window import MIRO, message

OUTAGE = "couldn't reach my language model"


def chat_or_save(request: dict[str, Any]) -> dict[str, Any]:
    """A well-behaved model: chats in a few words, saves memory with every section kept."""
    if is_consolidation(request):
        return save_memory_call("[2026-11-29 10:00] Ada talked about her cat Miso.", MIRO)
    return completion("Tell me more! " + "blah " * 30)


def replies_ok(replies: list[str]) -> None:
    for text in replies:
        assert OUTAGE not in text and "too long" not in text, text


# -- 1. the answer shares the window -------------------------------------------------------------


async def test_no_turn_is_rejected_when_the_window_is_the_servers(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """context_window_tokens equal to the server's, as config.example.toml advises: the bot
    used to compare only the prompt with the window, and the server rejected prompt + answer."""
    server = ContextLimited(2000, chat_or_save)
    fake_llm.default = server
    agent = make_agent(fake_llm, workspaces_dir, window=2000, max_output_tokens=400)
    replies = [(await ask(agent, dm("42", message(i)))).text for i in range(16)]
    await agent.aclose()

    assert server.rejected == []
    replies_ok(replies)
    assert fake_llm.consolidation_requests, "consolidation never ran"
    assert all(r["max_tokens"] == 400 for r in fake_llm.chat_requests)


async def test_status_counts_the_answer_in_the_window(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir, window=4000, max_output_tokens=500)
    status = (await ask(agent, dm("42", "/status"))).text
    await agent.aclose()
    used = int(re.search(r"Context: ~([\d,]+) of 4,000", status).group(1).replace(",", ""))
    assert used > 500 and "500 of them kept for the answer" in status


# -- 5. recovering from a provider's context-length rejection ------------------------------------


@pytest.mark.parametrize("server", sorted(CONTEXT_ERRORS))
async def test_a_context_rejection_consolidates_and_the_turn_is_answered(
    fake_llm: FakeOpenAI, workspaces_dir: Path, server: str
) -> None:
    """The configured window is larger than the server's: the estimate says "fits", the server
    says no in its own words. The bot consolidates and retries, instead of telling the user
    it could not reach the model."""
    limited = ContextLimited(1500, chat_or_save, server=server)
    fake_llm.default = limited
    agent = make_agent(fake_llm, workspaces_dir, window=8000, max_output_tokens=200)
    replies = [(await ask(agent, dm("42", message(i)))).text for i in range(10)]
    await agent.aclose()

    assert limited.rejected, "the server never rejected: the test proves nothing"
    replies_ok(replies)
    assert all(text.startswith("Tell me more") for text in replies)
    assert "Miso" in (user_home(workspaces_dir, "42") / "HISTORY.md").read_text()


async def test_a_rejection_consolidation_cannot_fix_says_so_plainly(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Nothing to consolidate (the first message) and still too long for the server."""
    fake_llm.default = ContextLimited(300, chat_or_save, server="vllm")
    agent = make_agent(fake_llm, workspaces_dir, window=8000, max_output_tokens=200)
    reply = await ask(agent, dm("42", "Hello there, I'm Ada."))
    await agent.aclose()

    assert OUTAGE not in reply.text
    assert "too long" in reply.text and "/new" in reply.text and "saved" in reply.text
    users = [m for m in session_records(workspaces_dir, "42") if m.get("role") == "user"]
    assert len(users) == 1


async def test_the_agent_offers_its_tools_with_tool_choice_auto(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await ask(agent, dm("42", "hello"))
    await agent.aclose()
    (request,) = fake_llm.requests
    assert request["tools"] and request["tool_choice"] == "auto"


async def test_an_empty_answer_to_auto_is_asked_again_without_tools(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """llama-cpp-python's function-calling format with a small model answers "auto" with an
    empty message; with tool_choice "none" it answers in prose."""
    fake_llm.default = lambda req: completion(
        "" if req.get("tool_choice") == "auto" else "Hello Ada!"
    )
    agent = make_agent(fake_llm, workspaces_dir)
    reply = await ask(agent, dm("42", "Hi, I'm Ada."))
    await agent.aclose()
    assert reply.text == "Hello Ada!"
    assert [r["tool_choice"] for r in fake_llm.requests] == ["auto", "none"]


async def test_a_tool_calling_message_is_sent_back_with_string_content(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """llama-cpp-python's server answers HTTP 500 to an assistant message with null content."""
    call = raw_newline_call("search_history", {"query": "tea"})
    fake_llm.queue(call, completion("Nothing about tea yet."))
    agent = make_agent(fake_llm, workspaces_dir)
    await ask(agent, dm("42", "what did I say about tea?"))
    await agent.aclose()
    sent = fake_llm.requests[1]["messages"]
    assert all(isinstance(m.get("content"), str) for m in sent if m["role"] == "assistant")


async def test_a_short_message_is_never_refused_after_learning_a_large_offset(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """A server counting ~600 tokens more than we do on every prompt (its own tool template):
    that offset is the prompt's, not each message's."""
    fake_llm.default = ContextLimited(4000, chat_or_save)
    fake_llm.default.answer = lambda req: completion("Sure.", prompt_tokens=10)
    agent = make_agent(fake_llm, workspaces_dir, window=2048, max_output_tokens=256)
    for raw in (700, 760, 820, 900):
        agent.estimator.observe_usage(raw, raw + 600)
    reply = await ask(agent, dm("42", "What is my name?"))
    await agent.aclose()
    assert "too long" not in reply.text


# -- 3. consolidation requests fit ---------------------------------------------------------------


@pytest.fixture
def workspace(workspaces_dir: Path) -> Workspace:
    ws = Workspaces(workspaces_dir).get("telegram-42")
    ws.memory.write(MIRO)
    return ws


def add_turns(ws: Workspace, n: int, words: int = 40) -> Any:
    session = ws.sessions.get("telegram:dm:42")
    for i in range(n):
        ws.sessions.append(session, {"role": "user", "content": f"turn {i}: " + "alpha " * words})
        ws.sessions.append(session, {"role": "assistant", "content": "beta " * words})
    return session


def system_of(ws: Workspace) -> Any:
    return lambda: "You are a helpful assistant.\n\n" + ws.memory.prompt_section()


async def test_a_backlog_bigger_than_one_request_is_consolidated_in_rounds_that_fit(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    session = add_turns(workspace, 40)
    server = ContextLimited(1500, chat_or_save)
    fake_llm.default = server
    consolidator = MemoryConsolidator(
        llm, TokenEstimator(), 1500, answer_tokens=300, margin_tokens=75
    )

    rounds = await consolidator.maybe_consolidate(workspace, session, system_of(workspace))

    assert server.rejected == []  # every consolidation request fitted the server's window
    assert rounds >= 2 and session.last_consolidated > 0
    assert "[RAW]" not in workspace.history_path.read_text()
    assert all(r["max_tokens"] >= 300 for r in fake_llm.requests)


async def test_a_message_too_big_for_any_request_is_archived_raw_once_with_a_note(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    huge = "the whole novel " + "word " * 1500
    workspace.sessions.append(session, {"role": "user", "content": huge})
    workspace.sessions.append(session, {"role": "assistant", "content": "What a read."})
    workspace.sessions.append(session, {"role": "user", "content": "and now?"})
    fake_llm.default = ContextLimited(1500, chat_or_save)
    consolidator = MemoryConsolidator(
        llm, TokenEstimator(), 1500, answer_tokens=300, margin_tokens=75
    )

    await consolidator.maybe_consolidate(workspace, session, system_of(workspace))
    await consolidator.maybe_consolidate(workspace, session, system_of(workspace))

    history = workspace.history_path.read_text()
    assert history.count("[RAW] 1 messages") == 1 and "kept verbatim" in history
    assert "word word word" in history
    assert all("the whole novel" not in json.dumps(r) for r in fake_llm.requests)
    assert session.last_consolidated == 2


# -- 4. a reachable target -----------------------------------------------------------------------


async def test_with_a_big_fixed_part_recent_turns_stay_in_the_prompt(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The system prompt and tools are more than half the window: half the window is then an
    unreachable target, and every consolidation emptied the conversation down to the newest
    message. The target is the fixed part plus half of the rest."""
    fake_llm.default = chat_or_save
    agent = make_agent(fake_llm, workspaces_dir, window=1230, max_output_tokens=60)
    for i in range(14):
        await ask(agent, dm("42", f"thing {i}: " + "meow " * 25))
    await agent.aclose()

    assert fake_llm.consolidation_requests
    after = [
        r for r in fake_llm.chat_requests if r is not fake_llm.requests[0] and r["messages"]
    ]
    # Once consolidation has run, each turn still carries the earlier exchange.
    late = after[-3:]
    for request in late:
        users = [m for m in request["messages"] if m["role"] == "user"]
        assert len(users) >= 2, [m["content"][:40] for m in users]


# -- 6. checked before writing -------------------------------------------------------------------


@pytest.mark.parametrize("answer", [schema_echo, garbage_save], ids=["schema-echo", "garbage"])
async def test_an_echo_or_garbage_is_never_written(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace, answer: Any
) -> None:
    session = add_turns(workspace, 10)
    fake_llm.default = answer
    estimator = TokenEstimator()
    window = estimator.prompt_tokens(system_of(workspace)(), session) + 200
    consolidator = MemoryConsolidator(llm, estimator, window, answer_tokens=250)

    for _ in range(3):
        await consolidator.maybe_consolidate(workspace, session, system_of(workspace))

    assert workspace.memory.read() == MIRO  # untouched
    assert workspace.memory.versions() == []
    history = workspace.history_path.read_text()
    assert history.count("[RAW]") == 1  # three failures, then the chunk kept verbatim
    assert "][" not in history.replace("[RAW]", "") and "complete new MEMORY.md" not in history


async def test_a_memory_update_that_loses_most_facts_is_refused(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    facts = "".join(f"- fact {i}: likes thing {i}\n" for i in range(6))
    full = MEMORY_TEMPLATE.replace("Information\n", "Information\n" + facts)
    workspace.memory.write(full)
    session = add_turns(workspace, 10)
    shrunk = MEMORY_TEMPLATE.replace("Information\n", "Information\n- fact 0: likes thing 0\n")
    fake_llm.default = lambda req: save_memory_call("[2026-01-01 10:00] Chat.", shrunk)
    estimator = TokenEstimator()
    window = estimator.prompt_tokens(system_of(workspace)(), session) - 1
    consolidator = MemoryConsolidator(llm, estimator, window)

    assert await consolidator.maybe_consolidate(workspace, session, system_of(workspace)) == 0
    assert workspace.memory.read() == full
    assert consolidator.failures(workspace, session) == 1


async def test_raw_newlines_inside_json_strings_are_accepted(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace, workspaces_dir: Path
) -> None:
    session = add_turns(workspace, 10)
    memory = MIRO + "- Likes\tlong walks"
    fake_llm.default = lambda req: raw_newline_call(
        "save_memory",
        {"history_entry": "[2026-01-01 10:00] Walks.\nAnd cats.", "memory_update": memory},
    )
    estimator = TokenEstimator()
    window = estimator.prompt_tokens(system_of(workspace)(), session) - 1
    consolidator = MemoryConsolidator(llm, estimator, window)

    assert await consolidator.maybe_consolidate(workspace, session, system_of(workspace)) >= 1
    assert "- Likes\tlong walks" in workspace.memory.read()
    assert "Walks.\nAnd cats." in workspace.history_path.read_text()


async def test_raw_newlines_in_the_agents_tool_arguments_are_accepted(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(
        raw_newline_call(
            "edit_memory",
            {"action": "add", "section": "Preferences", "text": "Likes tea\nand cake"},
        ),
        completion("Noted."),
    )
    agent = make_agent(fake_llm, workspaces_dir)
    await ask(agent, dm("42", "I like tea and cake"))
    await agent.aclose()
    assert "Likes tea" in (user_home(workspaces_dir, "42") / "MEMORY.md").read_text()


# -- issue 9: one chunk, one entry ---------------------------------------------------------------


async def test_a_failed_memory_write_leaves_no_history_entry_to_repeat(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    """HISTORY.md appended, MEMORY.md write failed, retried: the entry was appended again."""
    session = add_turns(workspace, 10)
    workspace.history_path.write_text("")
    blocker = workspace.root / ".memory_versions"
    blocker.write_text("a file where the versions folder should be: MEMORY.md writes fail")
    memory = MIRO + "- Drinks green tea\n"

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        first = re.search(r"turn (\d+):", request["messages"][1]["content"]).group(1)
        return save_memory_call(f"[2026-01-01 10:00] Green tea talk from turn {first}.", memory)

    fake_llm.default = answer
    estimator = TokenEstimator()
    window = estimator.prompt_tokens(system_of(workspace)(), session) - 1
    consolidator = MemoryConsolidator(llm, estimator, window)

    assert await consolidator.maybe_consolidate(workspace, session, system_of(workspace)) == 0
    blocker.unlink()
    assert await consolidator.maybe_consolidate(workspace, session, system_of(workspace)) >= 1

    entries = re.findall(r"Green tea talk from turn \d+\.", workspace.history_path.read_text())
    assert entries and len(entries) == len(set(entries))  # one chunk, one entry
    assert "Drinks green tea" in workspace.memory.read()


# -- 2. the server's own window ------------------------------------------------------------------


def write_config(
    tmp_path: Path, fake: FakeOpenAI, window: int, answer: int = 256, memory: int = 0
) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[llm]\nbase_url = "{fake.base_url}"\nmodel = "fake-model"\napi_key = "k"\n'
        f"context_window_tokens = {window}\nmax_output_tokens = {answer}\n"
        f'[memory]\nworkspaces_dir = "{tmp_path / "ws"}"\nmax_memory_tokens = {memory}\n'
    )
    return path


async def doctor(config: Path, capsys: Any) -> tuple[int, str]:
    code = await asyncio.to_thread(main, ["doctor", "--config", str(config)])
    lines = capsys.readouterr().out.splitlines()
    return code, next(line for line in lines if "context window" in line)


@pytest.mark.parametrize(
    "server",
    [
        {"props": {"default_generation_settings": {"n_ctx": 2048}}},
        {"max_model_len": 2048},
        {"ollama_show": {"parameters": "num_ctx 2048\nstop <eos>", "model_info": {}}},
    ],
    ids=["llama.cpp", "vllm", "ollama"],
)
async def test_doctor_reports_the_servers_window_and_fails_when_configured_larger(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys: Any, server: dict[str, Any]
) -> None:
    for name, value in server.items():
        setattr(fake_llm, name, value)
    code, line = await doctor(write_config(tmp_path, fake_llm, 4096), capsys)
    assert code != 0 and line.startswith("FAIL") and "2,048" in line
    assert "context_window_tokens = 2048" in line
    code, line = await doctor(write_config(tmp_path, fake_llm, 2048), capsys)
    assert code == 0 and line.startswith("OK") and "the server's 2,048" in line


async def test_doctor_fails_when_the_window_cannot_hold_one_turn(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys: Any
) -> None:
    # (1,024 with an answer of 512 fits since the fixed part is lean for small windows.)
    code, line = await doctor(write_config(tmp_path, fake_llm, 1024, answer=900), capsys)
    assert code != 0 and line.startswith("FAIL") and "cannot hold" in line
    assert "smaller [llm] max_output_tokens" in line


async def test_doctor_counts_the_configured_memory_budget(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys: Any
) -> None:
    """A MEMORY.md allowed 3,500 tokens does not fit in 4,096 with the rest of a turn; one of
    100 tokens leaves room in 1,300 that a fixed 512 would not have."""
    code, line = await doctor(write_config(tmp_path, fake_llm, 4096, memory=3500), capsys)
    assert code != 0 and line.startswith("FAIL") and "cannot hold" in line
    assert "memory 3,500" in line and "smaller [memory] max_memory_tokens" in line
    code, line = await doctor(write_config(tmp_path, fake_llm, 4096), capsys)
    assert code == 0 and "memory 409 (10 %)" in line  # unset: a tenth of the window
    code, line = await doctor(write_config(tmp_path, fake_llm, 1300, memory=100), capsys)
    assert code == 0 and line.startswith("OK") and "memory 100 (" in line


async def test_ollama_without_num_ctx_is_flagged(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys: Any
) -> None:
    info = {"llama.context_length": 8192}
    fake_llm.ollama_show = {"parameters": "stop <eos>", "model_info": info}
    code, line = await doctor(write_config(tmp_path, fake_llm, 8192), capsys)
    assert code != 0 and "num_ctx" in line


async def test_outage_is_still_an_outage(fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    fake_llm.queue(Status(503, {"error": {"message": "overloaded"}}))
    agent = make_agent(fake_llm, workspaces_dir)
    reply = await ask(agent, dm("42", "hello"))
    await agent.aclose()
    assert OUTAGE in reply.text


async def test_tool_results_that_fill_the_window_are_answered_without_tools(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """A weak model (SmolLM2 on llama-cpp-python was seen to) calls search_history round after
    round, each result growing the prompt. Once the next round would not fit, it is asked
    without tools and answers from what it found: no request over the server's window and no
    "too long" for the person."""
    history = Workspaces(workspaces_dir).get("telegram-42").memory
    for i in range(40):
        history.append_history(
            f"[2026-11-{i % 28 + 1:02d} 10:00] Ada drank green tea number {i} "
            + "with honey and lemon in the garden " * 8
        )

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("tools"):
            turn = len(request["messages"])
            call = tool_call("search_history", {"query": "green tea"}, f"call_{turn}")
            return completion(None, [call])
        return completion("You drink a lot of green tea.")

    limited = ContextLimited(2220, answer)
    fake_llm.default = limited
    agent = make_agent(fake_llm, workspaces_dir, window=2220)
    reply = await ask(agent, dm("42", "What do I drink?"))
    await agent.aclose()

    assert reply.text == "You drink a lot of green tea."
    assert limited.rejected == []
    searches = [r for r in fake_llm.chat_requests if r.get("tools")]
    assert len(searches) >= 2, "the results never filled the window: the test proves nothing"
    assert "tools" not in fake_llm.chat_requests[-1]
