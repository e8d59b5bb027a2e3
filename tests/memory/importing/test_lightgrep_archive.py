"""A LightGrep /export archive brought to another host: into an empty workspace every file comes
back as it was; into one with files it is merged as /link merges; a hostile archive is refused."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from memory.control.export import write_archive
from memory.importing.restore import restore
from memory.importing.sources import ImportRefused
from memory.workspace import Workspaces
from tests.rigs.memory_control import all_bytes, fill

REMINDER = b'{"type": "set", "id": "r1", "text": "call mum", "due": "2030-01-01T09:00:00+00:00"}\n'


def _archive(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    old_host = Workspaces(tmp_path / "old")
    workspace = old_host.get("telegram-42")
    fill(workspace)
    (workspace.root / "reminders.jsonl").write_bytes(REMINDER)
    (workspace.root / "preferences.json").write_text('{"timezone": "Europe/Paris"}')
    path = tmp_path / "lightgrep-telegram-42.zip"
    with path.open("wb") as out:
        write_archive(workspace.root, out, {"links.json": b'{"members": ["discord-7"]}'})
    return path, all_bytes(workspace.root)


def test_into_an_empty_workspace_every_file_comes_back(tmp_path: Path) -> None:
    archive, before = _archive(tmp_path)
    new_host = Workspaces(tmp_path / "new")
    restored = restore(new_host, "discord-9", archive)
    assert not restored.merged
    after = all_bytes(new_host.root_of("discord-9"))
    assert {name: data for name, data in after.items() if name != ".key"} == before
    assert not [p for p in (tmp_path / "new").iterdir() if p.name.startswith(".arriving")]
    workspace = Workspaces(tmp_path / "new").get("discord-9")
    assert "12 elm street" in workspace.memory.read()


def test_into_a_workspace_with_files_it_merges_as_link_does(tmp_path: Path) -> None:
    archive, _ = _archive(tmp_path)
    new_host = Workspaces(tmp_path / "new")
    mine = new_host.get("discord-9")
    mine.memory.write("## Preferences\n\n- Likes black coffee\n")
    mine.memory.append_history("[2026-01-02 08:00] Talked about coffee.")
    restored = restore(new_host, "discord-9", archive)
    assert restored.merged and restored.facts >= 2 and restored.entries == 3
    memory = new_host.get("discord-9").memory.read()
    assert "Likes black coffee" in memory and "Lives at 12 elm street" in memory
    history = new_host.get("discord-9").history_path.read_text()
    assert history.index("coffee") < history.index("green tea")  # by time
    assert (new_host.root_of("discord-9") / "reminders.jsonl").read_bytes() == REMINDER
    newest = new_host.get("discord-9").memory.versions()[-1].read_text()
    assert newest == "## Preferences\n\n- Likes black coffee\n"  # /memory undo takes it back
    again = restore(new_host, "discord-9", archive)
    assert again.facts == 0 and again.entries == 0


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize(
    ("members", "said"),
    [
        ({"w/MEMORY.md": b"x", "w/../../evil.sh": b"rm -rf"}, "outside its folder"),
        ({"/etc/cron.d/x": b"x"}, "outside its folder"),
        ({"w/MEMORY.md": b"x", "w/HISTORY.md": b"\0" * (50 << 20)}, "zip bomb"),
        ({"conversations.json": b"[]"}, "not a LightGrep archive"),
    ],
)
def test_a_hostile_archive_is_refused_and_nothing_is_left(
    tmp_path: Path, members: dict[str, bytes], said: str
) -> None:
    workspaces = Workspaces(tmp_path / "new")
    workspaces.base_dir.mkdir(parents=True)
    with pytest.raises(ImportRefused, match=said):
        restore(workspaces, "discord-9", _zip(tmp_path / "a.zip", members))
    assert list(workspaces.base_dir.iterdir()) == []
    assert not (tmp_path / "evil.sh").exists()
