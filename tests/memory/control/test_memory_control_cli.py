"""The operator's memory control: `lightgrep forget`, `export` and `wipe`, in-process through main()
and, for a SIGKILL in the middle of a forget, as a real process."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import zipfile
from pathlib import Path

import pytest

from bot.cli.main import main
from memory.control.forget import forget
from memory.folder_lock import FolderLock
from memory.session import SessionStore
from memory.workspace import Workspaces
from tests.rigs.cli import closed_port_url, write_config
from tests.rigs.memory_control import SECRET, all_bytes, files_holding, fill

pytestmark = pytest.mark.usefixtures("keep_logging")


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A config whose workspaces folder holds telegram-42 (with the secret) and telegram-7."""
    workspaces = Workspaces(tmp_path / "workspaces")
    fill(workspaces.get("telegram-42"))
    fill(workspaces.get("telegram-7"))
    return write_config(tmp_path, closed_port_url())


def workspace_of(config: Path, key: str) -> Path:
    return config.parent / "workspaces" / key


def user_data(config: Path) -> dict[str, bytes]:
    """Every file of every workspace (not the folder's lock file)."""
    files = all_bytes(config.parent / "workspaces")
    files.pop(".lightgrep.lock", None)
    return files


def test_forget_removes_the_phrase_from_one_user_only(
    filled: Path, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    other = all_bytes(workspace_of(filled, "telegram-7"))
    args = ["forget", "--config", str(filled), "telegram-42", "Elm", "Street", "--yes"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "MEMORY.md: - Lives at 12 elm street, Springfield" in out
    assert "removed 1 line of MEMORY.md; 2 entries of HISTORY.md" in out
    assert files_holding(workspace_of(filled, "telegram-42"), SECRET) == []
    assert all_bytes(workspace_of(filled, "telegram-7")) == other


def test_forget_and_wipe_ask_first_and_remove_nothing_unasked(
    filled: Path, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    before = user_data(filled)
    assert main(["forget", "--config", str(filled), "telegram-42", "Elm Street"]) == 2
    assert main(["wipe", "--config", str(filled), "telegram-42"]) == 2
    err = capsys.readouterr().err
    assert err.count("nothing removed: add --yes") == 2
    assert user_data(filled) == before


def test_forget_and_wipe_refuse_while_a_bot_holds_the_folder(
    filled: Path, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    base = filled.parent / "workspaces"
    before = user_data(filled)
    with FolderLock(base):  # a running bot
        assert main(["forget", "--config", str(filled), "telegram-42", "Elm", "--yes"]) == 1
        assert "send /forget in the chat" in capsys.readouterr().err
        assert main(["wipe", "--config", str(filled), "telegram-42", "--yes"]) == 1
        err = capsys.readouterr().err
        assert "is in use by process" in err and "send /wipe in the chat" in err
        assert user_data(filled) == before
        # Export only reads: it works beside the bot.
        assert main(["export", "--config", str(filled), "telegram-42", str(filled.parent)]) == 0
    [archive] = filled.parent.glob("lightgrep-telegram-42-*.zip")
    assert f"wrote {archive}" in capsys.readouterr().out
    with zipfile.ZipFile(archive) as zipped:
        names = {n.removeprefix("telegram-42/"): zipped.read(n) for n in zipped.namelist()}
    assert names == all_bytes(workspace_of(filled, "telegram-42"))


def test_export_to_a_file_and_wipe(
    filled: Path, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    target = filled.parent / "ana.zip"
    assert main(["export", "--config", str(filled), "telegram-42", str(target)]) == 0
    assert zipfile.is_zipfile(target)
    assert main(["wipe", "--config", str(filled), "telegram-42", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "2 conversations (1 in groups)" in out and "erased the workspace of telegram-42" in out
    assert not workspace_of(filled, "telegram-42").exists()
    assert workspace_of(filled, "telegram-7").exists()
    assert main(["wipe", "--config", str(filled), "telegram-42", "--yes"]) == 1  # gone: one line
    assert "no workspace for user 'telegram-42'" in capsys.readouterr().err


# ---- SIGKILL in the middle of a forget -------------------------------------------------------


def big_workspace(base: Path) -> None:
    """Enough transcripts that a forget takes a while, each with the secret in it."""
    workspace = Workspaces(base).get("telegram-42")
    fill(workspace)
    for number in range(150):
        session = workspace.sessions.get(f"telegram:group:-{number}:42")
        for turn in range(20):
            text = f"turn {turn}: " + ("I walked down Elm Street" if turn % 5 == 0 else "hello")
            workspace.sessions.append(session, {"role": "user", "content": text})
        workspace.sessions.set_last_consolidated(session, 10)


async def test_a_sigkill_mid_forget_leaves_every_file_old_or_new_and_loadable(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    pristine = tmp_path / "pristine"
    big_workspace(pristine)
    root = pristine / "telegram-42"
    old = all_bytes(root)
    expected = tmp_path / "expected"
    shutil.copytree(pristine, expected)
    forget(Workspaces(expected).get("telegram-42"), SECRET)
    new = all_bytes(expected / "telegram-42")
    assert old.keys() - new.keys() == {"media/caption.txt", "media/note-elm-street.txt"}

    config = write_config(
        tmp_path, closed_port_url(), f'[memory]\nworkspaces_dir = "{tmp_path / "w"}"\n'
    )
    args = ["-m", "bot.cli", "forget", "--config", str(config), "telegram-42", SECRET, "--yes"]
    mixed = 0
    for _attempt in range(3):
        shutil.rmtree(tmp_path / "w", ignore_errors=True)
        shutil.copytree(pristine, tmp_path / "w")
        live = tmp_path / "w" / "telegram-42"
        history = live / "HISTORY.md"
        proc = await asyncio.create_subprocess_exec(sys.executable, *args, env=child_env)
        async with asyncio.timeout(20):
            # HISTORY.md is rewritten just before the transcripts: kill while they are.
            while history.read_bytes() == old["HISTORY.md"] and proc.returncode is None:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
        after = {k: v for k, v in all_bytes(live).items() if not k.endswith(".tmp")}
        for name, data in after.items():
            assert data in (old[name], new.get(name)), f"{name} is neither old nor new"
        state = {name: after[name] == new.get(name) for name in after}
        mixed += len(set(state.values())) == 2
        for key in list(SessionStore(live / "sessions").keys()):  # every transcript loads
            store = SessionStore(live / "sessions")
            session = store.get(key)
            assert session.messages and session.offset <= session.last_consolidated
            assert store.read_all(session)[session.offset :] == session.messages
        # The same forget again finishes the work.
        assert forget(Workspaces(tmp_path / "w").get("telegram-42"), SECRET) is not None
        assert all_bytes(live) == new
    assert mixed, "no kill landed in the middle of the forget"
