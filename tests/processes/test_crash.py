"""SIGKILL of `lightgrep run` (a real process) under traffic and consolidation: files stay whole,
and the bot picks up where it left off. The long version is bench/crash_loop.py.

Telegram forgets an update once a getUpdates asks for a higher offset. The adapter asks for it
only once the update's turn is over (python-telegram-bot's Updater asked as soon as it had queued
the batch), and the core recognises a redelivered message by its id. Each of the two windows
that used to exist is pinned by a deterministic test below: messages waiting behind a running
turn are not acknowledged, so a kill loses none of them; a message persisted before its
acknowledgement reached Telegram is kept once after the redelivery. The loop test kills between
turns and asserts everything else; bench/crash_loop.py kills at any moment.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bench.crash_loop import Tally, Traffic, check_after_kill
from bench.harness import (
    FIRST_USER_ID,
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    last_user_text,
    read_workspaces,
    token,
    write_config,
)
from tests.rigs.fakes.openai_server import Delay

WAIT_S = 20.0
# A hang guard. The kill loop costs ~12 s of CPU (measured: four cold starts of the bot at
# ~2.6 s each, its traffic and consolidation); 90 s was overrun when three of these tests
# shared 2 cores with other work (a seventh of a core each). 150 s holds at a tenth, as the
# 30 s steps of tests/rigs/cli.py do for one cold start.
pytestmark = pytest.mark.timeout(150)


class Rig:
    """The fakes, a config and a bot process on one workspaces folder."""

    def __init__(self, folder: Path, llm: BenchLLM, telegram: BenchTelegram) -> None:
        self.folder = folder
        self.llm = llm
        self.telegram = telegram
        config = write_config(folder, llm, telegram, window_tokens=1400)
        self.bot = BotProcess(config, child_env(folder), folder / "bot.log")

    @property
    def workspaces(self) -> Path:
        return self.folder / "workspaces"

    async def kill(self) -> None:
        await self.bot.kill()
        self.telegram.epoch += 1
        await asyncio.sleep(0.05)  # the fake finishes what the dead connections had started

    def persisted(self) -> dict[str, int]:
        return dict(read_workspaces(self.workspaces).user_tokens)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    llm = await BenchLLM(latency_s=0.2, reply_words=60).start()
    telegram = await BenchTelegram().start()
    rig = Rig(tmp_path, llm, telegram)
    try:
        yield rig
    finally:
        if rig.bot.proc is not None and rig.bot.proc.returncode is None:
            await rig.bot.kill()
        await telegram.stop()
        await llm.stop()


def answered(rig: Rig, names: list[str]) -> Callable[[], bool]:
    return lambda: all(rig.telegram.answers.get(name) for name in names)


async def until(predicate: Callable[[], bool], what: str, wait_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + wait_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def settled(rig: Rig) -> bool:
    """Every delivered message is both acknowledged and persisted: no message in a window."""
    persisted = rig.persisted()
    delivered = rig.telegram.delivered_tokens()
    return all(rig.telegram.acked_token(name) and persisted.get(name) for name in delivered)


async def test_kills_under_traffic_and_consolidation_lose_and_damage_nothing(rig: Rig) -> None:
    traffic = Traffic(rig.telegram, users=3, burst=1, seed=5)
    rng = random.Random(5)
    while_down: list[str] = []
    for number in range(3):
        await rig.bot.start()
        traffic.start()
        # Sent while the bot was down: answered after the restart.
        await until(answered(rig, while_down), "catch-up")
        await asyncio.sleep(rng.uniform(0.2, 0.5))
        if number == 1:  # the second kill lands in a consolidation
            rig.llm.consolidation_started.clear()
            await asyncio.wait_for(rig.llm.consolidation_started.wait(), WAIT_S)
        traffic.running = False  # nothing new between getUpdates and a session file
        await until(lambda: settled(rig), "delivered messages acknowledged and persisted")
        await rig.kill()

        state = read_workspaces(rig.workspaces)
        assert state.problems == []  # sessions load, MEMORY.md whole, HISTORY.md entries whole
        assert state.duplicated == []
        for name in rig.telegram.delivered_tokens():
            assert state.user_tokens.get(name) == 1, name
        for name in list(traffic.owed()):  # its answer died with the bot
            traffic.write_off(name)
        traffic.running = True
        while_down = [rig.telegram.send(user, 1000 + number, rng) for user in (FIRST_USER_ID,)]
        traffic.sent += while_down

    await rig.bot.start()
    traffic.running = False  # no new messages; everything owed gets its answer
    await until(answered(rig, while_down), "catch-up")
    await until(lambda: not traffic.owed(), "the last answers")
    assert await rig.bot.terminate() == 0

    final = read_workspaces(rig.workspaces)
    assert final.problems == []
    assert final.memory_files >= 1 and rig.llm.consolidations >= 1
    assert {name: final.user_tokens.get(name) for name in traffic.sent} == dict.fromkeys(
        traffic.sent, 1
    )


async def test_messages_waiting_behind_a_running_turn_survive_a_kill(rig: Rig) -> None:
    rng = random.Random(1)
    await rig.bot.start()
    names = [rig.telegram.send(FIRST_USER_ID, seq, rng) for seq in range(3)]
    # The first is with the LLM; the other two wait for it (one user's messages run in order).
    await until(lambda: all(rig.telegram.was_delivered(n) for n in names), "delivery")
    await until(lambda: rig.llm.chat_calls >= 1, "the first turn's LLM call")
    assert not any(rig.telegram.acked_token(n) for n in names)  # no turn is over yet
    await rig.kill()
    await rig.bot.start()
    # All three come again: the first (persisted, killed mid-turn) is answered now, once.
    await until(answered(rig, names), "the answers after the restart")
    assert await rig.bot.terminate() == 0
    persisted = rig.persisted()
    assert [persisted.get(n, 0) for n in names] == [1, 1, 1]
    assert [len(rig.telegram.answers[n]) for n in names] == [1, 1, 1]


async def test_a_message_persisted_before_its_acknowledgement_is_kept_once(rig: Rig) -> None:
    rng = random.Random(2)
    await rig.bot.start()
    rig.telegram.get_updates_delay_s = 0.5  # the Bot API is 0.5 s away: the ack is in transit
    name = rig.telegram.send(FIRST_USER_ID, 0, rng)
    await until(lambda: rig.persisted().get(name) == 1, "the message in the session file")
    assert not rig.telegram.acked_token(name)
    await rig.kill()
    rig.telegram.get_updates_delay_s = 0.0
    await rig.bot.start()
    await until(lambda: bool(rig.telegram.answers.get(name)), "the answer after the restart")
    assert await rig.bot.terminate() == 0
    assert rig.persisted().get(name) == 1


async def test_a_spooled_message_killed_mid_turn_is_answered_after_the_restart(rig: Rig) -> None:
    """The instant the crash loop counted as loss: one user's four messages, the last two
    spooled (the first two are running), then acknowledged once the first two are answered;
    the bot dies while the third is persisted and its answer is with the model, the fourth
    waiting for it. Telegram has forgotten both; only the spool brings them back."""
    traffic = Traffic(rig.telegram, users=1, burst=4, seed=3)
    names = [token(FIRST_USER_ID, seq) for seq in range(4)]
    answer = rig.llm.default
    rig.llm.default = lambda body: (
        Delay(WAIT_S * 3, answer(body)) if names[2] in last_user_text(body) else answer(body)
    )  # the third message's answer never comes in this run
    await rig.bot.start()
    traffic.start()
    traffic.running = False  # these four only
    assert traffic.sent == names
    await until(answered(rig, names[:2]), "the first two answers")
    await until(
        lambda: rig.persisted().get(names[2]) == 1
        and rig.telegram.acked_token(names[2])
        and rig.telegram.acked_token(names[3]),
        "the third message persisted, the last two acknowledged",
    )
    await rig.kill()

    tally = Tally()
    check_after_kill(rig.workspaces, rig.telegram, traffic, tally, 1)
    assert (tally.lost, tally.unanswered, tally.pending_at_kill) == (set(), set(), 1)
    rig.llm.default = answer
    await rig.bot.start()
    await until(answered(rig, names), "every answer after the restart")
    assert await rig.bot.terminate() == 0
    persisted = rig.persisted()
    assert [persisted.get(n, 0) for n in names] == [1, 1, 1, 1]
    assert [len(rig.telegram.answers[n]) for n in names] == [1, 1, 1, 1]
