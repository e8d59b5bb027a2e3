"""The first run, as a new user meets it (issue 37, item 4): doctor's lines without log lines,
init asking again instead of ending (keeping what was typed), a description in every command's
--help, `link KEY INTO_KEY`, an unreadable config answered with the fix, and the terminal's
/help showing what works there. Each drives `lightgrep` as its own process."""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import stat
import sys
from pathlib import Path

from bot.config import load_config
from tests.rigs.cli import (
    STEP_TIMEOUT,
    Terminal,
    closed_port_url,
    open_terminal,
    run_chat,
    run_cli,
    terminal_session,
    write_config,
)
from tests.rigs.fakes.openai_server import FakeOpenAI
from tests.rigs.fakes.telegram_server import TOKEN

RESULT = re.compile(r"^(OK  |FAIL)  [a-z ]+: ")  # one of doctor's lines

# ---- doctor: its lines, and no log lines unless -v ---------------------------------------------


async def test_doctor_prints_its_lines_and_no_log_lines(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Before: "2026-… INFO lightgrep: sending a tiny chat request to …" and "… INFO
    bot.agent.sizing: asking … for its context window" between the OK lines."""
    config = write_config(tmp_path, fake_llm)

    code, out, err = await asyncio.to_thread(run_cli, child_env, "doctor", "--config", str(config))

    assert code == 0, out + err
    assert err == ""
    assert [RESULT.match(line) is not None for line in out.splitlines()] == [True] * 5, out
    code, out, err = await asyncio.to_thread(
        run_cli, child_env, "doctor", "-v", "--config", str(config)
    )
    assert code == 0, out + err
    assert "INFO lightgrep: sending a tiny chat request" in err  # -v: everything


async def test_the_doctor_at_the_end_of_init_prints_no_log_lines(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "init", "--yes", "--base-url", fake_llm.base_url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=tmp_path,
        env=child_env,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), STEP_TIMEOUT)
    assert proc.returncode == 0, out.decode()
    _, said, checks = out.decode().partition("Checking it with lightgrep doctor:\n")
    assert said, out.decode()
    assert [RESULT.match(line) is not None for line in checks.splitlines()] == [True] * 5, checks


# ---- --help ---------------------------------------------------------------------------------


async def test_every_command_s_help_says_what_it_does(child_env: dict[str, str]) -> None:
    """Before: `lightgrep doctor --help` went from its usage line straight to the options."""
    code, listing, _ = await asyncio.to_thread(run_cli, child_env, "--help")
    assert code == 0
    names = re.findall(r"^    ([a-z]+) ", listing, re.MULTILINE)  # `lightgrep --help` lists them
    assert len(names) >= 15 and "doctor" in names, listing

    async def description(name: str) -> str:
        out = await asyncio.to_thread(run_cli, child_env, name, "--help")
        assert out[0] == 0, out
        blocks = out[1].split("\n\n")
        assert blocks[0].startswith(f"usage: lightgrep {name}")
        return blocks[1]

    described = {name: await description(name) for name in names}
    for name, text in described.items():
        assert not text.startswith(("positional arguments:", "options:")), (name, text)
        assert text[0].isupper() and text.endswith("."), (name, text)
    assert described["doctor"].startswith("Check the config")


def test_link_names_both_of_its_keys(child_env: dict[str, str]) -> None:
    """Before: `usage: lightgrep link … KEY KEY`, and two "KEY" lines under it."""
    code, out, _ = run_cli(child_env, "link", "--help")
    assert code == 0
    assert out.splitlines()[0].endswith(" KEY INTO_KEY")
    assert re.search(r"^  INTO_KEY +the key whose memory it joins$", out, re.MULTILINE), out
