"""Key encoding and workspaces: untrusted ids get reversible names that stay inside the folder."""

from __future__ import annotations

import os
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.atomic import atomic_write_text
from memory.keys import MAX_NAME_LENGTH, decode_key, encode_key, is_hashed_name
from memory.workspace import Workspace, WorkspaceError, Workspaces

HOSTILE_KEYS = [
    "../x",
    "../../etc/passwd",
    "a/b",
    "/abs",
    "\\windows\\path",
    "\x00",
    "nul\x00byte",
    "",
    ".",
    "..",
    "...",
    "x" * 5000,
    "../" * 2000,
    "~",
    "%2E%2E",
    "telegram:group:-1001:42:topic:7",
    "emoji-😀",
]
SAFE_CHARS = set(string.ascii_letters + string.digits + "_-%~")


def assert_safe_component(name: str) -> None:
    assert name not in ("", ".", "..")
    assert len(name) <= MAX_NAME_LENGTH
    assert set(name) <= SAFE_CHARS, name


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=repr)
def test_hostile_keys_get_safe_reversible_names(key: str) -> None:
    name = encode_key(key)
    assert_safe_component(name)
    if is_hashed_name(name):
        assert len(key) > 60  # only long keys are shortened
    else:
        assert decode_key(name) == key


def test_encoding_is_readable_for_ordinary_keys() -> None:
    assert encode_key("telegram-42") == "telegram-42"
    assert encode_key("telegram:dm:42") == "telegram%3Adm%3A42"
    assert decode_key("telegram%3Adm%3A42") == "telegram:dm:42"


def test_lossy_spellings_do_not_collide() -> None:
    keys = ["a:b", "a_b", "a%3Ab", "a/b", "a.b", "A:b", "", "%"]
    assert len({encode_key(k) for k in keys}) == len(keys)


def test_long_keys_are_hashed_and_distinct() -> None:
    a, b = "x" * 5000, "x" * 4999 + "y"
    assert encode_key(a) != encode_key(b)
    assert is_hashed_name(encode_key(a))
    assert decode_key(encode_key(a)) is None


@pytest.mark.parametrize("name", ["%41", "%4", "%zz", "a.b", "..", "%FF", "a%2f"])
def test_names_encode_key_never_makes_do_not_decode(name: str) -> None:
    assert decode_key(name) is None


@given(st.text())
def test_encode_key_round_trips_as_one_safe_component(key: str) -> None:
    name = encode_key(key)
    assert_safe_component(name)
    if not is_hashed_name(name):
        assert decode_key(name) == key


@given(st.text(max_size=80), st.text(max_size=80))
def test_distinct_keys_get_distinct_names(a: str, b: str) -> None:
    if a != b:
        assert encode_key(a) != encode_key(b)


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=repr)
def test_workspace_for_hostile_key_stays_inside(workspaces_dir: Path, key: str) -> None:
    workspace = Workspaces(workspaces_dir).get(key)
    workspace.memory.write("fact")
    workspace.memory.append_history("event")
    session = workspace.sessions.get(key)
    workspace.sessions.append(session, {"role": "user", "content": "hi"})

    base = workspaces_dir.resolve()
    assert workspace.root.resolve().parent == base
    assert session.path.resolve().parent == workspace.sessions_dir.resolve()
    # Every file written lives below the one folder of this key; nothing leaked elsewhere.
    assert [p.name for p in workspaces_dir.iterdir()] == [workspace.root.name]
    assert list(workspaces_dir.parent.iterdir()) == [workspaces_dir]
    assert workspace.memory_path.read_text() == "fact"


def test_long_key_is_recorded_in_the_workspace(workspaces_dir: Path) -> None:
    key = "cli-" + "é" * 3000
    workspace = Workspaces(workspaces_dir).get(key)
    assert (workspace.root / ".key").read_text(encoding="utf-8") == key
    session = workspace.sessions.get(key)
    workspace.sessions.append(session, {"role": "user", "content": "hi"})
    assert workspace.sessions.keys() == [key]


