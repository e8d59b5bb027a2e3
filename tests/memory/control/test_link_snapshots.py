"""What each account had before its link, kept for the day it leaves (issue 32, item 4): made
whole or not at all, and a split that a crash interrupted is finished with it."""

from __future__ import annotations

import json
from pathlib import Path

from memory.control.link import JOURNAL_FILE, finish_pending, merge, split
from memory.links import LinkTable
from memory.workspace import PRE_LINK_DIR, Workspaces


def two(base: Path) -> tuple[Workspaces, LinkTable]:
    workspaces = Workspaces(base)
    for key, side in (("telegram-42", "Victim"), ("discord-77", "Mallory")):
        workspace = workspaces.get(key)
        workspace.memory.write(f"## User Information\n\n- {side} fact\n")
        workspace.memory.append_history(f"[2025-01-01 10:00] {side} event.")
    return workspaces, LinkTable(base)


def test_a_crash_mid_split_is_finished_with_what_the_account_had(tmp_path: Path) -> None:
    workspaces, table = two(tmp_path)
    merge(workspaces, table, "discord-77", "telegram-42")
    # The state a crash leaves after the table changed, before the copy was taken back.
    (tmp_path / JOURNAL_FILE).write_text(
        json.dumps({"action": "split", "member": "discord-77", "heir": "", "home": "telegram-42"})
    )
    table.unlink("discord-77")
    assert not (tmp_path / "discord-77").exists()

    again = Workspaces(tmp_path)  # the next start
    assert finish_pending(again, LinkTable(tmp_path)) == "split of discord-77"
    back = again.get("discord-77")
    assert "Mallory fact" in back.memory.read() and "Victim" not in back.memory.read()
    assert "Mallory event" in back.history_path.read_text()
    assert "Mallory fact" in again.get("telegram-42").memory.read()  # the others keep it
    assert not (tmp_path / JOURNAL_FILE).exists()
    assert not (tmp_path / "telegram-42" / PRE_LINK_DIR).exists()  # both alone: none kept


def test_a_copy_half_made_by_a_crash_is_made_again_whole(tmp_path: Path) -> None:
    workspaces, table = two(tmp_path)
    half = tmp_path / "telegram-42" / PRE_LINK_DIR / ".discord-77.tmp"
    half.mkdir(parents=True)
    (half / "MEMORY.md").write_text("## User Information\n\n- half of it\n")
    merge(workspaces, table, "discord-77", "telegram-42")
    assert not half.exists()
    split(workspaces, table, "discord-77")
    back = Workspaces(tmp_path).get("discord-77").memory.read()
    assert "Mallory fact" in back and "half of it" not in back
