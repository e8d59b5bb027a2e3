"""Reminders in `lightgrep run`, a real process on the fake Telegram and the fake model: set by
/remind and by the model's tool, sent in the chat they were asked in within a second of their
time; listed and cancelled; repeating; a bad `when` answered with the forms that work; nobody
off the allow list can set one; /export holds them, /forget and /wipe remove them; a SIGKILL
before the time sends it once, late, after the restart, and a clean stop never sends one twice.
(Two tests, four cold starts: each costs seconds of CPU.)"""

from __future__ import annotations

import asyncio
import io
import json
import time
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench.harness import BotProcess
from memory import clock
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, tool_call
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.reminders import (
    LATE_S,
    answer,
    bot_process,
    due_of,
    records,
    run_config,
    texts,
    until,
    wall_time,
)

pytestmark = pytest.mark.timeout(120)
GROUP = -1001


@pytest.fixture
async def bot(
    tmp_path: Path,
    fake_llm: FakeOpenAI,
    fake_telegram: FakeTelegram,
    child_env: dict[str, str],
) -> AsyncIterator[BotProcess]:
    process = bot_process(tmp_path, run_config(tmp_path, fake_llm, fake_telegram), child_env)
    await process.start()
    try:
        yield process
    finally:
        if process.proc is not None and process.proc.returncode is None:
            await process.kill()


def on_time(telegram: FakeTelegram, chat: int, text: str, due: float) -> None:
    """Sent once, in that chat, at its time (never before it; LATE_S after it at most)."""
    [sent] = texts(telegram, chat, text)
    late = wall_time(sent) - due
    assert -0.05 <= late <= LATE_S, f"sent {late:+.3f} s from its time"


def echo_tool_result(request: dict[str, Any]) -> dict[str, Any]:
    """The model's second round: it tells the person what its tool said."""
    result = [m for m in request["messages"] if m["role"] == "tool"][-1]["content"]
    return completion(f"Done. {result}")


