"""The `lightgrep` command as a person uses it: chat as a real process (pipe and pseudo-terminal)
against the fake OpenAI server; operator commands and doctor in-process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.main import main
from memory.folder_lock import FolderLock
from memory.workspace import Workspaces
from tests.rigs.cli import (
    STEP_TIMEOUT,
    closed_port_url,
    end_chat,
    read_until,
    run_chat,
    run_cli,
    start_chat,
    start_run,
    stopped,
    telegram_config,
    without_write_override,
    write_config,
)
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.embeddings_server import FakeEmbeddings
from tests.rigs.fakes.openai_server import (
    Delay,
    FakeOpenAI,
    Status,
    completion,
    is_consolidation,
    save_memory_call,
    tool_call,
)
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram
from tests.rigs.mcp import stdio_entry

pytestmark = pytest.mark.usefixtures("keep_logging")


# ---- lightgrep chat, as a real process ----------------------------------------------------------


async def test_chat_over_a_pipe_turn_memory_and_quit(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    remember = {"action": "add", "section": "Preferences", "text": "Likes green tea"}
    fake_llm.queue(
        completion(None, [tool_call("edit_memory", remember)]),
        completion("Noted: you like green tea."),
    )
    config = write_config(tmp_path, fake_llm)
    stdin = b"I like green tea\n\n   \n/memory\n/quit\nthis is never sent\n"

    code, out, err = await run_chat(config, child_env, stdin)

    assert code == 0, err
    assert "Noted: you like green tea." in out
    assert "Likes green tea" in out  # /memory shows what the tool wrote
    assert "you>" not in out  # no prompt when stdin is not a terminal
    assert len(fake_llm.chat_requests) == 2  # the turn and its tool round; nothing after /quit
    workspace = tmp_path / "workspaces" / "cli-tester"
    assert "Likes green tea" in (workspace / "MEMORY.md").read_text()
    [session_file] = (workspace / "sessions").iterdir()
    lines = [json.loads(line) for line in session_file.read_text().splitlines()]
    assert lines[0]["key"] == "cli:local:tester"
    roles = [m["role"] for m in lines[1:] if "role" in m]
    assert roles == ["user", "assistant", "tool", "assistant"]
    system = fake_llm.chat_requests[0]["messages"][0]["content"]
    assert "cli" in system.lower()


async def test_chat_waits_for_consolidation_before_exiting(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    def answer(request: dict) -> object:
        if is_consolidation(request):
            entry = "[2026-01-01 10:00] Talked about tea."
            return Delay(0.8, save_memory_call(entry, "## Preferences\n- Likes tea."))
        return completion("ok")

    fake_llm.default = answer
    # An answer that leaves the next prompt over the window (with the lean fixed part of a
    # 1,500-token window), so a consolidation is pending when the person leaves.
    fake_llm.queue(completion("ok"), completion("tea " * 1400))
    settings = "context_window_tokens = 1500\nmax_output_tokens = 100\n"
    config = write_config(tmp_path, fake_llm, settings)

    code, _, err = await run_chat(config, child_env, b"hi\ntell me about tea\n/quit\n")

    assert code == 0, err
    assert "finishing memory consolidation" in err
    workspace = tmp_path / "workspaces" / "cli-tester"
    assert "- Likes tea." in (workspace / "MEMORY.md").read_text()
    assert "Talked about tea." in (workspace / "HISTORY.md").read_text()


async def test_chat_in_a_terminal_prompt_turn_memory_and_ctrl_d(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.queue(completion("Hello Alice, nice to meet you."))
    config = write_config(tmp_path, fake_llm)
    proc, terminal = await start_chat(config, child_env, "--user", "alice")
    try:
        # The line editor draws "you> " with a cursor move after "you>", not a typed space.
        banner = await terminal.expect("you>")
        assert "cli-alice" in banner and "/quit" in banner
        terminal.type("Hi, I'm Alice\r")
        await terminal.expect("Hello Alice, nice to meet you.")
        await terminal.expect("you>")
        terminal.type("/memory\r")
        await terminal.expect("I don't remember anything about you yet.")
        await terminal.expect("you>")
        terminal.type("\x04")  # Ctrl-D
    finally:
        code = await end_chat(proc, terminal)
    assert code == 0
    assert len(fake_llm.chat_requests) == 1
    assert (tmp_path / "workspaces" / "cli-alice" / "sessions").is_dir()


async def test_chat_with_a_bad_config_is_one_line(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    config = write_config(tmp_path, closed_port_url(), 'context_window_tokens = "big"\n')
    code, _, err = await run_chat(config, child_env, b"hello\n")
    assert code == 2
    assert err.strip().splitlines() == [
        f"lightgrep: {config}: [llm] context_window_tokens must be a positive integer, got 'big'"
    ]


# ---- lightgrep run, as a real process ---------------------------------------------------------


async def test_run_serves_telegram_until_sigterm(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.queue(completion("Hello from LightGrep."))
    proc = await start_run(telegram_config(tmp_path, fake_llm, fake_telegram, TOKEN), child_env)
    try:
        assert proc.stderr is not None
        startup = await read_until(proc.stderr, "telegram is ready")
        assert "connecting to model fake-model" in startup and "starting telegram" in startup
        fake_telegram.dm(42, "hi")
        [sent] = await fake_telegram.wait_sent(42, wait_s=STEP_TIMEOUT)
        assert "Hello from LightGrep." in sent.text
        proc.terminate()
        await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
        rest = (await proc.stderr.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, rest
    assert "stopped" in rest
    assert TOKEN not in startup + rest


async def test_run_serves_telegram_and_discord_in_one_process(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    discord_fake = await FakeDiscord().start()
    config = telegram_config(tmp_path, fake_llm, fake_telegram, TOKEN)
    with config.open("a") as extra:
        extra.write(
            f'[discord]\nenabled = true\ntoken = "{discord_fake.token}"\nallow_from = ["*"]\n'
            f'api_base = "{discord_fake.api_base}"\ngateway_url = "{discord_fake.gateway_url}"\n'
        )
    fake_llm.default = lambda request: completion("Hello from one core.")
    proc = await start_run(config, child_env)
    try:
        assert proc.stderr is not None
        seen = ""
        while not ("telegram is ready" in seen and "discord is ready" in seen):
            seen += await read_until(proc.stderr, "is ready")
        fake_telegram.dm(42, "hi from telegram")
        # The answer streams: a person reads the message once its last edit has landed.
        await fake_telegram.wait_until(
            lambda: [m.text for m in fake_telegram.sent_to(42)] == ["Hello from one core."],
            wait_s=STEP_TIMEOUT,
        )
        dm = discord_fake.message(user_payload(77, "bea"), "hi from discord", channel_id=555)
        await discord_fake.dispatch("MESSAGE_CREATE", dm)
        await discord_fake.wait_until(
            lambda: discord_fake.seen_in(555) == ["Hello from one core."], within=STEP_TIMEOUT
        )
        proc.terminate()
        await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await discord_fake.stop()
    assert proc.returncode == 0
    homes = sorted(p.name for p in (tmp_path / "workspaces").iterdir() if p.is_dir())
    assert homes == ["discord-77", "telegram-42"]


async def test_a_second_bot_on_the_same_workspaces_folder_refuses_to_start(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    config = telegram_config(tmp_path, fake_llm, fake_telegram, TOKEN)
    first = await start_run(config, child_env)
    try:
        assert first.stderr is not None
        await read_until(first.stderr, "telegram is ready")
        second = await start_run(config, child_env)
        _, err = await asyncio.wait_for(second.communicate(), STEP_TIMEOUT)
        chat_code, _, chat_err = await run_chat(config, child_env, b"hello\n")
        assert first.returncode is None  # the first bot is still serving
    finally:
        first.terminate()
        await asyncio.wait_for(first.wait(), STEP_TIMEOUT)
    text = err.decode()
    assert second.returncode == 1, text
    [last] = [line for line in text.splitlines() if line.startswith("lightgrep:")]
    assert "workspaces" in last and str(first.pid) in last and "Traceback" not in text
    assert chat_code == 1 and "lightgrep:" in chat_err and fake_llm.requests == []


async def test_run_with_a_rejected_token_is_one_line(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    wrong = "999:WRONG-token"
    proc = await start_run(telegram_config(tmp_path, fake_llm, fake_telegram, wrong), child_env)
    _, err = await asyncio.wait_for(proc.communicate(), STEP_TIMEOUT)
    text = err.decode()
    assert proc.returncode == 1, text
    [last] = [line for line in text.splitlines() if line.startswith("lightgrep:")]
    assert "telegram" in last.lower()
    assert "Traceback" not in text and wrong not in text


# ---- the other commands, in-process (no event loop of the test is needed) -----------------------


def test_run_with_no_platform_enabled(tmp_path: Path, clean_env: None, capsys) -> None:
    config = write_config(tmp_path, closed_port_url())
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "no platform is enabled" in err
    assert "set enabled = true under [" in err and "[telegram]" in err and "[discord]" in err
    assert "Traceback" not in err


def test_run_with_an_enabled_platform_missing_its_token(
    tmp_path: Path, clean_env: None, capsys
) -> None:
    config = write_config(tmp_path, closed_port_url(), "[discord]\nenabled = true\n")
    assert main(["run", "--config", str(config)]) == 2
    assert "[discord] is enabled but token is missing" in capsys.readouterr().err


def test_chat_without_an_api_key_says_what_to_set(
    tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)  # no config.toml here: defaults, the OpenAI API
    assert main(["chat"]) == 2
    err = capsys.readouterr().err
    assert "set OPENAI_API_KEY, or [llm] base_url" in err
    assert main(["doctor"]) == 1
    assert "FAIL  endpoint: no API key" in capsys.readouterr().out


def test_missing_config_file(tmp_path: Path, clean_env: None, capsys) -> None:
    assert main(["doctor", "--config", str(tmp_path / "nope.toml")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL  config: ") and "no such config file" in out


async def test_doctor_against_a_working_endpoint(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys
) -> None:
    config = write_config(tmp_path, fake_llm)
    code = await asyncio.to_thread(main, ["doctor", "--config", str(config)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    assert [line.split(":")[0] for line in out] == [
        "OK    config",
        "OK    workspaces",
        "OK    endpoint",
        "OK    context window",
        "OK    token counter",
    ]
    assert "fake-model" in out[2] and " ms" in out[2]
    assert len(fake_llm.requests) == 1


async def test_doctor_says_read_page_needs_its_extra(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys, monkeypatch
) -> None:
    """read_page on, its HTML reader not installed (the default image): a FAIL naming the
    install; installed, an OK line; read_page off, no line."""
    config = write_config(tmp_path, fake_llm, "[tools]\nread_page = true\n")
    assert await asyncio.to_thread(main, ["doctor", "--config", str(config)]) == 0
    assert "OK    read_page: reads HTML pages" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "trafilatura", None)  # as if not installed
    assert await asyncio.to_thread(main, ["doctor", "--config", str(config)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "FAIL  read_page: on in [tools], but HTML pages cannot be read without the read-page "
        "extra: pip install 'lightgrep[read-page]', or an image built with --build-arg "
        "EXTRAS=read-page"
    )
    plain = write_config(tmp_path, fake_llm)
    assert await asyncio.to_thread(main, ["doctor", "--config", str(plain)]) == 0
    assert "read_page:" not in capsys.readouterr().out


async def test_doctor_checks_each_endpoint_of_the_chains(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys
) -> None:
    """A fallback that cannot be reached fails its own line; the memory endpoint answers."""
    url = closed_port_url()
    extra = (
        f'[[llm.fallback]]\nbase_url = "{url}"\nmodel = "small"\n'
        f'[[consolidation.endpoints]]\nbase_url = "{fake_llm.base_url}"\nmodel = "careful"\n'
    )
    config = write_config(tmp_path, fake_llm, extra)
    assert await asyncio.to_thread(main, ["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  fallback 1: {url}: the model provider could not be reached" in out
    assert f"OK    memory endpoint 1: {fake_llm.base_url} answered with model careful" in out
    assert [r["model"] for r in fake_llm.requests] == ["fake-model", "careful"]


async def test_doctor_starts_each_mcp_server_and_names_what_it_offers(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys
) -> None:
    """A working server: the allowed tools it offers; an allowed tool it does not list, and a
    command that starts no server (with why), each a FAIL on the server's own line (before:
    doctor said nothing of MCP, and a broken server was found only in the bot's log)."""
    servers = (
        stdio_entry("notes", ["lookup", "whoami"])
        + stdio_entry("typo", ["lookup", "lokup"])
        + '[[mcp.servers]]\nname = "gone"\ncommand = "/nonexistent/mcp-server"\ntools = ["x"]\n'
    )
    config = write_config(tmp_path, fake_llm, servers)
    assert await asyncio.to_thread(main, ["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == [
        "OK    MCP notes: offers notes_lookup, notes_whoami",
        "FAIL  MCP typo: offers typo_lookup; not listed by the server: lokup",
        "FAIL  MCP gone: not connected: FileNotFoundError: [Errno 2] No such file or "
        "directory: '/nonexistent/mcp-server' (docs/mcp.md)",
    ]


async def test_doctor_asks_the_embeddings_endpoint(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys
) -> None:
    """[search] embeddings on: a line saying the endpoint embedded a question (model, size),
    or a FAIL naming it when it cannot be reached (before: nothing, and searches quietly ranked
    by keywords alone)."""
    server = await FakeEmbeddings().start()
    try:
        on = f'[search]\nembeddings = true\nbase_url = "{server.base_url}"\nmodel = "e5"\n'
        config = write_config(tmp_path, fake_llm, on)
        assert await asyncio.to_thread(main, ["doctor", "--config", str(config)]) == 0
        line = capsys.readouterr().out.splitlines()[-1]
        assert line.startswith(f"OK    embeddings: {server.base_url} embedded a question with e5 "
                               "(64 dimensions) in "), line  # fmt: skip
        assert server.inputs("e5") == ["is the endpoint there?"]
    finally:
        await server.stop()
    assert await asyncio.to_thread(main, ["doctor", "--config", str(config)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"FAIL  embeddings: {server.base_url}: could not be reached (searches rank by keywords "
        "alone meanwhile; docs/recall.md)"
    )


def test_doctor_against_a_closed_port(tmp_path: Path, clean_env: None, capsys) -> None:
    url = closed_port_url()
    config = write_config(tmp_path, url)
    assert main(["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  endpoint: {url}: the model provider could not be reached" in out
    assert "OK    token counter" in out


def test_doctor_never_prints_the_api_key(tmp_path: Path, clean_env: None, capsys) -> None:
    config = write_config(tmp_path, closed_port_url(), 'api_key = "sk-VERY-SECRET"\n')
    main(["doctor", "--verbose", "--config", str(config)])
    captured = capsys.readouterr()
    assert "VERY-SECRET" not in captured.out + captured.err


async def test_doctor_never_prints_a_token_quoted_by_the_provider(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, capsys
) -> None:
    """A 400 quoting the request's Authorization header: the reason stays, the token does not."""
    leaked = "sk-proj-QUOTED-BY-PROVIDER-7788"
    message = f"Invalid header 'Authorization: Bearer {leaked}' for model fake-model"
    fake_llm.queue(Status(400, {"error": {"message": message}}))
    config = write_config(tmp_path, fake_llm, 'api_key = "sk-CONFIGURED-KEY-1"\n')
    code = await asyncio.to_thread(main, ["doctor", "--verbose", "--config", str(config)])
    captured = capsys.readouterr()
    assert code == 1
    assert leaked not in captured.out + captured.err and "QUOTED" not in captured.out
    assert "CONFIGURED-KEY" not in captured.out + captured.err
    assert "FAIL  endpoint" in captured.out and "Bearer ***" in captured.out


@pytest.fixture
def known_user(tmp_path: Path) -> Path:
    workspace = Workspaces(tmp_path / "workspaces").get("telegram-42")
    workspace.memory.write("## Preferences\n- Likes green tea\n")
    workspace.memory.append_history("[2026-01-02 09:00] Talked about green tea and Kyoto.")
    workspace.memory.append_history("[2026-01-03 09:00] Planned a bike trip.")
    return write_config(tmp_path, closed_port_url())


def test_memory_prints_memory_md(known_user: Path, clean_env: None, capsys) -> None:
    assert main(["memory", "--config", str(known_user), "telegram-42"]) == 0
    assert capsys.readouterr().out == "## Preferences\n- Likes green tea\n"


def test_recall_prints_ranked_entries(known_user: Path, clean_env: None, capsys) -> None:
    assert main(["recall", "--config", str(known_user), "telegram-42", "green", "tea"]) == 0
    out = capsys.readouterr().out
    assert "Kyoto" in out and "bike" not in out
    assert "**green**" in out and "2026-01-02" in out
    assert main(["recall", "--config", str(known_user), "telegram-42", "submarine"]) == 0
    assert "No match" in capsys.readouterr().out


def test_operator_views_of_an_unknown_user(
    known_user: Path, tmp_path: Path, clean_env: None, capsys
) -> None:
    assert main(["memory", "--config", str(known_user), "telegram-24"]) == 1
    err = capsys.readouterr().err
    assert "no workspace for user 'telegram-24'" in err and "telegram-42" in err
    assert not (tmp_path / "workspaces" / "telegram-24").exists()


# ---- operator views beside a live bot: they read, never write ---------------------------------


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry below `folder`: a file's bytes, None for a folder."""
    return {
        str(path.relative_to(folder)): None if path.is_dir() else path.read_bytes()
        for path in sorted(folder.rglob("*"))
    }


def operator_views(known_user: Path, env: dict[str, str], read_only: bool = False) -> None:
    code, out, err = run_cli(env, "memory", "--config", str(known_user), "telegram-42",
                             read_only=read_only)  # fmt: skip
    assert (code, out) == (0, "## Preferences\n- Likes green tea\n"), err
    code, out, err = run_cli(env, "recall", "--config", str(known_user), "telegram-42", "tea",
                             read_only=read_only)  # fmt: skip
    assert code == 0 and "Kyoto" in out, err


def test_memory_and_recall_beside_a_live_bot_leave_its_files_alone(
    known_user: Path, tmp_path: Path, child_env: dict[str, str]
) -> None:
    base = tmp_path / "workspaces"
    workspace = Workspaces(base).get("telegram-42")
    session = workspace.sessions.get("telegram:dm:42")
    workspace.sessions.append(session, {"role": "user", "content": "hello"})
    with FolderLock(base):  # the bot is running…
        in_flight = workspace.root / ".MEMORY.md.k2j4h1.tmp"
        in_flight.write_text("## Preferences\n- Likes green tea\n- Visi")  # …and writing MEMORY.md
        before = snapshot(base)
        operator_views(known_user, child_env)
        assert in_flight.exists(), "an operator command deleted the bot's temp file"
        assert snapshot(base) == before


def test_memory_and_recall_work_on_a_read_only_folder(
    known_user: Path, tmp_path: Path, child_env: dict[str, str]
) -> None:
    base = tmp_path / "workspaces"
    (Workspaces(base).get("telegram-42").root / ".MEMORY.md.k2j4h1.tmp").write_text("- Visi")
    entries = [base, *base.rglob("*")]
    for path in entries:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        probe = f"open({str(base / 'probe')!r}, 'w')"
        refused = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, preexec_fn=without_write_override
        )
        assert b"PermissionError" in refused.stderr, "the folder is not read-only for the child"
        before = snapshot(base)
        operator_views(known_user, child_env, read_only=True)
        assert snapshot(base) == before
    finally:
        for path in entries:
            path.chmod(path.stat().st_mode | 0o200)


# ---- the CLI as a good Unix tool ------------------------------------------------------------


def test_version_and_global_options_before_the_command(
    known_user: Path, clean_env: None, capsys
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("lightgrep ")
    assert main(["--config", str(known_user), "memory", "telegram-42"]) == 0
    assert main(["-v", "--config", str(known_user), "recall", "telegram-42", "tea"]) == 0
    assert "Kyoto" in capsys.readouterr().out


def test_memory_and_recall_import_no_client_library(
    known_user: Path, child_env: dict[str, str]
) -> None:
    """They only read files: the agent, openai and the platforms' libraries stay unloaded, and
    `memory`, which needs no event loop, loads no asyncio either (bench/cli_startup.py measures
    what that is worth)."""
    clients = ("bot.agent.agent", "openai", "telegram", "discord", "tiktoken", "prompt_toolkit")
    clients += ("rich",)
    for command, heavy in (
        (["memory", "telegram-42"], (*clients, "asyncio", "adapters.terminal.adapter")),
        (["recall", "telegram-42", "tea"], clients),
    ):
        script = (
            "import sys\nfrom bot.cli.main import main\n"
            f"code = main({['--config', str(known_user), *command]!r})\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} | set(sys.modules)))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, env=child_env, timeout=30
        )
        assert proc.returncode == 0, proc.stderr.decode()
        loaded = set(eval(proc.stdout.decode().splitlines()[-1]))  # our own printed list
        assert not loaded & set(heavy), loaded & set(heavy)


def test_recall_into_a_closed_pipe_exits_quietly(
    known_user: Path, child_env: dict[str, str]
) -> None:
    """`lightgrep recall … | head`: the reader is gone before the answer is written."""
    read, write = os.pipe()
    os.close(read)  # like head after its lines
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "recall", "--config", str(known_user), "telegram-42",
         "tea"],
        stdout=write, stderr=subprocess.PIPE, env=child_env, timeout=STEP_TIMEOUT,
    )  # fmt: skip
    os.close(write)
    assert proc.stderr.decode() == ""
    assert proc.returncode == 141  # what a shell reports for a tool whose reader left


def test_python_m_bot_cli_reports_a_mistake_in_one_line(
    known_user: Path, child_env: dict[str, str]
) -> None:
    """`python -m bot.cli` (how the benches and some tests start it) once ran the CLI's module as
    __main__, a second copy whose main did not catch the operator commands' UserError: a
    traceback instead of the one line. bot/cli/__main__.py now runs the one bot.cli.main."""
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "forget", "--config", str(known_user), "telegram-42",
         ""],
        capture_output=True, env=child_env, timeout=STEP_TIMEOUT,
    )  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert err.startswith("lightgrep: Tell me what to forget")


