"""`lightgrep backup create|verify|restore` with no bot on the folder, in-process through main():
the round trip gives back every file (private, nothing derived or half-written), and an archive
that is damaged, altered or unsafe is refused in one line with nothing written. Under a running
bot: tests/processes/test_backup.py."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
from pathlib import Path

import pytest

from bot.cli.main import main
from memory.control.backup import MANIFEST
from memory.folder_lock import FolderLock
from memory.session import SessionStore
from memory.workspace import Workspaces
from tests.rigs.cli import closed_port_url, write_config
from tests.rigs.memory_control import all_bytes, fill

pytestmark = pytest.mark.usefixtures("keep_logging", "clean_env")


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A config whose workspaces folder holds two people and the bot-wide files."""
    workspaces = Workspaces(tmp_path / "workspaces")
    fill(workspaces.get("telegram-42"))
    fill(workspaces.get("telegram-7"))
    base = tmp_path / "workspaces"
    (base / ".chats.jsonl").write_bytes(b'{"chat": 1}\n{"chat": 2, "half-writ')
    (base / ".links.json").write_text("{}")
    (base / "telegram-42" / ".HISTORY.md.index").write_bytes(b"derived")
    (base / "telegram-42" / ".MEMORY.md.1a2b.tmp").write_bytes(b"interrupted")
    os.chmod(base / "telegram-7" / "media" / "tea.txt", 0o644)
    return write_config(tmp_path, closed_port_url())


def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    return write_config(folder, closed_port_url())