def test_same_object_and_layout(workspaces_dir: Path) -> None:
    workspaces = Workspaces(workspaces_dir)
    workspace = workspaces.get("telegram-42")
    assert isinstance(workspace, Workspace)
    assert workspaces.get("telegram-42") is workspace
    assert workspaces.get("telegram-43") is not workspace
    assert workspace.root == workspaces_dir / "telegram-42"
    assert workspace.memory_path == workspace.root / "MEMORY.md"
    assert workspace.history_path == workspace.root / "HISTORY.md"
    assert workspace.sessions_dir.is_dir()
    assert workspace.memory_lock is workspaces.get("telegram-42").memory_lock


def test_base_dir_is_created(tmp_path: Path) -> None:
    workspace = Workspaces(tmp_path / "a" / "b").get("cli-alice")
    assert workspace.sessions_dir.is_dir()


def test_symlinked_workspace_pointing_outside_is_refused(
    workspaces_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, workspaces_dir / "telegram-666")
    with pytest.raises(WorkspaceError):
        Workspaces(workspaces_dir).get("telegram-666")
    assert list(outside.iterdir()) == []


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f.md"
    atomic_write_text(target, "one\r\nline two\n")
    atomic_write_text(target, "new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["f.md"]


def test_temp_files_left_by_a_crash_mid_write_are_swept_on_open(tmp_path: Path) -> None:
    root = Workspaces(tmp_path).get("telegram-42").root
    (root / "MEMORY.md").write_text("## User Information\n- Name: Ada\n")
    (root / ".MEMORY.md.k2j4h1.tmp").write_text("## User Inf")  # killed while replacing
    reopened = Workspaces(tmp_path).get("telegram-42")  # the next start of the bot
    assert [p.name for p in root.iterdir() if p.name.endswith(".tmp")] == []
    assert reopened.memory.read() == "## User Information\n- Name: Ada\n"


def test_existing_workspaces_are_listed_by_key_without_creating_any(tmp_path: Path) -> None:
    workspaces = Workspaces(tmp_path)
    long_key = "cli-" + "x" * 5000
    for key in ("telegram-42", "discord-8123", long_key):
        workspaces.get(key)
    again = Workspaces(tmp_path)
    assert sorted(again.user_keys()) == sorted(["telegram-42", "discord-8123", long_key])
    assert again.exists("telegram-42") and not again.exists("telegram-43")
    assert not (tmp_path / encode_key("telegram-43")).exists()


def test_a_reader_opens_workspaces_without_writing_anything(tmp_path: Path) -> None:
    """Not holding the folder lock (an operator command beside a live bot), a reader must not
    sweep: the .tmp may be the bot's MEMORY.md between its write and its rename."""
    long_key = "cli-" + "x" * 5000
    bot = Workspaces(tmp_path)
    for key in ("telegram-42", long_key):
        bot.get(key).memory.write("- a fact\n")
    root = bot.get("telegram-42").root
    (root / ".MEMORY.md.k2j4h1.tmp").write_text("- a fact\n- in fli")  # being written
    (bot.get(long_key).root / ".key").unlink()  # a crash before the key was recorded
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    reader = Workspaces(tmp_path / "none", writer=False)
    assert reader.get("telegram-1").memory.read() == ""
    assert not (tmp_path / "none").exists()
    reader = Workspaces(tmp_path, writer=False)
    assert reader.get("telegram-42").memory.read() == "- a fact\n"
    assert reader.get(long_key).memory.read() == "- a fact\n"
    assert reader.get("telegram-43").memory.read() == ""
    assert before == sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))


def test_a_reader_refuses_a_shortened_folder_that_belongs_to_another_key(tmp_path: Path) -> None:
    key = "cli-" + "x" * 5000
    root = Workspaces(tmp_path).get(key).root
    (root / ".key").write_text("cli-someone-else")
    with pytest.raises(WorkspaceError):
        Workspaces(tmp_path, writer=False).get(key)
