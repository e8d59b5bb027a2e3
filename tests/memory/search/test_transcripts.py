"""The derived text of the consolidated messages (memory/search/transcripts.py): derived, so any
damage (deleted, torn state, a crash between its two writes, a transcript rewritten) is rebuilt
from the transcripts, with each message once."""

from __future__ import annotations

import os
from pathlib import Path

from memory.search import transcripts
from memory.workspace import Workspace, Workspaces


def said(workspace: Workspace, key: str, *texts: str, consolidate: bool = True) -> None:
    session = workspace.sessions.get(key)
    for text in texts:
        workspace.sessions.append(session, {"role": "user", "content": text})
        workspace.sessions.append(session, {"role": "assistant", "content": f"About {text}?"})
    if consolidate:
        workspace.sessions.set_last_consolidated(session, session.total)


def found(workspace: Workspace, query: str) -> list[str]:
    result = transcripts.search(workspace.history_path, workspace.sessions_dir, query, limit=50)
    return [hit.text.split("] ", 1)[1] for hit in result.hits if hit.conversation]


def workspace_with_talk(workspaces_dir: Path) -> Workspace:
    workspace = Workspaces(workspaces_dir).get("telegram-42")
    said(workspace, "telegram:dm:42", "kayak trip to Bergen", "kayak repair in Oslo")
    said(workspace, "telegram:group:-5:42", "kayak club meeting")
    said(workspace, "telegram:dm:42", "kayak not consolidated yet", consolidate=False)
    return workspace


EXPECTED = ["kayak club meeting", "kayak repair in Oslo", "kayak trip to Bergen"]


def test_only_the_persons_consolidated_messages_are_found(workspaces_dir: Path) -> None:
    workspace = workspace_with_talk(workspaces_dir)
    assert sorted(found(workspace, "kayak")) == EXPECTED  # no answer, nothing unconsolidated
    assert found(workspace, "About") == []


def test_damage_is_rebuilt_with_each_message_once(workspaces_dir: Path) -> None:
    workspace = workspace_with_talk(workspaces_dir)
    derived = transcripts.derived_path(workspace.root)
    state = workspace.root / transcripts.STATE
    assert sorted(found(workspace, "kayak")) == EXPECTED
    whole = derived.read_bytes()

    derived.unlink()
    assert sorted(found(workspace, "kayak")) == EXPECTED
    state.write_text('{"size": 1, "ino"')  # torn
    assert sorted(found(workspace, "kayak")) == EXPECTED
    with derived.open("ab") as f:  # appended, then a crash before the state was written
        f.write(b"[2026-01-01 10:00] kayak trip to Bergen\n\n")
    assert sorted(found(workspace, "kayak")) == EXPECTED
    assert derived.read_bytes() == whole


def test_a_rewritten_transcript_is_read_again(workspaces_dir: Path) -> None:
    workspace = workspace_with_talk(workspaces_dir)
    assert sorted(found(workspace, "kayak")) == EXPECTED
    session = workspace.sessions.get("telegram:dm:42")
    text = session.path.read_text().replace("kayak repair in Oslo", "canoe repair in Oslo")
    replaced = session.path.with_suffix(".new")
    replaced.write_text(text)
    os.replace(replaced, session.path)  # as /forget rewrites one: a new inode
    assert sorted(found(workspace, "kayak")) == ["kayak club meeting", "kayak trip to Bergen"]
    assert found(workspace, "canoe") == ["canoe repair in Oslo"]


def test_more_consolidated_is_appended_not_rebuilt(workspaces_dir: Path) -> None:
    workspace = workspace_with_talk(workspaces_dir)
    assert sorted(found(workspace, "kayak")) == EXPECTED
    derived = transcripts.derived_path(workspace.root)
    inode = derived.stat().st_ino
    session = workspace.sessions.get("telegram:dm:42")
    workspace.sessions.set_last_consolidated(session, session.total)  # the rest filed
    said(workspace, "telegram:dm:42", "kayak sold")
    assert sorted(found(workspace, "kayak")) == sorted(
        [*EXPECTED, "kayak not consolidated yet", "kayak sold"]
    )
    assert derived.stat().st_ino == inode


def test_the_operators_read_only_search_writes_nothing(workspaces_dir: Path) -> None:
    workspace = workspace_with_talk(workspaces_dir)
    result = transcripts.search(
        workspace.history_path, workspace.sessions_dir, "kayak", update=False
    )
    assert result.total == 0
    assert not transcripts.derived_path(workspace.root).exists()