def test_recall_with_a_bad_regex_or_page_exits_non_zero(
    known_user: Path, clean_env: None, capsys
) -> None:
    assert main(["recall", "--config", str(known_user), "telegram-42", "--regex", "([a-"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lightgrep: can't search for that:") and "Traceback" not in err
    for page in ("0", "-1", "abc"):
        with pytest.raises(SystemExit) as exited:
            main(["recall", "--config", str(known_user), "telegram-42", "tea", "--page", page])
        assert exited.value.code == 2
        assert "must be a whole number from 1 up" in capsys.readouterr().err


async def test_without_a_config_file_memory_is_in_the_data_folder(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str], private_home: Path
) -> None:
    elsewhere = tmp_path / "some-project"
    elsewhere.mkdir()
    env = {**child_env, "LIGHTGREP_LLM_BASE_URL": fake_llm.base_url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=elsewhere, env=env,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(b"hello\n"), STEP_TIMEOUT)
    assert proc.returncode == 0, err
    data = private_home / ".local" / "share" / "lightgrep" / "workspaces"
    assert (data / "cli-tester" / "sessions").is_dir()
    assert list(elsewhere.iterdir()) == []  # nothing lands where the command was run
    assert f"memory in {data}" in err.decode()  # said at the start


async def test_doctor_says_a_read_only_workspaces_folder_is_not_writable(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    config = write_config(tmp_path, fake_llm)
    base = tmp_path / "workspaces"
    base.mkdir()
    base.chmod(0o555)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "doctor", "--config", str(config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_env,
            preexec_fn=without_write_override,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), STEP_TIMEOUT)
    finally:
        base.chmod(0o755)
    lines = out.decode().splitlines()
    assert proc.returncode == 1, err
    assert [line.split(":")[0] for line in lines] == [
        "OK    config",
        "FAIL  workspaces",
        "OK    endpoint",
        "OK    context window",
        "OK    token counter",
    ]
    assert lines[1] == f"FAIL  workspaces: {base} is not writable (Permission denied)"


# ---- who may change the config and its secrets (issue 32, item 9) -----------------------------


def refused(path: Path, what: str, mode: int) -> str:
    """The one line for a file others can change."""
    return (
        f"{path}: others can change this {what} (mode {mode:o}), so it is not used: "
        f"chmod go-w {path}"
    )


async def test_a_secrets_file_others_can_change_is_refused_in_one_line(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """One line in a world-writable lightgrep.env opened the bot to everyone, and only "can be
    read by others" was logged. Now the bot does not start, and says which file and the fix."""
    config = write_config(
        tmp_path,
        fake_llm,
        f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["42"]\n'
        f'api_base = "{fake_telegram.api_base}"\npoll_timeout_s = 1\n',
    )
    secrets = tmp_path / "lightgrep.env"
    secrets.write_text("LIGHTGREP_TELEGRAM_ALLOW_FROM=*\n")
    secrets.chmod(0o666)

    proc = await start_run(config, child_env)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), STEP_TIMEOUT)
    finally:
        await stopped(proc)
    assert proc.returncode == 2
    assert err.decode().splitlines() == [f"lightgrep: {refused(secrets, 'secrets file', 0o666)}"]
    assert fake_telegram.calls == []  # nothing was served

    code, out, _ = await asyncio.to_thread(run_cli, child_env, "doctor", "--config", str(config))
    assert code == 1
    assert out.splitlines() == [f"FAIL  config: {refused(secrets, 'secrets file', 0o666)}"]


