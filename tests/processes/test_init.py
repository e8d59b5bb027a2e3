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
            await terminal.expect("Who may talk to the bot on Telegram? Their numeric user ids")
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


# ---- issue 32, item 8: links, half-written files, any Unicode, a huge model list ------------


async def init_process(
    child_env: dict[str, str], cwd: Path, *args: str, stdin: str = ""
) -> tuple[int, str]:
    """`lightgrep init` as its own process, answers piped in: (exit code, what it printed)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "init", "--no-doctor", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, cwd=cwd, env=child_env,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def one_line(out: str) -> str:
    """The error init printed: one line, no traceback."""
    assert "Traceback" not in out, out
    return out.strip().splitlines()[-1]


async def test_init_refuses_a_link_at_config_toml_in_one_line_and_writes_nothing(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """A link at config.toml (dangling, or to a file, with --force): before, a traceback
    (the atomic write refuses links). Now one line naming the link and the fix; nothing
    written, the link and its target as they were."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    here = tmp_path / "here"
    here.mkdir()
    link = here / "config.toml"
    link.symlink_to(elsewhere / "real.toml")  # dangling
    code, out = await init_process(child_env, here, "--yes", "--base-url", fake_llm.base_url)
    line = one_line(out)
    assert code == 2, out
    assert f"{link} is a symbolic link (to {elsewhere / 'real.toml'})" in line
    assert "give --config FILE where the real file is, or remove the link" in line
    assert link.is_symlink() and not (elsewhere / "real.toml").exists()
    assert sorted(p.name for p in here.iterdir()) == ["config.toml"]

    (elsewhere / "real.toml").write_text("[llm]\nmodel = 'mine'\n")
    code, out = await init_process(
        child_env, here, "--yes", "--force", "--base-url", fake_llm.base_url
    )
    assert code == 2 and "is a symbolic link" in one_line(out)
    assert link.is_symlink() and (elsewhere / "real.toml").read_text() == "[llm]\nmodel = 'mine'\n"
    # The way it says: --config the file itself.
    code, out = await init_process(
        child_env, here, "--yes", "--force", "--base-url", fake_llm.base_url,
        "--config", str(elsewhere / "real.toml"),
    )  # fmt: skip
    assert code == 0, out
    assert load_config(elsewhere / "real.toml").llm.model == "fake-model"


async def test_init_refuses_a_link_at_lightgrep_env_before_writing_anything(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """The token typed goes to lightgrep.env, which is a link: before, config.toml was
    written, then a traceback, and the next init needed --force. Now one line, and neither
    file is written (nor the link's target)."""
    secrets_elsewhere = tmp_path / "shared" / "lightgrep.env"
    secrets_elsewhere.parent.mkdir()
    (tmp_path / "lightgrep.env").symlink_to(secrets_elsewhere)
    code, out = await init_process(
        child_env, tmp_path, "--base-url", fake_llm.base_url, "--enable", "telegram",
        "--allow-from", "telegram=42", stdin=f"n\n{TOKEN}\n",  # discord? no; the token
    )  # fmt: skip
    line = one_line(out)
    assert code == 2, out
    assert f"{tmp_path / 'lightgrep.env'} is a symbolic link (to {secrets_elsewhere})" in line
    assert not (tmp_path / "config.toml").exists() and not secrets_elsewhere.exists()
    assert TOKEN not in out


async def test_init_writes_into_a_config_folder_that_is_a_link(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """~/.config/lightgrep a link to a synced folder: before, a traceback; now it simply works,
    the secrets beside the config in the real folder."""
    real = tmp_path / "synced" / "lightgrep"
    real.mkdir(parents=True)
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    config = tmp_path / "linked" / "config.toml"
    code, out = await init_process(
        child_env, tmp_path, "--base-url", fake_llm.base_url, "--enable", "telegram",
        "--allow-from", "telegram=42", "--config", str(config), stdin=f"n\n{TOKEN}\n",
    )  # fmt: skip
    assert code == 0, out
    assert (real / "config.toml").is_file() and not (real / "config.toml").is_symlink()
    assert (real / "lightgrep.env").read_text() == f"TELEGRAM_BOT_TOKEN={TOKEN}\n"
    assert stat.S_IMODE((real / "lightgrep.env").stat().st_mode) == 0o600
    assert load_config(config, env={}).platforms["telegram"].token == TOKEN


async def test_init_writes_any_unicode_model_name_in_a_config_that_loads(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """A model named with an emoji was written as JSON's surrogate pair, which TOML refuses:
    a config that did not load. Now as it is; quotes, backslashes and control characters
    escaped as TOML wants."""
    name = 'llama-🦙 "ünïcode" \\ tab\there\x7f'
    fake_llm.model_ids = [name]
    code, out = await init_process(child_env, tmp_path, "--yes", "--base-url", fake_llm.base_url)
    assert code == 0, out
    config = tmp_path / "config.toml"
    assert tomllib.loads(config.read_text("utf-8"))["llm"]["model"] == name
    assert load_config(config).llm.model == name
    assert 'model = "llama-🦙' in config.read_text("utf-8")


async def test_init_reads_a_model_list_only_within_its_cap(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """A 200 MB /v1/models answer was read whole (608 MB of RAM). Now reading stops at the cap:
    one line, nothing written; with --model named it goes on without the list."""
    fake_llm.models_bytes = 200 * 1024 * 1024
    code, out = await init_process(child_env, tmp_path, "--yes", "--base-url", fake_llm.base_url)
    assert code == 1, out
    assert one_line(out) == (
        f"lightgrep: {fake_llm.base_url}/models answered more than 4 MB, far more than a list "
        "of models: name one with --model"
    )
    assert fake_llm.models_bytes_sent < 50 * 1024 * 1024  # it hung up early
    assert not (tmp_path / "config.toml").exists()
    code, out = await init_process(
        child_env, tmp_path, "--yes", "--base-url", fake_llm.base_url, "--model", "mine"
    )
    assert code == 0, out
    assert "models answered more than 4 MB; not read (the model is --model mine)" in out
    assert load_config(tmp_path / "config.toml").llm.model == "mine"
