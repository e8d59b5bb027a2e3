"""`lightgrep import` as an operator runs it: a ChatGPT export found by /recall afterwards, the
same file again adding nothing, a hostile file one line, a LightGrep archive moved between hosts."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from bot.cli.main import main
from memory.control.export import write_archive
from memory.folder_lock import FolderLock
from memory.workspace import Workspaces
from tests.rigs.cli import closed_port_url, write_config
from tests.rigs.exports import chatgpt_conversation, claude_conversation, zipped

pytestmark = pytest.mark.usefixtures("keep_logging", "clean_env")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, closed_port_url())


def test_a_chatgpt_export_is_found_by_recall_and_a_second_import_adds_nothing(
    config: Path, tmp_path: Path, capsys
) -> None:
    export = zipped(
        tmp_path / "chatgpt.zip",
        iter(
            [chatgpt_conversation(n, 3, "the quokka sanctuary" if n == 5 else "") for n in range(9)]
        ),
    )
    args = ["import", "chatgpt", str(export), "--user", "telegram-42", "--config", str(config)]
    assert main(args) == 0
    assert (
        "imported 9 conversations (9 HISTORY.md entries) for telegram-42" in capsys.readouterr().out
    )
    history = (tmp_path / "workspaces" / "telegram-42" / "HISTORY.md").read_bytes()
    assert main(args) == 0
    assert (
        "imported 0 conversations" in (out := capsys.readouterr().out)
        and "9 imported before" in out
    )
    assert (tmp_path / "workspaces" / "telegram-42" / "HISTORY.md").read_bytes() == history
    assert main(["recall", "--config", str(config), "telegram-42", "quokka"]) == 0
    found = capsys.readouterr().out
    assert "2023-04-02" in found and "Conversation 5" in found and "Conversation 4" not in found


def test_a_claude_export_given_as_chatgpt_is_one_line_and_writes_nothing(
    config: Path, tmp_path: Path, capsys
) -> None:
    export = zipped(tmp_path / "claude.zip", iter([claude_conversation(1)]))
    args = ["import", "chatgpt", str(export), "--user", "telegram-42", "--config", str(config)]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing imported: this is not a ChatGPT export" in err
    assert "lightgrep import claude" in err
    assert not (tmp_path / "workspaces" / "telegram-42" / "HISTORY.md").exists()


def test_a_zip_bomb_is_one_line(config: Path, tmp_path: Path, capsys) -> None:
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", b"[" + b"0," * (40 << 20) + b"0]")
    args = ["import", "chatgpt", str(bomb), "--user", "telegram-42", "--config", str(config)]
    assert main(args) == 1
    assert "looks like a zip bomb" in capsys.readouterr().err


def test_beside_a_running_bot_it_refuses(config: Path, tmp_path: Path, capsys) -> None:
    export = zipped(tmp_path / "chatgpt.zip", iter([chatgpt_conversation(1)]))
    lock = FolderLock(tmp_path / "workspaces")
    lock.acquire()
    try:
        args = ["import", "chatgpt", str(export), "--user", "telegram-42", "--config", str(config)]
        assert main(args) == 1
    finally:
        lock.release()
    assert "in use by" in capsys.readouterr().err


def test_a_lightgrep_archive_moves_a_person_to_this_host(
    config: Path, tmp_path: Path, capsys
) -> None:
    old = Workspaces(tmp_path / "old-host").get("discord-7")
    old.memory.write("## Preferences\n\n- Plays the oboe\n")
    old.memory.append_history("[2025-05-01 10:00] Practised the oboe for a concert.")
    archive = tmp_path / "lightgrep-discord-7.zip"
    with archive.open("wb") as out:
        write_archive(old.root, out)
    args = ["import", "lightgrep", str(archive), "--user", "telegram-42", "--config", str(config)]
    assert main(args) == 0
    assert "restored 2 files" in capsys.readouterr().out
    assert main(["memory", "--config", str(config), "telegram-42"]) == 0
    assert "Plays the oboe" in capsys.readouterr().out
    assert main(["recall", "--config", str(config), "telegram-42", "concert"]) == 0
    assert "2025-05-01" in capsys.readouterr().out