async def test_a_private_secrets_file_beside_a_readable_config_is_used(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Readable is not writable: a 0644 config (no secret in it) and a 0600 lightgrep.env run."""
    fake_llm.queue(completion("Hello."))
    config = write_config(tmp_path, fake_llm)
    config.chmod(0o644)
    secrets = tmp_path / "lightgrep.env"
    secrets.write_text("LIGHTGREP_LLM_MODEL=model-from-the-secrets-file\n")
    secrets.chmod(0o600)

    code, out, err = await run_chat(config, child_env, b"hello\n")

    assert code == 0, err
    assert "Hello." in out
    assert fake_llm.chat_requests[0]["model"] == "model-from-the-secrets-file"
    assert "lightgrep.env" not in err  # no warning: only its owner can read it


def test_a_group_writable_config_is_refused_in_one_line(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    config = write_config(tmp_path, closed_port_url())
    config.chmod(0o664)
    code, _, err = run_cli(child_env, "run", "--config", str(config))
    assert code == 2
    assert err.splitlines() == [f"lightgrep: {refused(config, 'config file', 0o664)}"]
    code, out, _ = run_cli(child_env, "doctor", "--config", str(config))
    assert code == 1
    assert out.splitlines() == [f"FAIL  config: {refused(config, 'config file', 0o664)}"]


def test_a_secrets_file_of_another_user_is_refused_in_one_line(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """As ssh: its owner is the one running the bot or root, else that user can change it."""
    config = write_config(tmp_path, closed_port_url())
    secrets = tmp_path / "lightgrep.env"
    secrets.write_text("LIGHTGREP_TELEGRAM_ALLOW_FROM=*\n")
    secrets.chmod(0o600)
    os.chown(secrets, 12345, 12345)  # the tests run as root (tests/rigs/cli.py)
    me = os.geteuid()
    line = (
        f"{secrets}: this secrets file belongs to user id 12345, not to you ({me}) or root, "
        f"so it is not used: chown {me} {secrets}"
    )
    code, out, err = run_cli(child_env, "doctor", "--config", str(config))
    assert code == 1
    assert out.splitlines() == [f"FAIL  config: {line}"]
    assert "Traceback" not in err


def doctor_as_group(env: dict[str, str], config: Path, gid: int) -> tuple[str, str]:
    """`lightgrep doctor` as a service whose group is `gid` (systemd's Group=): its output."""
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "doctor", "--config", str(config)],
        capture_output=True, env=env, timeout=STEP_TIMEOUT,
        preexec_fn=lambda: os.setgid(gid),
    )  # fmt: skip
    return proc.stdout.decode(), proc.stderr.decode()


