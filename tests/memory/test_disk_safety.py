"""The disk under a public bot: a full disk never tears a saved line, a symbolic link in a
workspace is never followed, and every folder of the workspaces tree is private.

A short write is real, not simulated: a child process lowers its file-size limit
(RLIMIT_FSIZE, SIGXFSZ ignored), so the kernel writes part of the line and refuses the rest,
as a full disk does.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bot.config import load_config
from memory.atomic import atomic_write_text
from memory.safefs import LinkRefusedError
from memory.session import SessionStore
from memory.store import MemoryStore
from memory.workspace import UnsafeWorkspaceError, WorkspaceError, Workspaces
from tests.rigs import REPO
from tests.rigs.agent import ask, dm, make_agent, user_home
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, tool_call

API_KEY = "sk-live-BOTS-OWN-KEY-90210"

# ---- short writes ---------------------------------------------------------------------------

CHILD = r"""
import resource, signal, sys, os
from memory.session import SessionStore
from memory.store import MemoryStore

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
kind, folder, room = sys.argv[1], sys.argv[2], int(sys.argv[3])
big = "x" * 20_000
if kind == "session":
    store = SessionStore(folder)
    session = store.get("telegram:dm:1")
    size = os.path.getsize(session.path)
    write = lambda: store.append(session, {"role": "user", "content": big})
else:
    memory = MemoryStore(folder)
    size = os.path.getsize(memory.history_path)
    write = lambda: memory.append_history(big)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + room, resource.RLIM_INFINITY))
try:
    write()
except OSError as exc:
    print("error", exc.errno)
else:
    print("saved")
