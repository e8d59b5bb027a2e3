"""The chats' settings on disk (bot/chats.py): a /persona or /group change is one line appended
in a thread, never the whole file rewritten on the event loop (issue 32, 12: 1.1-1.6 s per
change at 20,000 chats); a crash at any instant leaves a book that loads; the log is rewritten
whole only when it holds many more lines than chats, and when /wipe takes a person's off it."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

import bot.chats
from bot.chats import CHATS_FILE, OLD_CHATS_FILE, ChatBook, ChatSettings, chat_of
from tests.rigs.agent import ask, dm, group, make_agent
from tests.rigs.fakes.openai_server import FakeOpenAI, completion

PERSONA = "Answer like a patient librarian who loves maps. " * 40  # ~2,000 characters


def many_chats(workspaces: Path, count: int) -> None:
    """A book of `count` groups with long personas, as a bot that has run long would hold."""
    chats = {f"tg:-{n}": ChatSettings(trigger="always", persona=PERSONA) for n in range(count)}
    ChatBook(workspaces)._rewrite(chats)


def admin_in(chat: str, user: str, text: str):  # type: ignore[no-untyped-def]
    return replace(group(chat, user, text), chat_key=f"tg:{chat}", chat_admin=True)


async def test_a_persona_change_is_appended_off_the_loop_never_the_whole_file_rewritten(
    fake_llm: FakeOpenAI, workspaces_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a slow disk (fsync 0.3 s) the loop must tick while the change is synced (before: the
    whole 2,000-chat file was rewritten and fsynced on the loop, which stood still), and the file
    keeps every byte it had: the change is one more line."""
    many_chats(workspaces_dir, 2000)
    log_file = workspaces_dir / CHATS_FILE
    before, inode = log_file.read_bytes(), log_file.stat().st_ino
    agent = make_agent(fake_llm, workspaces_dir)
    assert agent.chats.get("tg:-5").persona == PERSONA

    real_fsync = os.fsync
    syncs: list[tuple[float, float]] = []

    def slow_fsync(fd: int) -> None:
        start = time.monotonic()
        time.sleep(0.3)
        real_fsync(fd)
        syncs.append((start, time.monotonic()))

    monkeypatch.setattr(os, "fsync", slow_fsync)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.01)
            ticks.append(time.monotonic())

    running = asyncio.create_task(ticker())
    reply = await ask(agent, admin_in("-7", "9", "/persona Speak only in haiku."))
    running.cancel()
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert "From the next message on" in reply.text
    assert syncs, "nothing was synced to the disk"
    for start, end in syncs:
        assert any(start < tick < end for tick in ticks), "the loop stood still during an fsync"
    after = log_file.read_bytes()
    assert log_file.stat().st_ino == inode and after.startswith(before)
    assert [json.loads(line) for line in after[len(before) :].splitlines()] == [
        {"chat": "tg:-7", "settings": {"trigger": "always", "persona": "Speak only in haiku."}}
    ]
    await agent.aclose()
    assert ChatBook(workspaces_dir).get("tg:-7").persona == "Speak only in haiku."  # a restart


