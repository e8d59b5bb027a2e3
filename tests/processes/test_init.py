"""`lightgrep init` (issue 23): a first config.toml that works, scripted with flags and asked
at a terminal (the tokens typed without being shown), ending with doctor."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bot.cli.main import main
from bot.config import load_config
from tests.rigs.cli import Terminal, open_terminal, terminal_session
from tests.rigs.fakes.openai_server import FakeOpenAI
from tests.rigs.fakes.telegram_server import TOKEN

pytestmark = pytest.mark.usefixtures("keep_logging")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def init(*args: str) -> int:
    return await asyncio.to_thread(main, ["init", *args])


async def test_init_scripted_finds_the_local_server_and_writes_a_working_config(
    fake_llm: FakeOpenAI,
    tmp_path: Path,
    clean_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    """--yes: nothing asked. The server is found on its port, its model and window read, the
    token taken from the environment (so not written anywhere), and doctor passes."""
    fake_llm.props = {"default_generation_settings": {"n_ctx": 4096}}
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    config = tmp_path / "config.toml"
    ports = f"{closed_port()},{fake_llm.port}"

    code = await init(
        "--yes", "--ports", ports, "--enable", "telegram", "--allow-from", "telegram=42,@alice",
        "--config", str(config),
    )  # fmt: skip

    out = capsys.readouterr().out
    assert code == 0, out
    assert f"Found one at {fake_llm.base_url}." in out
    assert "Context window: 4,096 tokens (told by the server, llama.cpp /props n_ctx)" in out
    assert "OK    context window" in out and "FAIL" not in out  # doctor ran, and passed
    written = tomllib.loads(config.read_text())
    assert written["llm"]["base_url"] == fake_llm.base_url
    assert written["llm"]["model"] == "fake-model"
    assert "context_window_tokens" not in written["llm"]  # automatic
    assert written["telegram"]["enabled"] is True
    assert written["telegram"]["allow_from"] == ["42", "@alice"]
    assert TOKEN not in config.read_text() and not (tmp_path / "lightgrep.env").exists()
    assert "# Who may talk to the bot" in config.read_text()  # the example's comments stay
    loaded = load_config(config)
    assert loaded.enabled_platforms() == ["telegram"]
    assert loaded.llm.context_window_tokens is None


async def test_init_refuses_to_replace_a_config(
    tmp_path: Path, clean_env: None, capsys: Any
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[llm]\nmodel = 'mine'\n")
    assert await init("--yes", "--config", str(config)) == 2
    assert "exists already: --force replaces it" in capsys.readouterr().err
    assert config.read_text() == "[llm]\nmodel = 'mine'\n"


async def test_init_at_a_terminal_asks_and_never_shows_the_token(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """No server on the ports: it asks for the URL; it asks which platforms to serve, the
    token (hidden: the terminal never shows it) and who may talk; the token goes to a private
    lightgrep.env, which the config loader reads beside config.toml."""
    fake_llm.max_model_len = 8192  # vLLM's way of telling
    ours, theirs = open_terminal()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "init", "--ports", str(closed_port()),
        stdin=theirs, stdout=theirs, stderr=theirs,
        cwd=tmp_path, env=child_env, preexec_fn=terminal_session,
    )  # fmt: skip
    os.close(theirs)
    terminal = Terminal(ours)
    try:
        await terminal.expect("Base URL of an OpenAI-compatible server")
        terminal.type(f"{fake_llm.base_url}\r")
        await terminal.expect("Context window: 8,192 tokens (told by the server, vLLM")
        for _ in range(2):  # the platforms, in the order their plugins are installed
            await terminal.expect("Serve ")
            platform = (await terminal.expect("? [y/N]: ")).split("?")[0]
            if platform == "discord":
                terminal.type("\r")
                continue
            assert platform == "telegram"
            terminal.type("y\r")
            await terminal.expect(
                "telegram token (create a bot with @BotFather to get one) (hidden): "
            )
            terminal.type(f"{TOKEN}\r")
            await terminal.expect("telegram allow_from, comma-separated")
            terminal.type("42\r")
        shown = await terminal.expect("context window")
        await asyncio.wait_for(proc.wait(), 30)
    finally:
        terminal.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert TOKEN not in terminal.raw.decode(errors="replace")
    assert "Start it with: lightgrep run --config config.toml" in shown
    secrets = tmp_path / "lightgrep.env"
    assert secrets.read_text() == f"TELEGRAM_BOT_TOKEN={TOKEN}\n"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    config = tmp_path / "config.toml"
    assert TOKEN not in config.read_text()
    loaded = load_config(config, env={})
    assert loaded.platforms["telegram"].token == TOKEN
    assert loaded.platforms["telegram"].allow_from == ["42"]


async def test_init_sends_the_api_key_only_to_a_server_the_person_named(
    fake_llm: FakeOpenAI,
    tmp_path: Path,
    clean_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    """Issue 32, item 7: whatever listed models on a probed local port was sent OPENAI_API_KEY
    (a key meant for OpenAI, handed to any program on that port), by init's listing and by the
    doctor it runs. A server found by probing is sent no key, now or later by the bot; one
    named with --base-url gets it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-meant-for-openai")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    found = tmp_path / "found" / "config.toml"
    found.parent.mkdir()
    ports = f"{closed_port()},{fake_llm.port}"

    code = await init("--yes", "--ports", ports, "--config", str(found))

    out = capsys.readouterr().out
    assert code == 0, out
    assert f"Found one at {fake_llm.base_url}." in out and "OK    endpoint" in out
    assert fake_llm.chat_requests  # doctor asked it, too
    assert fake_llm.authorizations and "Bearer sk-meant-for-openai" not in fake_llm.authorizations
    assert load_config(found).llm.api_key is None  # the bot will not send it either

    fake_llm.authorizations.clear()
    named = tmp_path / "named" / "config.toml"
    named.parent.mkdir()
    code = await init("--yes", "--base-url", fake_llm.base_url, "--config", str(named))
    assert code == 0, capsys.readouterr()
    assert fake_llm.authorizations[0] == "Bearer sk-meant-for-openai"  # the listing
    assert "Bearer sk-meant-for-openai" in fake_llm.authorizations[1:]  # and doctor's request
