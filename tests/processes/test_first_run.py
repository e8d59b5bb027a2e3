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


# ---- init asks again on an empty answer, keeping what was typed ---------------------------------


async def test_init_asks_again_for_who_may_talk_and_keeps_the_token(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Before: an empty answer to "telegram allow_from, comma-separated (so nobody could talk
    to the bot: …)" ended init with exit 2, "telegram needs allow_from: --allow-from
    telegram=IDS", and the token typed was lost. Now the question says what it asks, an empty
    answer (or a blank token) is said and asked again, and the config works."""
    ours, theirs = open_terminal()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "init", "--no-doctor", "--base-url", fake_llm.base_url,
        stdin=theirs, stdout=theirs, stderr=theirs,
        cwd=tmp_path, env=child_env, preexec_fn=terminal_session,
    )  # fmt: skip
    os.close(theirs)
    terminal = Terminal(ours)
    question = (
        "Who may talk to the bot on Telegram? Their numeric user ids or @usernames, "
        "comma-separated, or * for everyone: "
    )
    try:
        for _ in range(2):  # the platforms, in the order their plugins are installed
            await terminal.expect("Serve ")
            platform = (await terminal.expect("? [y/N]: ")).split("?")[0]
            if platform != "telegram":
                terminal.type("\r")
                continue
            terminal.type("y\r")
            token = "telegram token (create a bot with @BotFather to get one) (hidden): "
            await terminal.expect(token)
            terminal.type("\r")  # nothing typed
            said = await terminal.expect(token)
            assert "telegram needs its token: create a bot with @BotFather to get one." in said
            terminal.type(f"{TOKEN}\r")
            await terminal.expect(question)
            terminal.type(" , \r")  # nothing in it
            said = await terminal.expect(question)
            assert "That leaves telegram allow_from empty, so nobody could talk to the bot" in said
            terminal.type("42, @alice\r")
        await terminal.expect("Start it with: lightgrep run")
        await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
    finally:
        terminal.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, terminal.seen
    assert TOKEN not in terminal.raw.decode(errors="replace")
    loaded = load_config(tmp_path / "config.toml", env={})
    assert loaded.platforms["telegram"].token == TOKEN
    assert loaded.platforms["telegram"].allow_from == ["42", "@alice"]


async def test_init_with_no_answer_left_ends_in_one_line(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Answers piped in that run out are not asked for again and again: one line, exit 2,
    nothing written (the token came from the environment)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "init", "--no-doctor", "--base-url", fake_llm.base_url,
        "--enable", "telegram",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=tmp_path,
        env={**child_env, "TELEGRAM_BOT_TOKEN": TOKEN},
    )  # fmt: skip
    # Serve discord? (asked before or after telegram, by the plugins' order) no; who may talk
    # on telegram? nothing, and then no more answers.
    out, err = await asyncio.wait_for(proc.communicate(b"\n\n"), STEP_TIMEOUT)
    assert proc.returncode == 2, out.decode() + err.decode()
    assert "That leaves telegram allow_from empty" in out.decode()
    assert err.decode().splitlines() == [
        "lightgrep: telegram needs allow_from: --allow-from telegram=IDS"
    ]
    assert not (tmp_path / "config.toml").exists() and not (tmp_path / "lightgrep.env").exists()


async def test_init_asks_again_for_a_server_url_where_nothing_answers(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Before: a URL typed with a slip (a wrong port, no /v1) ended init: "nothing answers at
    …", exit 1. Now it is said and asked again."""
    closed = closed_port_url()  # http://127.0.0.1:PORT/v1
    port = closed.split(":")[2].removesuffix("/v1")  # nor is a server found there
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "init", "--no-doctor", "--ports", port,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=tmp_path, env=child_env,
    )  # fmt: skip
    typed = f"{closed}\n{fake_llm.base_url.removesuffix('/v1')}\n{fake_llm.base_url}\n\n\n"
    out, err = await asyncio.wait_for(proc.communicate(typed.encode()), STEP_TIMEOUT)
    assert proc.returncode == 0, out.decode() + err.decode()
    assert f"{closed}/models answers nothing: is the server running" in out.decode()
    assert "/models answers HTTP 404: is the server running, and is it its /v1 URL?" in out.decode()
    assert load_config(tmp_path / "config.toml").llm.base_url == fake_llm.base_url


