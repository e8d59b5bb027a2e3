"""ChatGPT and Claude exports into HISTORY.md: what a person finds in their history afterwards,
a second import adding nothing, an import stopped mid-way finished, hostile files refused."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from memory.control.history_merge import entries as history_entries
from memory.importing.formats import conversations
from memory.importing.history import MAX_ENTRY_CHARS, Ledger, entries, import_conversations
from memory.importing.sources import ImportRefused, open_json
from memory.workspace import Workspace, Workspaces
from tests.rigs.exports import chatgpt_conversation, claude_conversation, write_list, zipped


def _workspace(tmp_path: Path) -> Workspace:
    return Workspaces(tmp_path / "workspaces").get("telegram-42")


def _import(workspace: Workspace, service: str, path: Path) -> tuple[int, int, int]:
    with open_json(path) as opened:
        done = import_conversations(
            workspace.memory, service, conversations(opened.stream, service, name=path.name)
        )
    return done.conversations, done.entries, done.skipped


def _history(workspace: Workspace) -> list[str]:
    return list(history_entries(workspace.history_path))


def test_chatgpt_zip_keeps_the_branch_the_person_kept_at_its_own_time(tmp_path: Path) -> None:
    export = zipped(
        tmp_path / "export.zip",
        iter([chatgpt_conversation(n, 3, "kiwi" if n == 2 else "") for n in range(3)]),
        folder="chatgpt-export/",
    )
    workspace = _workspace(tmp_path)
    assert _import(workspace, "chatgpt", export) == (3, 3, 0)
    found = _history(workspace)
    assert found[2].startswith('[2023-03-30 10:40] ChatGPT conversation "Conversation 2" (1/1;')
    assert "Me: Question 0 of conversation 2 kiwi" in found[2]
    assert "ChatGPT: Answer 0 to conversation 2." in found[2]
    assert "DROPPED" not in workspace.history_path.read_text()  # the regenerated-away answer
    assert "Question 2 of conversation 2" in found[2]


def test_claude_json_becomes_entries_and_a_second_import_adds_nothing(tmp_path: Path) -> None:
    export = tmp_path / "conversations.json"
    with export.open("w") as out:
        write_list(out, iter([claude_conversation(n, 2) for n in range(4)]))
    workspace = _workspace(tmp_path)
    assert _import(workspace, "claude", export) == (4, 4, 0)
    before = workspace.history_path.read_bytes()
    assert "Claude: Answer 1 to chat 3." in before.decode()
    assert _import(workspace, "claude", export) == (0, 0, 4)
    assert workspace.history_path.read_bytes() == before


def test_a_long_conversation_is_cut_between_turns_into_bounded_entries(tmp_path: Path) -> None:
    long = chatgpt_conversation(1, 60, "x" * 200)
    for node in long["mapping"].values():
        if node["message"] and node["message"]["author"]["role"] == "assistant":
            node["message"]["content"]["parts"] = ["A long answer. " * 20]
    export = tmp_path / "c.json"
    export.write_text(json.dumps([long]))
    workspace = _workspace(tmp_path)
    _import(workspace, "chatgpt", export)
    found = _history(workspace)
    assert len(found) > 4
    assert all(len(entry) <= MAX_ENTRY_CHARS + 20 for entry in found)
    assert [entry.split("(")[1].split(";")[0] for entry in found] == [
        f"{n}/{len(found)}" for n in range(1, len(found) + 1)
    ]
    for entry in found:  # every turn whole in one entry
        for line in entry.splitlines()[1:]:
            assert line.startswith(("Me: ", "ChatGPT: "))
    assert found[-1].startswith("[2023-03-29 11:")  # a later part at its own first message's time


def test_an_import_stopped_inside_a_conversation_is_finished_without_repeats(
    tmp_path: Path,
) -> None:
    item = chatgpt_conversation(7, 40, "y" * 300)
    for node in item["mapping"].values():
        if node["message"] and node["message"]["author"]["role"] == "assistant":
            node["message"]["content"]["parts"] = ["Some answer words. " * 30]
    export = tmp_path / "c.json"
    export.write_text(json.dumps([item]))
    workspace = _workspace(tmp_path)
    # What a crash after the first entry leaves: the begun record and part 1.
    conversation = next(conversations(io.BytesIO(export.read_bytes()), "chatgpt"))
    parts = entries("chatgpt", conversation, "chatgpt:gpt-000007")
    assert len(parts) >= 3
    Ledger(workspace.root).record("begun", "chatgpt:gpt-000007")
    workspace.memory.append_history(parts[0][1], parts[0][0])
    assert _import(workspace, "chatgpt", export) == (1, len(parts) - 1, 0)
    texts = _history(workspace)
    assert len(texts) == len(parts) and len(set(texts)) == len(parts)
    assert _import(workspace, "chatgpt", export) == (0, 0, 1)


def _bomb(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", b"[" + b" " * (60 << 20) + b"]")
    return path


def _traversal(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("../../conversations.json", b"[]")
    return path


def _deep(path: Path) -> Path:
    path.write_bytes(b"[" + b'{"a":' * 300_000 + b"1" + b"}" * 300_000 + b"]")
    return path


def _cut(path: Path) -> Path:
    path.write_text(json.dumps([chatgpt_conversation(n) for n in range(3)])[:-300])
    return path


def _wrong(path: Path) -> Path:
    path.write_text(json.dumps([claude_conversation(1)]))
    return path


def _not_json(path: Path) -> Path:
    path.write_bytes(b"\x89PNG\r\n a picture, not an export")
    return path


@pytest.mark.parametrize(
    ("make", "said", "kept"),
    [
        (_bomb, "looks like a zip bomb", 0),
        (_traversal, "outside its folder", 0),
        (_deep, "nests deeper than any export does", 0),
        (_cut, "cut short (after 2 conversations)", 2),
        (_wrong, "not a ChatGPT export (it looks like Claude's", 0),
        (_not_json, "not valid JSON", 0),
    ],
)
def test_a_hostile_or_broken_file_is_one_line_and_nothing_half_written(
    tmp_path: Path, make, said: str, kept: int
) -> None:
    workspace = _workspace(tmp_path)
    with pytest.raises(ImportRefused) as refused:
        _import(workspace, "chatgpt", make(tmp_path / "export.zip"))
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert len(_history(workspace)) == kept  # whole conversations only, each recorded
    assert len(Ledger(workspace.root).done) == kept and not Ledger(workspace.root).begun