async def test_set_by_command_and_by_the_model_sent_in_the_right_chat_on_time(
    bot: BotProcess, fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    workspaces = tmp_path / "workspaces"
    fake_telegram.dm(42, "/remind in 2 seconds take the bread out")
    said = await answer(fake_telegram, 42, "OK, I'll remind you", bot)
    assert said.text.endswith("(UTC): take the bread out")

    # In conversation: the model calls remind, and says what was set.
    fake_llm.queue(
        completion(None, [tool_call("remind", {"action": "set", "when": "in 3 seconds",
                                               "what": "water the plants"})]),
        echo_tool_result,
    )  # fmt: skip
    fake_telegram.dm(42, "remind me in 3 seconds to water the plants")
    told = await answer(fake_telegram, 42, "Done. OK, I'll remind you", bot)
    assert "water the plants" in told.text

    # In a group: sent in the group, naming the person.
    fake_telegram.group(GROUP, 43, "/remind in 2 seconds book the tickets")
    await answer(fake_telegram, GROUP, "OK, I'll remind you here in this chat", bot)

    bread = due_of(workspaces, "telegram-42", "bread").timestamp()
    plants = due_of(workspaces, "telegram-42", "plants").timestamp()
    tickets = due_of(workspaces, "telegram-43", "tickets").timestamp()
    await answer(fake_telegram, 42, "⏰ Reminder: take the bread out", bot)
    await answer(fake_telegram, 42, "⏰ Reminder: water the plants", bot)
    await answer(fake_telegram, GROUP, "⏰ Reminder for User43: book the tickets", bot)
    on_time(fake_telegram, 42, "⏰ Reminder: take the bread out", bread)
    on_time(fake_telegram, 42, "⏰ Reminder: water the plants", plants)
    on_time(fake_telegram, GROUP, "⏰ Reminder for User43: book the tickets", tickets)
    assert not texts(fake_telegram, 43, "tickets")  # the group's, not in a private chat

    # The model knows it reminded them: the reminder is in the session it was asked in (noted
    # once the platform took it: after the fake saw it, so waited for).
    def transcript() -> str:
        return "".join(p.read_text() for p in (workspaces / "telegram-42" / "sessions").iterdir())

    await fake_telegram.wait_until(lambda: "⏰ Reminder: water the plants" in transcript())

    # A bad `when`: the forms that work, and nothing set.
    before = len(records(workspaces, "telegram-42"))
    fake_telegram.dm(42, "/remind sometime soon call mum")
    bad = await answer(fake_telegram, 42, "I couldn't tell when", bot)
    assert "in 10 minutes, in 2 hours, at 18:30, tomorrow at 9, friday 18:30" in bad.text
    assert "every day at 8:00, every monday at 9" in bad.text
    fake_telegram.dm(42, "/remind 2020-01-01 10:00 too late")
    await answer(fake_telegram, 42, "That time has passed already", bot)
    assert len(records(workspaces, "telegram-42")) == before

    # Strangers, and group members not on the allow list, cannot set one.
    fake_telegram.dm(99, "/remind in 1 second sneak in")
    await answer(fake_telegram, 99, "not on its allow list", bot)
    fake_telegram.group(GROUP, 98, "/remind in 1 second sneak in")
    handled = fake_telegram.last_update_id
    await until(lambda: fake_telegram.acked(handled), "the group message handled", bot)
    assert not (workspaces / "telegram-99").exists() and not (workspaces / "telegram-98").exists()
    assert not texts(fake_telegram, GROUP, "sneak")

    # Listed, numbered, with their next time; cancelled by number and all at once.
    fake_telegram.dm(42, "/remind in 1 hour call the dentist")
    fake_telegram.dm(42, "/remind tomorrow at 9 buy milk")
    await until(lambda: len(texts(fake_telegram, 42, "OK, I'll remind you")) == 4, "both set", bot)
    fake_telegram.dm(42, "/reminders")
    listing = await answer(fake_telegram, 42, "Your reminders (times in UTC)", bot)
    assert "1. today at " in listing.text or "1. tomorrow at " in listing.text
    assert ": call the dentist\n2. tomorrow at 09:00: buy milk" in listing.text
    fake_telegram.dm(42, "/reminders cancel 1")
    await answer(fake_telegram, 42, "Cancelled: call the dentist", bot)
    fake_telegram.dm(42, "/reminders")
    await until(lambda: len(texts(fake_telegram, 42, "Your reminders")) == 2, "the list", bot)
    assert "dentist" not in texts(fake_telegram, 42, "Your reminders")[1].text
    fake_telegram.dm(42, "/reminders cancel all")
    await answer(fake_telegram, 42, "Cancelled: buy milk", bot)
    await restarts_send_once(bot, fake_telegram, workspaces)


async def restarts_send_once(
    bot: BotProcess, fake_telegram: FakeTelegram, workspaces: Path
) -> None:
    """SIGKILL before a reminder's time: sent once after the restart, saying it is late and
    when it was due. A clean stop (SIGTERM) after one was sent: never sent again."""
    fake_telegram.dm(42, "/remind in 2 seconds take the pills")
    await until(lambda: texts(fake_telegram, 42, "pills"), "the pills set", bot)
    await bot.kill()  # SIGKILL before its time
    due = due_of(workspaces, "telegram-42", "pills")
    await asyncio.sleep(max(0.0, due.timestamp() - time.time()) + 0.2)  # the time passes
    await bot.start()
    late = await answer(fake_telegram, 42, "⏰ Reminder (late", bot)
    shown = f"{due:%H:%M:%S}" if due.second else f"{due:%H:%M}"
    assert late.text == f"⏰ Reminder (late: it was due today at {shown}, UTC): take the pills"

    fake_telegram.dm(42, "/remind in 1 second feed the cat")
    await answer(fake_telegram, 42, "⏰ Reminder: feed the cat", bot)
    assert await bot.terminate() == 0  # a clean stop
    await bot.start()
    fake_telegram.dm(42, "/remind in 1 second water the fern")
    await answer(fake_telegram, 42, "⏰ Reminder: water the fern", bot)
    # Sent in order of time: one sent again would have come before this one.
    assert len(texts(fake_telegram, 42, "⏰ Reminder (late: it was due")) == 1
    assert len(texts(fake_telegram, 42, "⏰ Reminder: feed the cat")) == 1
    assert await bot.terminate() == 0


async def test_repeats_export_forget_and_wipe(
    bot: BotProcess, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    workspaces = tmp_path / "workspaces"
    fake_telegram.dm(42, "/remind every 2 seconds stretch")
    await answer(fake_telegram, 42, "then every 2 seconds", bot)
    await until(
        lambda: len(texts(fake_telegram, 42, "⏰ Reminder (every 2 seconds): stretch")) >= 2,
        "the second time",
        bot,
    )
    first = due_of(workspaces, "telegram-42", "stretch")

    def delivered() -> list[dict[str, Any]]:
        return [r for r in records(workspaces, "telegram-42") if r["type"] == "delivered"]

    await until(lambda: len(delivered()) >= 2, "both recorded", bot)  # just after each send
    sent = delivered()
    dues = [clock.parse(r["due"]) for r in sent]
    assert dues[0] == first
    assert dues[1] is not None and dues[0] is not None
    assert (dues[1] - dues[0]).total_seconds() == 2.0  # from the rule: no drift
    for number, message in enumerate(texts(fake_telegram, 42, "⏰ Reminder")[:2]):
        moment = dues[number]
        assert moment is not None
        late = wall_time(message) - moment.timestamp()
        assert -0.05 <= late <= LATE_S, f"sent {late:+.3f} s from its time"
    fake_telegram.dm(42, "/reminders cancel 1")
    await answer(fake_telegram, 42, "Cancelled: stretch", bot)

    fake_telegram.dm(42, "/remind in 1 hour call the dentist about the crown")
    fake_telegram.dm(42, "/remind in 2 hours buy oat milk")
    await until(lambda: len(texts(fake_telegram, 42, "OK, I'll remind you")) == 3, "set", bot)

    fake_telegram.dm(42, "/export")
    await until(lambda: fake_telegram.documents, "the export", bot)
    archive = zipfile.ZipFile(io.BytesIO(fake_telegram.documents[0].data))
    held = archive.read("telegram-42/reminders.jsonl").decode()
    assert "call the dentist about the crown" in held and "buy oat milk" in held

    fake_telegram.dm(42, "/forget dentist")
    asked = await answer(fake_telegram, 42, "Forgetting removes", bot)
    assert "1 reminder" in asked.text
    fake_telegram.dm(42, "/forget confirm")
    await answer(fake_telegram, 42, "Forgotten: “dentist”", bot)
    kept = json.dumps(records(workspaces, "telegram-42"))
    assert "dentist" not in kept and "buy oat milk" in kept
    fake_telegram.dm(42, "/reminders")
    listing = await answer(fake_telegram, 42, "Your reminders", bot)
    assert "dentist" not in listing.text
    assert ": buy oat milk\n/reminders cancel N" in listing.text and "\n2. " not in listing.text

    index = workspaces / ".reminders-due.jsonl"
    assert "telegram-42" in index.read_text()
    fake_telegram.dm(42, "/wipe")
    question = await answer(fake_telegram, 42, "This erases everything", bot)
    assert "1 pending reminder" in question.text
    fake_telegram.dm(42, "/wipe confirm")
    await answer(fake_telegram, 42, "Done: I erased everything", bot)
    assert not (workspaces / "telegram-42").exists()
    assert "telegram-42" not in index.read_text()  # not even the index names them
    assert await bot.terminate() == 0