"""


def run_child(kind: str, folder: Path, room: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(folder), str(room)],
        capture_output=True, text=True, env=env, timeout=30, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_short_session_write_is_taken_back_and_reported(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = store.get("telegram:dm:1")
    store.append(session, {"role": "user", "content": "my bike lock code is 4417"})
    before = session.path.read_bytes()
    outcome = run_child("session", tmp_path, room=4000)  # room for a part of the line only
    assert outcome.startswith("error"), "the writer believed a torn line was saved"
    assert session.path.read_bytes() == before  # no torn line left behind
    reloaded = SessionStore(tmp_path).get("telegram:dm:1")
    assert [m["content"] for m in reloaded.messages] == ["my bike lock code is 4417"]
    store.append(session, {"role": "user", "content": "after the disk was freed"})
    again = SessionStore(tmp_path).get("telegram:dm:1")
    assert [m["content"] for m in again.messages][-1] == "after the disk was freed"


def test_a_short_history_write_is_taken_back_and_reported(tmp_path: Path) -> None:
    memory = MemoryStore(tmp_path)
    memory.append_history("[2026-01-02 09:00] Talked about green tea.")
    before = memory.history_path.read_bytes()
    outcome = run_child("history", tmp_path, room=3000)
    assert outcome.startswith("error"), "the writer believed a torn entry was saved"
    assert memory.history_path.read_bytes() == before


# ---- symbolic links -------------------------------------------------------------------------


@pytest.fixture
def bot_config(tmp_path: Path) -> Path:
    """A file outside every workspace holding a secret: what a planted link points at."""
    path = tmp_path / "config.toml"
    path.write_text(f'[llm]\napi_key = "{API_KEY}"\n')
    return path


def planted(workspaces: Path, user: str, name: str, target: Path) -> Path:
    home = user_home(workspaces, user)
    home.mkdir(parents=True, exist_ok=True)
    link = home / name
    os.symlink(target, link)
    return link


async def test_a_linked_memory_file_is_refused_with_a_clear_answer(
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
    bot_config: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    planted(workspaces_dir, "42", "MEMORY.md", bot_config)
    agent = make_agent(fake_llm, workspaces_dir)
    with caplog.at_level(logging.ERROR):
        turn = await ask(agent, dm("42", "what do you remember about me?"))
        command = await ask(agent, dm("42", "/memory"))
    await agent.aclose()
    for reply in (turn, command):
        assert "link" in reply.text and "not saved" in reply.text, reply.text
        assert API_KEY not in reply.text
    assert fake_llm.requests == []  # nothing of it went to the model either
    assert "refusing the workspace" in caplog.text and "MEMORY.md" in caplog.text


@pytest.mark.parametrize("name", ["HISTORY.md", "sessions", ".memory_versions", ".key"])
def test_a_workspace_holding_a_link_is_refused(
    workspaces_dir: Path, tmp_path: Path, name: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside if name in ("sessions", ".memory_versions") else outside / "file"
    planted(workspaces_dir, "42", name, target)
    with pytest.raises(UnsafeWorkspaceError):
        Workspaces(workspaces_dir).get("telegram-42")
    with pytest.raises(UnsafeWorkspaceError):  # a reader (lightgrep memory/recall) as well
        Workspaces(workspaces_dir, writer=False).get("telegram-42")
    assert list(outside.iterdir()) == []


def test_a_linked_session_file_is_refused(workspaces_dir: Path, bot_config: Path) -> None:
    home = user_home(workspaces_dir, "42")
    (home / "sessions").mkdir(parents=True)
    os.symlink(bot_config, home / "sessions" / "telegram%3Adm%3A42.jsonl")
    with pytest.raises(UnsafeWorkspaceError):
        Workspaces(workspaces_dir).get("telegram-42")


def test_a_workspace_linked_to_another_users_workspace_is_refused(workspaces_dir: Path) -> None:
    other = Workspaces(workspaces_dir).get("telegram-7")
    other.memory.write("## User Information\n- Name: Seven\n")
    os.symlink(other.root, workspaces_dir / "telegram-42")
    with pytest.raises(WorkspaceError):
        Workspaces(workspaces_dir).get("telegram-42")


def test_links_planted_after_opening_are_never_followed(
    workspaces_dir: Path, tmp_path: Path, bot_config: Path
) -> None:
    """The check when a workspace is opened has a window; every open closes it again."""
    workspace = Workspaces(workspaces_dir).get("telegram-42")
    session = workspace.sessions.get("telegram:dm:42")
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    os.symlink(bot_config, workspace.memory_path)
    os.symlink(outside, workspace.history_path)
    os.symlink(outside, session.path)
    with pytest.raises(LinkRefusedError):
        workspace.memory.read()
    with pytest.raises(LinkRefusedError):
        workspace.memory.append_history("an entry")
    with pytest.raises(LinkRefusedError):
        workspace.sessions.append(session, {"role": "user", "content": "hello"})
    with pytest.raises(LinkRefusedError):
        workspace.memory.write("## User Information\n- new\n")
    assert outside.read_text() == "untouched\n"
    assert os.path.islink(workspace.memory_path)  # the link was not replaced either


# A hard link is another name of the same file: O_NOFOLLOW does not see it, its link count does.


async def test_a_hard_linked_memory_file_is_refused_with_a_clear_answer(
    fake_llm: FakeOpenAI, workspaces_dir: Path, bot_config: Path
) -> None:
    home = user_home(workspaces_dir, "42")
    home.mkdir(parents=True)
    os.link(bot_config, home / "MEMORY.md")
    agent = make_agent(fake_llm, workspaces_dir)
    turn = await ask(agent, dm("42", "what do you remember about me?"))
    command = await ask(agent, dm("42", "/memory"))
    await agent.aclose()
    for reply in (turn, command):
        assert "link" in reply.text and "not saved" in reply.text, reply.text
        assert API_KEY not in reply.text
    assert fake_llm.requests == []  # the config never reached the model's prompt


@pytest.mark.parametrize("name", ["HISTORY.md", ".key", "sessions/telegram%3Adm%3A42.jsonl"])
def test_a_workspace_holding_a_hard_link_is_refused(
    workspaces_dir: Path, bot_config: Path, name: str
) -> None:
    home = user_home(workspaces_dir, "42")
    (home / "sessions").mkdir(parents=True)
    os.link(bot_config, home / name)
    with pytest.raises(UnsafeWorkspaceError):
        Workspaces(workspaces_dir).get("telegram-42")
    with pytest.raises(UnsafeWorkspaceError):
        Workspaces(workspaces_dir, writer=False).get("telegram-42")


def test_hard_links_planted_after_opening_are_never_read_nor_written(
    workspaces_dir: Path, tmp_path: Path, bot_config: Path
) -> None:
    """Every reader and appender of memory/safefs checks the open file's link count."""
    workspace = Workspaces(workspaces_dir).get("telegram-42")
    session = workspace.sessions.get("telegram:dm:42")
    workspace.sessions.append(session, {"role": "user", "content": "hello"})
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    os.link(bot_config, workspace.memory_path)
    os.link(outside, workspace.history_path)
    session.path.unlink()
    os.link(outside, session.path)
    with pytest.raises(LinkRefusedError, match="hard link"):
        workspace.memory.read()
    with pytest.raises(LinkRefusedError):
        workspace.memory.append_history("an entry")
    with pytest.raises(LinkRefusedError):
        workspace.sessions.append(session, {"role": "user", "content": "hello again"})
    with pytest.raises(LinkRefusedError):
        SessionStore(workspace.sessions_dir).get("telegram:dm:42")  # a fresh load reads it
    assert outside.read_text() == "untouched\n"