async def test_init_asks_again_for_an_api_key_the_server_refuses(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Before: a key pasted short ended init ("answered HTTP 401"). Now it is asked again; the
    key that works is the one kept."""
    fake_llm.models_key = "sk-the-right-one"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "init", "--no-doctor", "--base-url", fake_llm.base_url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=tmp_path, env=child_env,
    )  # fmt: skip
    typed = b"sk-the-right\n\nsk-the-right-one\n\n\n"  # short; nothing; right; no platforms
    out, err = await asyncio.wait_for(proc.communicate(typed), STEP_TIMEOUT)
    assert proc.returncode == 0, out.decode() + err.decode()
    assert f"{fake_llm.base_url} refused that key (HTTP 401)." in out.decode()
    assert "It needs a key." in out.decode()
    assert (tmp_path / "lightgrep.env").read_text() == "OPENAI_API_KEY=sk-the-right-one\n"


async def test_init_asks_again_for_a_model_number_not_listed(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Before: "9" of a list of two was written as the model's name (a config whose every
    request fails)."""
    fake_llm.model_ids = ["small", "large"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "init", "--no-doctor", "--base-url", fake_llm.base_url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=tmp_path, env=child_env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(b"9\n2\n\n\n"), STEP_TIMEOUT)
    assert proc.returncode == 0, out.decode() + err.decode()
    assert "No number 9 above: type one from 1 to 2, or a name." in out.decode()
    assert load_config(tmp_path / "config.toml").llm.model == "large"


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


# ---- a config this user cannot read ------------------------------------------------------------


CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2  # linux/capability.h
PR_CAPBSET_DROP = 24  # linux/prctl.h


def as_anyone() -> None:
    """In the child before exec: as root, give up reading and writing past file permissions,
    so a file of another user's, mode 600, is closed to it as to the container's user."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


CLONE_NEWNS = 0x00020000  # linux/sched.h
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18  # linux/mount.h


def mounted_read_only(host: Path, inside: Path) -> None:
    """In the child before exec: in a mount namespace of its own (nothing seen outside it),
    `host` bound read-only at `inside`, as `docker run -v host:inside:ro` does."""
    libc = ctypes.CDLL(None, use_errno=True)
    calls = [
        lambda: libc.unshare(CLONE_NEWNS),
        lambda: libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None),
        lambda: libc.mount(bytes(host), bytes(inside), None, MS_BIND, None),
        lambda: libc.mount(None, bytes(inside), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None),
    ]
    for call in calls:
        if call() != 0:
            raise OSError(ctypes.get_errno(), "unshare or mount failed")


def doctor_as_anyone(
    env: dict[str, str], config: Path, read_only: tuple[Path, Path] | None = None
) -> tuple[int, str, str]:
    """`lightgrep doctor` as a user to whom file permissions apply; `read_only`: (host
    folder, folder in the child) mounted read-only first."""
    import subprocess

    def before_exec() -> None:
        if read_only is not None:
            mounted_read_only(*read_only)
        as_anyone()

    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "doctor", "--config", str(config)],
        capture_output=True, env=env, timeout=STEP_TIMEOUT, preexec_fn=before_exec,
    )  # fmt: skip
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_a_config_this_user_cannot_read_is_answered_with_the_fix(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """The container's user (uid 10001) and a config of mode 600 from the host: before,
    "cannot read the config file: Permission denied", no hint. Now the file, the user id and
    the fix; the fix done, doctor reads it."""
    config = write_config(tmp_path, closed_port_url())
    config.chmod(0o600)
    os.chown(config, 10001, 10001)  # someone else's (the tests run as root: tests/rigs/cli.py)
    me = os.geteuid()

    code, out, err = doctor_as_anyone(child_env, config)

    assert code == 1, err
    assert out.splitlines() == [
        f"FAIL  config: {config}: this config file is not readable by this user (user id {me}; "
        f"the file is user id 10001's, mode 600): chown {me} {config}"
    ]
    assert "Traceback" not in err
    os.chown(config, me, me)  # as it says
    code, out, err = doctor_as_anyone(child_env, config)
    assert out.splitlines()[0].startswith("OK    config"), out + err


def test_a_config_mounted_read_only_as_in_the_container_is_answered_with_chmod(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """`-v "$PWD/config.toml:/etc/lightgrep/config.toml:ro"` of a mode 600 file the container's
    user does not own: on a read-only mount the owner does not matter (no one there can change
    it), so chmod 644 on the host is a fix, and it is the first one said."""
    host, inside = tmp_path / "host", tmp_path / "etc"
    host.mkdir()
    inside.mkdir()
    data = tmp_path / "data"
    (host / "config.toml").write_text(
        f'[memory]\nworkspaces_dir = "{data}"\n[llm]\nbase_url = "{closed_port_url()}"\n'
    )
    (host / "config.toml").chmod(0o600)
    os.chown(host / "config.toml", 1000, 1000)  # the host's user
    config = inside / "config.toml"
    me = os.geteuid()

    code, out, err = doctor_as_anyone(child_env, config, read_only=(host, inside))

    assert code == 1, err
    assert out.splitlines()[0] == (
        f"FAIL  config: {config}: this config file is not readable by this user (user id {me}; "
        f"the file is user id 1000's, mode 600): chmod 644 {config}, or chown {me} {config} "
        "(where it is mounted from)"
    )
    (host / "config.toml").chmod(0o644)  # as it says, on the host
    code, out, err = doctor_as_anyone(child_env, config, read_only=(host, inside))
    assert out.splitlines()[0].startswith("OK    config"), out + err
    assert not (inside / "config.toml").exists()  # the mount was the child's alone


def test_a_secrets_file_this_user_cannot_read_is_answered_with_the_fix(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    config = write_config(tmp_path, closed_port_url())
    secrets = tmp_path / "lightgrep.env"
    secrets.write_text("LIGHTGREP_LLM_MODEL=from-the-secrets-file\n")
    secrets.chmod(0o600)
    os.chown(secrets, 10001, 10001)
    me = os.geteuid()

    code, out, _ = doctor_as_anyone(child_env, config)

    assert code == 1
    assert out.splitlines() == [
        f"FAIL  config: {secrets}: this secrets file is not readable by this user (user id "
        f"{me}; the file is user id 10001's, mode 600): chown {me} {secrets} (and keep it "
        "chmod 600)"
    ]
    os.chown(secrets, me, me)
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    code, out, err = doctor_as_anyone(child_env, config)
    assert "model from-the-secrets-file" in out.splitlines()[0], out + err


# ---- the terminal's /help ----------------------------------------------------------------------


async def test_the_terminal_s_help_lists_what_works_there(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Before: /help in `lightgrep chat` listed /group ("/group is for group chats" when
    tried) and the group admins' /reminders group. The terminal has no group chats."""
    config = write_config(tmp_path, fake_llm)

    code, out, err = await run_chat(config, child_env, b"/help\n/quit\n")

    assert code == 0, err
    commands = re.findall(r"^(/[a-z]+) — ", out, re.MULTILINE)
    assert "/group" not in commands and "/reminders group" not in out
    assert {"/memory", "/remind", "/reminders", "/persona", "/link", "/quit"} <= set(commands)
    assert fake_llm.chat_requests == []  # a command, answered without the model