def test_the_systemd_recipes_files_are_read_without_a_warning_by_the_services_group(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """docs/running.md installs config.toml and lightgrep.env root-owned, mode 640, group
    lightgrep, for a service running as that group: the loader warned that lightgrep.env "can
    be read by others" (any group bit counted). The service's own group reading it is what the
    recipe means; another group or everyone still gets the warning."""
    service_gid, other_gid = 12345, 54321
    config = write_config(tmp_path, closed_port_url())
    secrets = tmp_path / "lightgrep.env"
    secrets.write_text("LIGHTGREP_LLM_MODEL=model-from-the-secrets-file\n")
    for path in (config, secrets):  # install -m 640 -o root -g lightgrep
        os.chown(path, 0, service_gid)
        path.chmod(0o640)

    out, err = doctor_as_group(child_env, config, service_gid)
    assert out.splitlines()[0].startswith("OK    config"), out
    assert "can be read by others" not in err, err

    os.chown(secrets, 0, other_gid)
    _, err = doctor_as_group(child_env, config, service_gid)
    assert f"{secrets} can be read by others: chmod 600 {secrets}" in err
    os.chown(secrets, 0, service_gid)
    secrets.chmod(0o644)
    _, err = doctor_as_group(child_env, config, service_gid)
    assert f"{secrets} can be read by others: chmod 600 {secrets}" in err