@pytest.mark.parametrize("link", [os.link, os.symlink], ids=["hard", "symbolic"])
async def test_memory_control_never_shows_a_file_linked_in_after_opening(
    fake_llm: FakeOpenAI, workspaces_dir: Path, bot_config: Path, link: Callable[..., None]
) -> None:
    """/memory undo restored (and showed the diff of) whatever a version's name led to, and
    /forget listed its matching lines: they read with a plain open, past memory/safefs."""
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")  # opened and checked: held from now on
    workspace.memory.write("## User Information\n- Name: Ada\n")
    workspace.memory.write("## User Information\n- Name: Ada\n- Likes tea\n")
    newest = workspace.memory.versions()[-1]
    stamp, ns = newest.name.split(".")[1:3]
    planted = newest.with_name(f"MEMORY.{stamp}.{int(ns) + 1:020d}.md")  # the newest now
    link(bot_config, planted)
    assert workspace.memory.versions()[-1] == planted
    undo = await ask(agent, dm("42", "/memory undo"))
    assert API_KEY not in undo.text and API_KEY not in workspace.memory.read()
    workspace.memory_path.unlink()
    link(bot_config, workspace.memory_path)
    forget = await ask(agent, dm("42", "/forget api_key"))
    await agent.aclose()
    assert API_KEY not in forget.text, forget.text
    assert API_KEY in bot_config.read_text()  # noqa: ASYNC240 - the operator's file, untouched


def test_atomic_write_refuses_a_linked_file_or_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.md").write_text("theirs")
    folder = tmp_path / "ws"
    folder.mkdir()
    os.symlink(outside / "target.md", folder / "MEMORY.md")
    with pytest.raises(LinkRefusedError):
        atomic_write_text(folder / "MEMORY.md", "mine")
    os.symlink(outside, folder / ".memory_versions")
    with pytest.raises(LinkRefusedError):
        atomic_write_text(folder / ".memory_versions" / "MEMORY.1.md", "mine")
    assert sorted(p.name for p in outside.iterdir()) == ["target.md"]
    assert (outside / "target.md").read_text() == "theirs"
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


async def test_a_healthy_workspace_still_works_end_to_end(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(
        completion(None, [tool_call("edit_memory", {"action": "add", "text": "Name: Ada"})]),
        completion("Nice to meet you, Ada."),
    )
    agent = make_agent(fake_llm, workspaces_dir)
    reply = await ask(agent, dm("42", "I'm Ada"))
    await agent.aclose()
    assert reply.text == "Nice to meet you, Ada."
    assert "Name: Ada" in (user_home(workspaces_dir, "42") / "MEMORY.md").read_text()


# ---- permissions ----------------------------------------------------------------------------


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def modes(base: Path) -> dict[str, str]:
    folders = [base, *(p for p in base.rglob("*") if p.is_dir())]
    return {str(p.relative_to(base.parent)): oct(stat.S_IMODE(p.stat().st_mode)) for p in folders}


def test_every_folder_is_private_even_under_umask_000(tmp_path: Path, open_umask: None) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[memory]\nworkspaces_dir = "data/workspaces"\n')
    config.chmod(0o644)  # the operator's file, not the bot's: one others can change is refused
    base = load_config(config, env={}).memory.workspaces_dir
    workspace = Workspaces(base, keep_memory_versions=2).get("telegram-42")
    workspace.sessions.append(workspace.sessions.get("telegram:dm:42"), {"role": "user",
                                                                           "content": "hi"})
    workspace.memory.write("## Preferences\n- tea\n")
    workspace.memory.write("## Preferences\n- coffee\n")  # keeps a version
    workspace.memory.append_history("[2026-01-02 09:00] Talked.")
    found = modes(base)
    assert set(found) >= {"workspaces", "workspaces/telegram-42",
                          "workspaces/telegram-42/sessions",
                          "workspaces/telegram-42/.memory_versions"}
    assert set(found.values()) == {"0o700"}, found
    assert oct(stat.S_IMODE((tmp_path / "data").stat().st_mode)) == "0o700"
    files = [p for p in base.rglob("*") if p.is_file() and p.name != ".lightgrep.lock"]
    assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)


def test_an_existing_user_folder_open_to_others_is_made_private(tmp_path: Path) -> None:
    home = tmp_path / "telegram-42"
    (home / "sessions").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(home / "sessions", 0o777)
    Workspaces(tmp_path).get("telegram-42")
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "sessions").stat().st_mode) == 0o700


def test_session_records_stay_json_lines(tmp_path: Path) -> None:
    """The whole-line writer writes exactly what it was given, one record per line."""
    store = SessionStore(tmp_path)
    session = store.get("k")
    for i in range(3):
        store.append(session, {"role": "user", "content": f"m{i}" * 5000})
    lines = session.path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [json.loads(line).get("content") for line in lines[1:-1]] == [
        f"m{i}" * 5000 for i in range(3)
    ]
