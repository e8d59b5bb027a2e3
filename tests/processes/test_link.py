"""/link and /unlink (issue 25) as a person uses them: `lightgrep run` as a process serving the
fake Telegram and the fake Discord, python-telegram-bot and discord.py talking to them over real
sockets. One memory for both accounts, merges that lose nothing, a SIGKILL mid-merge, codes that
cannot be guessed. The codes' clock (expiry) is driven in-process, through the real Agent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.agent.agent import Agent
from bot.commands.linking import CODE_TTL_S, LinkCodes
from bot.config import Config, LLMConfig, MemoryConfig
from bot.inbound import Inbound
from bot.outbound import BufferedOutbound
from memory.links import LINKS_FILE, LinkTable
from memory.workspace import Workspaces
from tests.rigs.cli import STEP_TIMEOUT, read_until, start_run, write_config
from tests.rigs.fakes.discord_server import FakeDiscord
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    completion,
)
from tests.rigs.fakes.telegram_server import (
    TOKEN,
    FakeTelegram,
)
from tests.rigs.link import BEA, CODE, DM_CHANNEL, TG, Person, llm_that_files


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, env: dict[str, str]
) -> AsyncIterator[tuple[Person, asyncio.subprocess.Process]]:
    dc = await FakeDiscord().start()
    config = write_config(
        tmp_path,
        fake_llm,
        f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
        f'api_base = "{tg.api_base}"\npoll_timeout_s = 1\n'
        f'[discord]\nenabled = true\ntoken = "{dc.token}"\nallow_from = ["*"]\n'
        f'api_base = "{dc.api_base}"\ngateway_url = "{dc.gateway_url}"\n',
    )
    proc = await start_run(config, env)
    try:
        assert proc.stderr is not None
        seen = ""
        while not ("telegram is ready" in seen and "discord is ready" in seen):
            seen += await read_until(proc.stderr, "is ready")
        yield Person(tg, dc), proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await dc.stop()


def links_of(workspaces: Path) -> dict[str, str]:
    return json.loads((workspaces / LINKS_FILE).read_text())["links"]


# ---- one memory on both platforms ------------------------------------------------------------


async def test_a_fact_said_on_telegram_is_remembered_on_discord_until_unlinked(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    llm_that_files(
        fake_llm,
        "[2025-03-01 10:00] Bea said she keeps bees in Lisbon.",
        "## User Information\n\n- Keeps bees in Lisbon\n",
    )
    workspaces = tmp_path / "workspaces"
    async with serving(tmp_path, fake_llm, fake_telegram, child_env) as (bea, _):
        # In a group, no code is given or taken (the answer goes to the private chat).
        refused = await bea.telegram_group("/link", "private chat only")
        assert not CODE.search(refused)
        offer = await bea.telegram("/link", "Your link code")
        assert "10 minutes" in offer and "works once" in offer
        [code] = set(CODE.findall(offer))
        wrong = await bea.discord("/link ABCDEFGH", "not valid")
        assert "Nothing was linked" in wrong and "telegram" not in wrong  # no hint whose
        question = await bea.discord(f"/link {code}", "/link confirm")
        assert "telegram-42" in question and "no memory with me here yet" in question
        linked = await bea.discord("/link confirm", "Linked:")
        assert "discord-77, telegram-42" in linked or "telegram-42, discord-77" in linked
        reused = await bea.discord(f"/link {code}", "not valid")  # one use only
        assert "Linked" not in reused

        await bea.telegram_told("now shared with discord-77")  # at once, unasked
        told = await bea.telegram("I keep bees in Lisbon", "Noted.")
        assert "now shared" not in told  # once
        await bea.telegram("/new", "fresh conversation")
        await fake_telegram.wait_until(
            lambda: "bees" in _text(workspaces / "telegram-42" / "HISTORY.md"),
            wait_s=STEP_TIMEOUT,
        )
        memory = await bea.discord("/memory", "Keeps bees in Lisbon")
        assert "Keeps bees in Lisbon" in memory
        recall = await bea.discord("/recall bees", "Lisbon")
        assert "2025-03-01" in recall
        status = await bea.telegram("/status", "Linked accounts")
        assert "telegram-42, discord-77" in status
        folders = [p.name for p in workspaces.iterdir() if p.is_dir()]
        assert sorted(f for f in folders if not f.startswith(".")) == ["telegram-42"]
        assert links_of(workspaces) == {"discord-77": "telegram-42"}

        ask = await bea.discord("/unlink", "/unlink confirm")
        assert "memory (everything said and remembered since" in ask and "stays with them" in ask
        assert "get back what you had before the link" in ask
        done = await bea.discord("/unlink confirm", "Unlinked")
        assert "stays with telegram-42" in done
        alone = await bea.discord("/memory", "I don't remember anything about you yet")
        assert "bees" not in alone
        await bea.telegram_told("discord-77 no longer shares your memory")
        still = await bea.telegram("/memory", "Keeps bees in Lisbon")
        assert "no longer shares" not in still
    assert links_of(workspaces) == {}


async def test_both_sides_with_memory_merge_without_losing_a_fact_or_an_entry(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    workspaces = tmp_path / "workspaces"
    fill(Workspaces(workspaces), "telegram-42", "Telegram", 3, sessions=1)
    fill(Workspaces(workspaces), "discord-77", "Discord", 3, sessions=1)
    fake_llm.default = lambda request: completion("Noted.")
    async with serving(tmp_path, fake_llm, fake_telegram, child_env) as (bea, _):
        question = await bea.link_telegram_to_discord()
        assert "HISTORY.md (3 entries)" in question and "merged into that memory" in question
        assert "/memory undo" in question
        linked = await bea.discord("/link confirm", "Linked:")
        assert "3 facts, 3 history entries" in linked
        memory = await bea.discord("/memory", "Discord fact 2")
        for n in range(3):
            assert f"Telegram fact {n}" in memory and f"Discord fact {n}" in memory
        recall = await bea.telegram("/recall discord event", "Discord event 2")
        assert "Discord event 0" in recall
        undo = await bea.telegram("/memory undo", "Brought back")
        assert "Discord fact" in undo  # the merge is what undo takes back
    history = _text(workspaces / "telegram-42" / "HISTORY.md")
    stamps = re.findall(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]", history, re.M)
    assert len(stamps) == 6 and stamps == sorted(stamps)  # by time, interleaved
    sessions = sorted(os.listdir(workspaces / "telegram-42" / "sessions"))
    assert len(sessions) == 2 and not (workspaces / "discord-77").exists()


async def test_sigkill_during_a_merge_then_restart_is_consistent(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    workspaces = tmp_path / "workspaces"
    many = 1500  # sessions to move, so that the merge lasts long enough to be killed in
    fill(Workspaces(workspaces), "telegram-42", "Telegram", 5, sessions=1)
    fill(Workspaces(workspaces), "discord-77", "Discord", 5, sessions=many)
    fake_llm.default = lambda request: completion("Noted.")
    journal = workspaces / ".link-journal.json"
    async with serving(tmp_path, fake_llm, fake_telegram, child_env) as (bea, proc):
        await bea.link_telegram_to_discord()
        await bea.dc.dispatch(
            "MESSAGE_CREATE", bea.dc.message(BEA, "/link confirm", channel_id=DM_CHANNEL)
        )
        async with asyncio.timeout(STEP_TIMEOUT):
            while not journal.exists():  # noqa: ASYNC110 (the event is a file appearing)
                await asyncio.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert journal.exists()  # killed mid-merge: the journal names the unfinished work
    assert (workspaces / "discord-77").is_dir()
    async with serving(tmp_path, fake_llm, fake_telegram, child_env) as (bea, _):
        memory = await bea.discord("/memory", "Discord fact 4")
        assert all(f"Telegram fact {n}" in memory for n in range(5))
    assert not journal.exists() and not (workspaces / "discord-77").exists()
    assert links_of(workspaces) == {"discord-77": "telegram-42"}
    merged = Workspaces(workspaces, writer=False).get("telegram-42")
    history = _text(merged.history_path)
    for side in ("Telegram", "Discord"):
        for n in range(5):
            assert history.count(f"{side} event {n}.") == 1
            assert merged.memory.read().count(f"{side} fact {n}") == 1
    assert len(merged.sessions.keys()) == many + 1


async def test_wrong_codes_are_throttled_even_when_the_next_one_is_right(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    async with serving(tmp_path, fake_llm, fake_telegram, child_env) as (bea, _):
        offer = await bea.telegram("/link", "Your link code")
        [code] = set(CODE.findall(offer))
        for _ in range(5):
            await bea.discord("/link 22222222", "not valid")
        throttled = await bea.discord(f"/link {code}", "Too many wrong codes")
        assert "/link confirm" not in throttled
    assert not (tmp_path / "workspaces" / LINKS_FILE).exists()


# ---- in-process: the codes' clock ------------------------------------------------------------


async def test_an_expired_code_is_refused_like_a_wrong_one(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    now = [1000.0]
    agent = Agent(
        Config(
            llm=LLMConfig(base_url=fake_llm.base_url, api_key="sk-test", model="fake-model"),
            memory=MemoryConfig(workspaces_dir=workspaces_dir),
        ),
        codes=LinkCodes(clock=lambda: now[0]),
    )
    try:
        offer = await ask(agent, "cli-ana", "/link")
        [code] = set(CODE.findall(offer))
        now[0] += CODE_TTL_S + 1
        late = await ask(agent, "telegram-9", f"/link {code}")
        assert "not valid" in late and "expired" in late
        [fresh] = set(CODE.findall(await ask(agent, "cli-ana", "/link")))
        same = await ask(agent, "cli-ana", f"/link {fresh}")
        assert "made by this account" in same
    finally:
        await agent.aclose()


async def ask(agent: Agent, user_key: str, text: str) -> str:
    from bot.inbound import Inbound

    out = BufferedOutbound()
    platform = user_key.split("-")[0]
    await agent.handle(Inbound(platform, f"{platform}:dm:{user_key}", user_key, text), out)
    return out.reply.text


# ---- helpers ---------------------------------------------------------------------------------


def fill(workspaces: Workspaces, key: str, side: str, count: int, *, sessions: int) -> None:
    """A workspace with `count` facts and history entries (interleaving by time with the other
    side's) and `sessions` conversations."""
    workspace = workspaces.get(key)
    facts = "".join(f"- {side} fact {n}\n" for n in range(count))
    workspace.memory.write(f"## User Information\n\n{facts}\n## Preferences\n\n")
    minute = 0 if side == "Telegram" else 1
    for n in range(count):
        workspace.memory.append_history(f"[2025-01-0{n + 1} 10:0{minute}] {side} event {n}.")
    folder = workspace.sessions_dir
    platform, user = key.split("-")
    chat = f"{platform}:dm:{user}"
    workspace.sessions.append(workspace.sessions.get(chat), {"role": "user", "content": "hi"})
    line = json.dumps({"role": "user", "content": f"{side} hello", "timestamp": "2025-01-01"})
    for n in range(1, sessions):  # the others written as a transcript is, without the fsyncs
        (folder / f"{platform}%3Adm%3A{n + 100_000}.jsonl").write_text(line + "\n")
    assert len(os.listdir(folder)) == sessions


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


__all__ = ["pytest"]


# ---- the operator ----------------------------------------------------------------------------


def test_the_operator_links_lists_and_unlinks_the_key_that_holds_the_workspace(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    from tests.rigs.cli import run_cli

    workspaces = tmp_path / "workspaces"
    fill(Workspaces(workspaces), "telegram-42", "Telegram", 2, sessions=1)
    fill(Workspaces(workspaces), "discord-77", "Discord", 2, sessions=1)
    config = str(write_config(tmp_path, "http://127.0.0.1:9/v1"))
    code, out, err = run_cli(child_env, "link", "discord-77", "telegram-42", "--config", config)
    assert code == 0, err
    assert "merged 2 facts, 2 history entries" in out
    again = run_cli(child_env, "link", "cli-ana", "discord-77", "--config", config)
    assert again[0] == 0 and "cli-ana" in again[1]
    code, out, _ = run_cli(child_env, "links", "--config", config)
    assert out.splitlines() == ["telegram-42: cli-ana, discord-77"]
    refused = run_cli(child_env, "link", "discord-77", "cli-bob", "--config", config)
    assert refused[0] != 0 and "unlink discord-77 first" in refused[2]
    # The key whose folder holds the memory leaves: the folder goes to the next key.
    code, out, err = run_cli(child_env, "unlink", "telegram-42", "--config", config)
    assert code == 0, err
    assert "memory stays with cli-ana, discord-77" in out
    assert links_of(workspaces) == {"discord-77": "cli-ana"}
    kept = Workspaces(workspaces, writer=False).get("cli-ana").memory.read()
    assert "Telegram fact 1" in kept and "Discord fact 1" in kept
    # It takes back what it had before the link, and only that (issue 32, item 4).
    back = Workspaces(workspaces, writer=False).get("telegram-42").memory.read()
    assert "Telegram fact 1" in back and "Discord" not in back


def test_the_operator_views_of_a_linked_key_read_its_persons_workspace(
    tmp_path: Path, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.cli.main import main
    from memory.control.link import merge
    from memory.links import LinkTable

    workspaces = Workspaces(tmp_path / "workspaces")
    fill(workspaces, "telegram-42", "Telegram", 1, sessions=1)
    fill(workspaces, "discord-77", "Discord", 1, sessions=1)
    merge(workspaces, LinkTable(workspaces.base_dir), "discord-77", "telegram-42")
    config = str(write_config(tmp_path, "http://127.0.0.1:9/v1"))
    assert main(["memory", "--config", config, "discord-77"]) == 0
    memory = capsys.readouterr().out
    assert "Telegram fact 0" in memory and "Discord fact 0" in memory
    assert main(["recall", "--config", config, "discord-77", "Telegram", "event"]) == 0
    assert "Telegram" in capsys.readouterr().out
    assert not (workspaces.base_dir / "discord-77").exists()  # read, never made


async def test_a_notice_nobody_could_be_sent_survives_a_restart_and_is_said_once(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Telegram's account has no place on file to be told at once (and no sender is
    registered): the notice waits in the workspace, through a restart, for its next answer."""
    fake_llm.default = lambda request: completion("Noted.")
    config = Config(
        llm=LLMConfig(base_url=fake_llm.base_url, api_key="sk-test", model="fake-model"),
        memory=MemoryConfig(workspaces_dir=workspaces_dir),
    )
    agent = Agent(config)
    try:
        [code] = set(CODE.findall(await ask(agent, "telegram-9", "/link")))
        await ask(agent, "cli-ana", f"/link {code}")
        assert "Linked:" in await ask(agent, "cli-ana", "/link confirm")
    finally:
        await agent.aclose()
    agent = Agent(config)  # a restart
    try:
        told = await ask(agent, "telegram-9", "hello")
        assert told.startswith("Noted.") and "now shared with cli-ana" in told
        assert "now shared" not in await ask(agent, "telegram-9", "hello again")
    finally:
        await agent.aclose()


def test_in_a_cluster_folder_the_operator_commands_refuse_and_links_says_it_is_a_copy(
    tmp_path: Path, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker ran on this folder (it left its id): the table is the cluster's, in NATS, and
    `.links.json` here is the worker's copy. Link and unlink refuse, changing nothing, and say
    what to do instead; `links` lists the copy, saying so."""
    from bot.cli.main import main
    from bot.cluster.lease import this_worker

    workspaces = Workspaces(tmp_path / "workspaces")
    fill(workspaces, "telegram-42", "Telegram", 1, sessions=1)
    fill(workspaces, "discord-77", "Discord", 1, sessions=1)
    fill(workspaces, "cli-ana", "Terminal", 1, sessions=1)
    this_worker(workspaces.base_dir)  # as `lightgrep worker` does when it starts
    LinkTable(workspaces.base_dir).link("cli-ana", "telegram-42")  # the worker's copy
    before = links_of(workspaces.base_dir)
    config = str(write_config(tmp_path, "http://127.0.0.1:9/v1"))

    assert main(["link", "--config", config, "discord-77", "telegram-42"]) != 0
    err = capsys.readouterr().err
    assert "lightgrep-links" in err and "/link <code>" in err, err
    assert main(["unlink", "--config", config, "cli-ana"]) != 0
    err = capsys.readouterr().err
    assert "lightgrep-links" in err and "send /unlink" in err, err
    assert links_of(workspaces.base_dir) == before
    assert (workspaces.base_dir / "discord-77").exists()  # nothing merged
    assert (workspaces.base_dir / "cli-ana").exists()  # nothing split

    assert main(["links", "--config", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("(a copy: the cluster's link table is in NATS, bucket lightgrep-")
    assert lines[1:] == ["telegram-42: cli-ana"]


# ---- both sides at once (issue 32, item 2) -------------------------------------------------

STOP_WITHIN_S = 20.0  # a stop ends the process (before the fix it never did), load or not


async def test_both_accounts_confirming_each_other_at_once_are_joined_once_and_answered(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    workspaces = tmp_path / "workspaces"
    fill(Workspaces(workspaces), "telegram-42", "Telegram", 3, sessions=1)
    fill(Workspaces(workspaces), "discord-77", "Discord", 3, sessions=1)
    fake_llm.default = lambda request: completion("Noted.")
    async with serving(tmp_path, fake_llm, fake_telegram, child_env) as (bea, proc):
        [tg_code] = set(CODE.findall(await bea.telegram("/link", "Your link code")))
        [dc_code] = set(CODE.findall(await bea.discord("/link", "Your link code")))
        await bea.telegram(f"/link {dc_code}", "/link confirm")
        await bea.discord(f"/link {tg_code}", "/link confirm")

        tg_before = len(bea.tg.sent_to(TG))
        dc_before = len(bea.dc.seen_in(DM_CHANNEL))
        bea.tg.dm(TG, "/link confirm")  # both at the same moment
        await bea.dc.dispatch(
            "MESSAGE_CREATE", bea.dc.message(BEA, "/link confirm", channel_id=DM_CHANNEL)
        )

        def answers() -> tuple[str, str]:
            tg = "\n".join(m.text for m in bea.tg.sent_to(TG)[tg_before:])
            dc = "\n".join(bea.dc.seen_in(DM_CHANNEL)[dc_before:])
            return tg, dc

        def both_answered() -> bool:
            return all(("Linked:" in a or "Nothing was linked" in a) for a in answers())

        await bea.tg.wait_until(both_answered, wait_s=STEP_TIMEOUT)
        tg, dc = answers()
        assert ("Linked:" in tg) != ("Linked:" in dc), (tg, dc)  # joined once
        refused = dc if "Linked:" in tg else tg
        assert "linked already" in refused and "Nothing was linked" in refused
        links = links_of(workspaces)
        assert links in ({"telegram-42": "discord-77"}, {"discord-77": "telegram-42"})
        [home] = set(links.values())
        memory = Workspaces(workspaces, writer=False).get(home).memory.read()
        for side in ("Telegram", "Discord"):
            for n in range(3):
                assert memory.count(f"{side} fact {n}") == 1

        # Both accounts are answered afterwards, from the one memory.
        assert "Noted." in await bea.telegram("hello from telegram", "Noted.")
        assert "Noted." in await bea.discord("hello from discord", "Noted.")
        shared = await bea.discord("/memory", "Telegram fact 2")
        assert "Discord fact 2" in shared

        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(STOP_WITHIN_S):
            await proc.wait()
        print(f"stopped {time.monotonic() - started:.2f} s after SIGTERM")


async def test_a_stop_during_a_merge_still_ends_the_process_with_the_merge_whole(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    workspaces = tmp_path / "workspaces"
    many = 1500  # sessions to move, so that the merge lasts long enough to be stopped in
    fill(Workspaces(workspaces), "telegram-42", "Telegram", 5, sessions=1)
    fill(Workspaces(workspaces), "discord-77", "Discord", 5, sessions=many)
    fake_llm.default = lambda request: completion("Noted.")
    journal = workspaces / ".link-journal.json"
    async with serving(tmp_path, fake_llm, fake_telegram, child_env) as (bea, proc):
        await bea.link_telegram_to_discord()
        await bea.dc.dispatch(
            "MESSAGE_CREATE", bea.dc.message(BEA, "/link confirm", channel_id=DM_CHANNEL)
        )
        async with asyncio.timeout(STEP_TIMEOUT):
            while not journal.exists():  # noqa: ASYNC110 (the event is a file appearing)
                await asyncio.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(STOP_WITHIN_S):
            await proc.wait()
    assert not journal.exists()  # the merge ran to its end before the process ended
    assert links_of(workspaces) == {"discord-77": "telegram-42"}
    merged = Workspaces(workspaces, writer=False).get("telegram-42")
    assert len(merged.sessions.keys()) == many + 1
    assert all(f"Discord fact {n}" in merged.memory.read() for n in range(5))


async def test_a_message_already_on_its_way_when_its_account_is_joined_goes_to_the_joined_memory(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """A message resolved to its account before a /link confirm of that account, still waiting
    for its platform (a slow typing indicator) when the merge takes its conversation: it is
    answered from, and kept in, the joined memory, not in a new empty folder of the account."""
    fill(Workspaces(workspaces_dir), "telegram-42", "Telegram", 2, sessions=1)
    fill(Workspaces(workspaces_dir), "discord-77", "Discord", 2, sessions=1)
    agent = Agent(_config(fake_llm, workspaces_dir))
    try:
        [code] = set(CODE.findall(await ask(agent, "telegram-42", "/link")))
        await ask(agent, "discord-77", f"/link {code}")
        slow = _SlowPlatform()
        inbound = Inbound("discord", "discord:dm:77", "discord-77", "still on its way")
        on_its_way = asyncio.create_task(agent.handle(inbound, slow))
        await asyncio.wait_for(slow.begun_event.wait(), STEP_TIMEOUT)
        assert "Linked:" in await ask(agent, "discord-77", "/link confirm")
        slow.go.set()
        await asyncio.wait_for(on_its_way, STEP_TIMEOUT)
        assert slow.reply.text.startswith("Noted.")
    finally:
        await agent.aclose()
    assert not (workspaces_dir / "discord-77").exists()
    kept = Workspaces(workspaces_dir, writer=False).get("telegram-42").sessions_dir
    assert "still on its way" in (kept / "discord%3Adm%3A77.jsonl").read_text()


class _SlowPlatform(BufferedOutbound):
    """An answer whose platform is slow to begin (a typing indicator that takes a while)."""

    def __init__(self) -> None:
        super().__init__()
        self.begun_event, self.go = asyncio.Event(), asyncio.Event()

    async def begin(self, *, private: bool = False) -> None:
        self.begun_event.set()
        await self.go.wait()
        await super().begin(private=private)


# ---- an unwanted link (issue 32, item 4) -----------------------------------------------------


async def test_an_unwanted_account_is_removed_and_leaves_with_only_what_it_brought(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """M tricked V into sharing a code and joined V's memory: V removes M from V's account;
    M takes back only its own facts, V keeps everything."""
    fill(Workspaces(workspaces_dir), "telegram-42", "Victim", 3, sessions=1)
    fill(Workspaces(workspaces_dir), "discord-77", "Mallory", 2, sessions=1)
    agent = Agent(_config(fake_llm, workspaces_dir))
    try:
        [code] = set(CODE.findall(await ask(agent, "telegram-42", "/link")))
        await ask(agent, "discord-77", f"/link {code}")
        assert "Linked:" in await ask(agent, "discord-77", "/link confirm")
        told = await ask(agent, "telegram-42", "/status")
        assert "/unlink discord-77 here removes it" in told  # the notice says what each does
        assert "only what it had before the link" in told

        wrong = await ask(agent, "telegram-42", "/unlink discord-99")
        assert "not an account of yours" in wrong and "Nothing changed" in wrong
        question = await ask(agent, "telegram-42", "/unlink discord-77")
        assert "removes discord-77" in question and "stays here" in question
        done = await ask(agent, "telegram-42", "/unlink confirm")
        assert "Removed: discord-77" in done

        victim = await ask(agent, "telegram-42", "/memory")
        assert all(f"Victim fact {n}" in victim for n in range(3))
        mallory = await ask(agent, "discord-77", "/memory")
        assert "Mallory fact 1" in mallory and "Victim" not in mallory
        assert "removed this account" in mallory  # told, under its next answer
        recall = await ask(agent, "discord-77", "/recall event")
        assert "Mallory" in recall and "Victim" not in recall
    finally:
        await agent.aclose()
    assert LinkTable(workspaces_dir).all() == {}
    assert not (workspaces_dir / "telegram-42" / ".pre-link").exists()  # alone: none kept


async def test_leaving_a_link_takes_back_only_what_the_account_had_before(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """V leaves the memory M joined (the workspace's own key leaves): V gets back its facts
    and history as they were before the link, not an empty memory, and none of M's."""
    fill(Workspaces(workspaces_dir), "telegram-42", "Victim", 3, sessions=1)
    fill(Workspaces(workspaces_dir), "discord-77", "Mallory", 2, sessions=1)
    agent = Agent(_config(fake_llm, workspaces_dir))
    try:
        [code] = set(CODE.findall(await ask(agent, "telegram-42", "/link")))
        await ask(agent, "discord-77", f"/link {code}")
        await ask(agent, "discord-77", "/link confirm")
        question = await ask(agent, "telegram-42", "/unlink")
        assert "get back what you had before the link" in question
        assert "/unlink discord-77" in question  # the other choice, said
        done = await ask(agent, "telegram-42", "/unlink confirm")
        assert "Unlinked: telegram-42" in done and "what it had before the link" in done
        victim = await ask(agent, "telegram-42", "/memory")
        assert all(f"Victim fact {n}" in victim for n in range(3)) and "Mallory" not in victim
        recall = await ask(agent, "telegram-42", "/recall event")
        assert "Victim **event** 2" in recall and "Mallory" not in recall
        shared = await ask(agent, "discord-77", "/memory")
        assert "Mallory fact 1" in shared and "Victim fact 1" in shared  # the others keep it
    finally:
        await agent.aclose()
    assert LinkTable(workspaces_dir).all() == {}


async def test_what_is_forgotten_while_linked_is_not_given_back_by_unlink(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The copy of what an account had before the link is the person's memory too: /forget
    removes the phrase from it, so leaving the link does not bring it back; /wipe takes it."""
    fill(Workspaces(workspaces_dir), "telegram-42", "Victim", 3, sessions=1)
    agent = Agent(_config(fake_llm, workspaces_dir))
    try:
        [code] = set(CODE.findall(await ask(agent, "telegram-42", "/link")))
        await ask(agent, "discord-77", f"/link {code}")
        await ask(agent, "discord-77", "/link confirm")
        asked = await ask(agent, "discord-77", "/forget Victim fact 1")
        assert "kept of before a /link" in asked
        assert "Forgotten" in await ask(agent, "discord-77", "/forget confirm")
        await ask(agent, "telegram-42", "/unlink")
        await ask(agent, "telegram-42", "/unlink confirm")
        back = await ask(agent, "telegram-42", "/memory")
        assert "Victim fact 2" in back and "Victim fact 1" not in back

        [code] = set(CODE.findall(await ask(agent, "telegram-42", "/link")))
        await ask(agent, "discord-77", f"/link {code}")
        await ask(agent, "discord-77", "/link confirm")
        await ask(agent, "discord-77", "/wipe")
        assert "erased" in (await ask(agent, "discord-77", "/wipe confirm")).lower()
    finally:
        await agent.aclose()
    assert _holding(workspaces_dir, "Victim fact") == []  # nowhere, the copy included


def _holding(folder: Path, text: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


# ---- reminders follow the account that set them (issue 32, item 10) --------------------------


async def test_after_unlink_each_account_keeps_the_reminders_it_set_while_linked(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = Agent(_config(fake_llm, workspaces_dir))
    try:
        [code] = set(CODE.findall(await ask(agent, "telegram-42", "/link")))
        await ask(agent, "discord-77", f"/link {code}")
        await ask(agent, "discord-77", "/link confirm")
        for key, what in (("discord-77", "water the plants"), ("telegram-42", "call mum")):
            assert "OK, I'll remind you" in await remind(agent, key, f"/remind in 2 hours {what}")
        both = await remind(agent, "telegram-42", "/reminders")
        assert "water the plants" in both and "call mum" in both  # one person while linked

        # The workspace's own key leaves: its reminder goes with it, the other's stays.
        await ask(agent, "telegram-42", "/unlink")
        assert "Unlinked" in await ask(agent, "telegram-42", "/unlink confirm")
        mine = await remind(agent, "telegram-42", "/reminders")
        assert "call mum" in mine and "water the plants" not in mine
        theirs = await remind(agent, "discord-77", "/reminders")
        assert "water the plants" in theirs and "call mum" not in theirs
        cancelled = await remind(agent, "discord-77", "/reminders cancel 1")
        assert "water the plants" in cancelled
    finally:
        await agent.aclose()


async def test_a_removed_account_takes_its_reminders_along(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = Agent(_config(fake_llm, workspaces_dir))
    try:
        [code] = set(CODE.findall(await ask(agent, "telegram-42", "/link")))
        await ask(agent, "discord-77", f"/link {code}")
        await ask(agent, "discord-77", "/link confirm")
        await remind(agent, "discord-77", "/remind in 2 hours my secret errand")
        await ask(agent, "telegram-42", "/unlink discord-77")
        assert "Removed" in await ask(agent, "telegram-42", "/unlink confirm")
        kept = await remind(agent, "telegram-42", "/reminders")
        assert "secret errand" not in kept
        assert "secret errand" in await remind(agent, "discord-77", "/reminders")
    finally:
        await agent.aclose()


async def remind(agent: Agent, user_key: str, text: str) -> str:
    """A private message from a chat the bot can send to later (as reminders need)."""
    from bot.inbound import Inbound

    out = BufferedOutbound()
    platform, _, user = user_key.partition("-")
    inbound = Inbound(platform, f"{platform}:dm:{user}", user_key, text, place={"chat": user})
    await agent.handle(inbound, out)
    return out.reply.text


def _config(fake_llm: FakeOpenAI, workspaces_dir: Path) -> Config:
    fake_llm.default = lambda request: completion("Noted.")
    return Config(
        llm=LLMConfig(base_url=fake_llm.base_url, api_key="sk-test", model="fake-model"),
        memory=MemoryConfig(workspaces_dir=workspaces_dir),
    )