async def test_a_crash_mid_change_leaves_a_book_that_loads(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """A crash tears at most the last line (an append cut short) or leaves a rewrite's temp
    file: the next start loads every whole change, and the next change lands on its own line."""
    agent = make_agent(fake_llm, workspaces_dir)
    await ask(agent, admin_in("-1", "9", "/group trigger always"))
    await ask(agent, admin_in("-2", "9", "/persona Be brief."))
    await agent.aclose()
    log_file = workspaces_dir / CHATS_FILE
    whole = log_file.read_bytes()
    torn = b'{"chat": "tg:-3", "settings": {"persona": "Be lo'
    log_file.write_bytes(whole + torn)  # the crash: the third change cut short
    (workspaces_dir / f".{CHATS_FILE}.1a2b3c4d.tmp").write_bytes(b'{"chat": "tg:-9", "sett')

    book = ChatBook(workspaces_dir)  # the next start
    assert book.get("tg:-1").trigger == "always"
    assert book.get("tg:-2").persona == "Be brief."
    assert book.get("tg:-3") == ChatSettings() and book.get("tg:-9") == ChatSettings()
    book.set("tg:-3", ChatSettings(persona="Be long."))
    assert await book.saved() is None
    assert ChatBook(workspaces_dir).get("tg:-3").persona == "Be long."
    assert ChatBook(workspaces_dir).get("tg:-2").persona == "Be brief."


async def test_the_log_is_rewritten_when_it_outgrows_its_chats_and_reads_the_same(
    fake_llm: FakeOpenAI, workspaces_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bot.chats, "SLACK_LINES", 10)
    agent = make_agent(fake_llm, workspaces_dir)
    for n in range(30):
        assert (
            "Done." in (await ask(agent, admin_in("-1", "9", f"/group trigger keyword w{n}"))).text
        )
    await ask(agent, admin_in("-2", "9", "/persona Be brief."))
    await agent.aclose()
    lines = (workspaces_dir / CHATS_FILE).read_bytes().splitlines()
    assert len(lines) <= 2 * 2 + 10 + 1  # rewritten: not one line per change
    book = ChatBook(workspaces_dir)
    assert book.get("tg:-1").words == ("w29",) and book.get("tg:-2").persona == "Be brief."


async def test_an_older_folders_chats_json_is_read_and_becomes_the_log(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    old = {"tg:-1": {"trigger": "always"}, "tg:-2": {"persona": "Be brief."}}
    (workspaces_dir / OLD_CHATS_FILE).write_text(json.dumps(old))
    agent = make_agent(fake_llm, workspaces_dir)
    assert "always" in (await ask(agent, admin_in("-1", "9", "/group"))).text
    await ask(agent, admin_in("-3", "9", "/persona Be kind."))
    await agent.aclose()
    assert not (workspaces_dir / OLD_CHATS_FILE).exists()
    book = ChatBook(workspaces_dir)
    assert book.get("tg:-1").trigger == "always"
    assert book.get("tg:-2").persona == "Be brief." and book.get("tg:-3").persona == "Be kind."


async def test_a_change_the_disk_refuses_is_said_held_and_written_once_it_can(
    fake_llm: FakeOpenAI, workspaces_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bot.chats, "RETRY_S", 0.05)
    agent = make_agent(fake_llm, workspaces_dir)
    real_fsync, failures = os.fsync, [1]

    def full_disk(fd: int) -> None:
        if failures:
            failures.pop()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    reply = await ask(agent, dm("7", "/persona Talk like a pirate."))
    assert "could not save it to disk yet: No space left on device" in reply.text
    fake_llm.queue(completion("Arr."))
    await ask(agent, dm("7", "hi"))
    assert "pirate" in str(fake_llm.chat_requests[-1]["messages"][0])  # it holds meanwhile
    assert await agent.chats.saved() is None  # tried again: on disk now
    await agent.aclose()
    assert ChatBook(workspaces_dir).get(chat_of(dm("7", ""))).persona == "Talk like a pirate."


async def test_wipe_takes_a_reset_persona_off_the_disk_too(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """A reset persona's text stays in an earlier line of the log until it is rewritten: a
    /wipe of its person rewrites it, so none of their words stay on disk."""
    agent = make_agent(fake_llm, workspaces_dir)
    await ask(agent, admin_in("-1", "8", "/persona A group's own words."))
    await ask(agent, dm("7", "/persona My secret sea shanty style."))
    await ask(agent, dm("7", "/persona reset"))
    assert b"secret sea shanty" in (workspaces_dir / CHATS_FILE).read_bytes()
    fake_llm.queue(completion("Hello."))
    await ask(agent, dm("7", "hello"))  # (someone the bot keeps something about)
    question = await ask(agent, dm("7", "/wipe"))
    confirm = next(b.command for b in question.buttons if "confirm" in b.command)
    await ask(agent, dm("7", confirm))
    log_file = (workspaces_dir / CHATS_FILE).read_bytes()
    assert b"secret sea shanty" not in log_file and b"group's own words" in log_file
    await agent.aclose()
