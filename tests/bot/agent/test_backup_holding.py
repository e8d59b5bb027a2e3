"""A backup taken by a running bot (bot/cli/backup_service.py) through the real Agent's locks:
it waits for a person whose turn is under way, and a change of who is whom (/wipe here; /link
and /unlink take the same lock) waits for the backup to end, so the archive never holds a
person both before and after a merge. The whole bot under traffic: tests/processes."""

from __future__ import annotations

import asyncio
import tarfile
from pathlib import Path

from bot.cli.backup_service import serving_backups
from bot.cli.main import main
from memory.folder_lock import FolderLock
from tests.rigs.agent import ask, dm, make_agent, user_home
from tests.rigs.cli import closed_port_url, write_config
from tests.rigs.fakes.openai_server import FakeOpenAI, Held, completion


async def test_a_wipe_waits_for_the_backup_that_waits_for_a_turn(
    fake_llm: FakeOpenAI, tmp_path: Path, keep_logging: None, clean_env: None
) -> None:
    config = write_config(tmp_path, closed_port_url())
    workspaces = tmp_path / "workspaces"
    agent = make_agent(fake_llm, workspaces)
    fake_llm.queue(completion("Hi 1."), completion("Hi 2."))
    await ask(agent, dm("1", "hello"))
    await ask(agent, dm("2", "hello"))
    release = asyncio.Event()
    fake_llm.queue(Held(release, completion("At last.")))
    turn = asyncio.create_task(ask(agent, dm("1", "a slow question")))
    await fake_llm.wait_requests(3)
    question = await ask(agent, dm("2", "/wipe"))
    confirm = next(b.command for b in question.buttons if "confirm" in b.command)

    archive = tmp_path / "b.tar"
    hold = lambda key: agent.residents.exclusive(key, reading=True)  # noqa: E731 (as main's)
    with FolderLock(workspaces):  # as `lightgrep run` holds it
        async with serving_backups(workspaces, hold, agent.people.unchanging):
            args = ["backup", "create", "--config", str(config), str(archive)]
            backup = asyncio.create_task(asyncio.to_thread(main, args))
            await asyncio.sleep(0.5)  # the backup waits for person 1's turn
            wipe = asyncio.create_task(ask(agent, dm("2", confirm)))
            await asyncio.sleep(0.3)
            assert not backup.done() and not wipe.done()
            release.set()
            assert (await turn).text == "At last."
            assert await asyncio.wait_for(backup, 15) == 0
            await asyncio.wait_for(wipe, 15)
    assert not user_home(workspaces, "2").exists()  # wiped, after the backup
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(name.startswith(user_home(workspaces, "2").name + "/sessions/") for name in names)
    person_1 = tar_text(archive, user_home(workspaces, "1").name)
    assert "a slow question" in person_1 and "At last." in person_1  # the turn whole
    await agent.aclose()


def tar_text(archive: Path, folder: str) -> str:
    with tarfile.open(archive) as tar:
        return "".join(
            tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar
            if m.name.startswith(folder + "/sessions/")
        )