def backed_up(config: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    archive = config.parent / "backup.tar.gz"
    assert main(["backup", "create", "--config", str(config), str(archive)]) == 0
    capsys.readouterr()
    return archive


def failure(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_the_round_trip_gives_back_every_file_private_and_loadable(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = all_bytes(tmp_path / "workspaces")
    archive = backed_up(filled, capsys)
    assert main(["backup", "verify", str(archive)]) == 0
    assert "whole: " in capsys.readouterr().out

    target = elsewhere(tmp_path)
    assert main(["backup", "restore", "--config", str(target), str(archive)]) == 0
    assert "restored " in capsys.readouterr().out
    restored = target.parent / "workspaces"
    after = all_bytes(restored)
    after.pop(".lightgrep.lock")  # restore held the new folder's lock
    expected = {
        name: data
        for name, data in before.items()
        if not name.endswith((".index", ".tmp")) and name != ".lightgrep.lock"
    }
    expected[".chats.jsonl"] = b'{"chat": 1}\n'  # a line being written is left out, not cut
    assert after == expected
    for path in restored.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path
    workspace = Workspaces(restored).get("telegram-42")
    assert (
        workspace.memory.read()
        == Workspaces(tmp_path / "workspaces").get("telegram-42").memory.read()
    )
    sessions = SessionStore(workspace.sessions_dir)
    assert len(sessions.read_all(sessions.get("telegram:dm:42"))) == 6


def test_a_backup_is_written_atomically_and_refuses_to_replace_a_file(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = backed_up(filled, capsys)
    assert [p.name for p in archive.parent.iterdir() if p.name.endswith(".tmp")] == []
    assert main(["backup", "create", "--config", str(filled), str(archive)]) != 0
    assert "exists already" in failure(capsys)

    folder = filled.parent / "nightly"  # a cron line's folder, made on first use
    assert main(["backup", "create", "--config", str(filled), f"{folder}/"]) == 0
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (made,) = folder.iterdir()
    assert made.name.startswith("lightgrep-backup-") and made.name.endswith(".tar.gz")
    assert main(["backup", "verify", str(made)]) == 0


def rewritten(archive: Path, change: dict[str, bytes | None], *, manifest_too: bool) -> Path:
    """A copy of `archive` with members replaced (None: removed); the manifest made to match
    them when `manifest_too` (so only the other checks can find the change)."""
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    manifest = json.loads(members.pop(MANIFEST))
    for name, data in change.items():
        if data is None:
            members.pop(name)
        else:
            members[name] = data
        if manifest_too:
            if data is None:
                manifest["files"].pop(name)
            else:
                digest = hashlib.sha256(data).hexdigest()
                manifest["files"][name] = {"size": len(data), "sha256": digest}
    members[MANIFEST] = json.dumps(manifest).encode()
    out = archive.with_name("changed.tar")
    with tarfile.open(out, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def test_verify_finds_a_file_altered_after_the_backup(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = backed_up(filled, capsys)
    altered = rewritten(
        archive, {"telegram-42/MEMORY.md": b"## Someone else's memory\n"}, manifest_too=False
    )
    assert main(["backup", "verify", str(altered)]) != 0
    assert "telegram-42/MEMORY.md differs from its hash in the manifest" in failure(capsys)

    missing = rewritten(archive, {"telegram-7/HISTORY.md": None}, manifest_too=False)
    assert main(["backup", "verify", str(missing)]) != 0
    assert "telegram-7/HISTORY.md is in the manifest but missing" in failure(capsys)

    extra = rewritten(archive, {"telegram-7/extra.md": b"x"}, manifest_too=False)
    assert main(["backup", "verify", str(extra)]) != 0
    assert "'telegram-7/extra.md' is not in the manifest" in failure(capsys)


def test_an_archive_cut_short_is_not_whole(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = backed_up(filled, capsys)
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    assert main(["backup", "verify", str(archive)]) != 0
    line = failure(capsys)  # (cut inside a member, or where the next header would start)
    assert "is not a whole tar archive" in line or "has no manifest" in line


def unsafe(kind: str) -> tarfile.TarInfo:
    if kind == "traversal":
        return tarfile.TarInfo("telegram-42/../../evil.txt")
    if kind == "absolute":
        return tarfile.TarInfo("/tmp/evil.txt")
    info = tarfile.TarInfo("telegram-42/MEMORY.md")
    if kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, "../../config.toml"
    elif kind == "device":
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("traversal", "leads out of the folder"),
        ("absolute", "has an absolute or odd name"),
        ("symlink", "is a link"),
        ("hardlink", "is a link"),
        ("device", "is not a regular file"),
    ],
)
def test_an_unsafe_member_is_refused_and_nothing_is_restored(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, said: str
) -> None:
    archive = backed_up(filled, capsys)
    member = unsafe(kind)
    with tarfile.open(archive) as tar:
        kept = [(m, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]
    hostile = tmp_path / "hostile.tar"
    with tarfile.open(hostile, "w") as tar:
        if member.isreg():
            member.size = 6
        tar.addfile(member, io.BytesIO(b"owned\n") if member.isreg() else None)
        for info, data in kept:
            tar.addfile(info, io.BytesIO(data))

    assert main(["backup", "verify", str(hostile)]) != 0
    assert said in failure(capsys)

    target = elsewhere(tmp_path)
    assert main(["backup", "restore", "--config", str(target), str(hostile)]) != 0
    line = failure(capsys)
    assert line.startswith("lightgrep: nothing restored:") and said in line
    assert [p.name for p in (target.parent / "workspaces").iterdir()] == [".lightgrep.lock"]
    assert not (tmp_path / "evil.txt").exists()
    assert not Path("/tmp/evil.txt").exists()


def test_restore_refuses_a_folder_that_is_not_empty_or_in_use(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = backed_up(filled, capsys)
    before = all_bytes(tmp_path / "workspaces")
    assert main(["backup", "restore", "--config", str(filled), str(archive)]) != 0
    assert "is not empty: a backup is restored only into an empty folder" in failure(capsys)
    assert all_bytes(tmp_path / "workspaces") == before

    target = elsewhere(tmp_path)
    with FolderLock(target.parent / "workspaces"):
        assert main(["backup", "restore", "--config", str(target), str(archive)]) != 0
        assert "is in use by process" in failure(capsys)


def test_create_without_a_workspaces_folder_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, closed_port_url())
    assert main(["backup", "create", "--config", str(config), str(tmp_path)]) != 0
    assert "nothing to back up" in failure(capsys)
    assert main(["backup", "verify", str(tmp_path / "none.tar")]) != 0
    assert "does not exist" in failure(capsys)


async def test_a_bot_in_a_folder_deeper_than_a_socket_address_takes_backups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A socket's path may be at most 107 bytes: the bot and the command reach it through a
    descriptor of the folder then. (The bot's real holding of a person: tests/processes.)"""
    from contextlib import asynccontextmanager

    from bot.cli.backup_service import serving_backups

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    fill(Workspaces(deep / "workspaces").get("telegram-42"))
    config = write_config(deep, closed_port_url())
    held: list[str] = []

    @asynccontextmanager
    async def hold(key: str):  # type: ignore[no-untyped-def]
        held.append(key)
        yield

    archive = tmp_path / "b.tar"
    with FolderLock(deep / "workspaces"):  # as the bot holds it
        async with serving_backups(deep / "workspaces", hold, asyncio.Lock):
            args = ["backup", "create", "--config", str(config), str(archive)]
            assert await asyncio.to_thread(main, args) == 0
    assert held == ["telegram-42"]
    assert not (deep / "workspaces" / ".lightgrep.sock").exists()
    assert main(["backup", "verify", str(archive)]) == 0


def test_a_terminal_is_shown_the_progress_and_a_pipe_only_the_result(
    filled: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = backed_up(filled, capsys)  # stderr is no terminal here: no progress
    assert main(["backup", "verify", str(archive)]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["backup", "create", "--config", str(filled), str(archive.with_name("t.tar"))]) == 0
    err = capsys.readouterr().err
    assert err.startswith("\rbacking up: ") and "/2 folders, " in err and err.endswith("\n")
