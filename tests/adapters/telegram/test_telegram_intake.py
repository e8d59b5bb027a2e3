"""How Telegram updates come in under pressure: one user's flood, strangers, webhook mode.

Real python-telegram-bot against the fake Bot API, the real Agent against the fake model."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from adapters.intake.texts import REFUSAL
from adapters.telegram.spool import Spool
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, Held, completion
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.telegram import (
    by_prompt,
    eventually,
    last_user_text,
    make_config,
    running,
    session_lines,
    webhook_config,
)

FLOODER, OTHER, STRANGER = 1, 2, 666


async def test_one_users_flood_does_not_delay_another_user(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """120 messages of one person (more than a getUpdates window of 100) once made the next
    person wait for ~20 of the flood's turns; the flood is now spooled and acknowledged past.

    No turn of the flood ends before the other person is answered (then each takes 0.2 s): one
    who waited behind any of them is never answered. (A bound of 1.5 s on the wait measured
    the loaded machine as well.)"""
    other_answered = asyncio.Event()
    flood_answer = Held(other_answered, Delay(0.2, completion("flood answer")))
    fake_llm.default = by_prompt({"flood": flood_answer, "other": completion("your answer")})
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        for n in range(120):
            tg.dm(FLOODER, f"flood {n}")
        await eventually(lambda: fake_llm.chat_requests)
        tg.dm(OTHER, "the other user")
        other = tg.last_update_id
        [answer] = await tg.wait_sent(OTHER, wait_s=10)
        assert not tg.sent_to(FLOODER)
        other_answered.set()
        await eventually(lambda: tg.acked(other))

    assert answer.text == "your answer"
    assert len(tg.sent_to(FLOODER)) < 120  # the flood was still being answered…
    assert tg.acked(tg.last_update_id)  # …and Telegram had been told it is safe with us
    spool = workspaces_dir / ".telegram-999.spool"
    assert spool.stat().st_size > 0  # the rest waits on disk for the next start


async def test_a_spooled_flood_is_answered_after_a_restart_each_message_once(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    config = make_config(tg, fake_llm, workspaces_dir)
    fake_llm.default = lambda request: Delay(0.2, completion(f"re {last_user_text(request)}"))
    async with running(config):
        for n in range(110):
            tg.dm(FLOODER, f"flood {n}")
        await eventually(lambda: tg.acked(tg.last_update_id))
    answered_before = len(tg.sent_to(FLOODER))
    assert answered_before < 110
    fake_llm.default = lambda request: completion(f"re {last_user_text(request)}")
    async with running(config):
        await tg.wait_until(lambda: len(tg.sent_to(FLOODER)) >= 110, wait_s=30)
        await asyncio.sleep(0.2)

    lines = session_lines(workspaces_dir, f"telegram-{FLOODER}", f"telegram:dm:{FLOODER}")
    users = [m for m in lines if m.get("role") == "user"]
    assert len(users) == 110 and len({m["message_id"] for m in users}) == 110
    for n in range(110):  # every message answered, in order, none twice
        assert sum(f"flood {n}\n" in s.text + "\n" for s in tg.sent_to(FLOODER)) == 1, n
    assert (workspaces_dir / ".telegram-999.spool").stat().st_size == 0


async def test_a_strangers_flood_costs_the_allowed_user_nothing(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """130 DMs from someone not on the allow list, while Telegram rate-limits the bot: at most
    one refusal is attempted, never waited out, and the allowed user is answered at once."""
    config = make_config(tg, fake_llm, workspaces_dir, allow=[str(OTHER)])
    fake_llm.default = lambda request: completion("hello friend")
    tg.fail_next("sendMessage", 429, "Too Many Requests: retry after 30", retry_after=30)
    async with running(config):
        for n in range(130):
            tg.dm(STRANGER, f"let me in {n}")
        asked = time.monotonic()
        tg.dm(OTHER, "hi")
        [answer] = await tg.wait_sent(OTHER, wait_s=10)
        await eventually(lambda: tg.acked(tg.last_update_id))

    assert answer.at - asked < 2.0
    to_stranger = [c for c in tg.method_calls("sendMessage") if c["chat_id"] == str(STRANGER)]
    assert len(to_stranger) == 1 and to_stranger[0]["text"] == REFUSAL
    assert len(fake_llm.chat_requests) == 1
    assert (
        not (workspaces_dir / ".telegram-999.spool").exists()
        or not (workspaces_dir / ".telegram-999.spool").read_bytes()
    )  # a stranger's words are never kept
    handled = (workspaces_dir / ".telegram-999.spool.handled").read_text().split()
    assert handled == [str(tg.last_update_id)]  # nor their update ids: only the allowed user's


async def test_webhook_answers_200_only_once_the_update_is_kept(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """PTB's server answered 200 before the update was safe; ours answers 500 while it cannot
    keep it, so Telegram sends it again, and it is answered once."""
    fake_llm.default = lambda request: completion("got it")
    config = webhook_config(tg, fake_llm, workspaces_dir)
    async with running(config):
        assert tg.webhook is not None
        assert tg.webhook["url"] == config.platforms["telegram"].webhook_url
        tg.dm(42, "first")
        assert await tg.deliver(tg.last_update_id, attempts=1, secret="guess") == [403]
        assert await tg.deliver(tg.last_update_id) == [200]
        [first] = await tg.wait_sent(42)

        blocker = workspaces_dir / ".telegram-999.spool"
        blocker.unlink(missing_ok=True)
        blocker.mkdir()  # the spool cannot be written (as on a full or broken disk)
        tg.dm(42, "second")
        second = tg.last_update_id
        failing = asyncio.create_task(tg.deliver(second, attempts=10, retry_s=0.2))
        await eventually(lambda: 500 in tg.webhook_answers)
        blocker.rmdir()  # the disk is back: Telegram's next attempt gets through
        statuses = await failing
        await tg.wait_sent(42, 2)
        await asyncio.sleep(0.2)

    assert first.text == "got it"
    assert statuses[0] == 500 and statuses[-1] == 200
    assert [s.text for s in tg.sent_to(42)] == ["got it", "got it"]
    assert len(fake_llm.chat_requests) == 2
    assert not tg.method_calls("getUpdates")  # webhook mode never polls


async def test_the_spool_stays_about_the_size_of_its_backlog(workspaces_dir: Path) -> None:
    """One update pending while 1,000 others come and go: the file grew ~200 B an update and
    was emptied only once nothing was pending; now the done part is compacted away, and the
    next start still finds the pending one and knows the handled ones."""
    workspaces_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a test's folder
    path = workspaces_dir / ".telegram-999.spool"

    def update(uid: int, text: str) -> dict[str, object]:
        return {"update_id": uid, "message": {"message_id": uid, "from": {"id": 7}, "text": text}}

    spool = Spool(path)
    spool.load()
    await spool.add([update(1, "still waiting")])
    sizes = []
    for uid in range(2, 1002):
        await spool.add([update(uid, "x" * 200)])  # after the last done's mark (one thread)
        spool.done(uid)
        sizes.append(path.stat().st_size)
    await spool.flush()

    assert max(sizes) < 80_000  # was 1,000 × ~260 B and rising
    restarted = Spool(path)
    assert [u["update_id"] for u in restarted.load()] == [1]
    assert path.stat().st_size < 200  # the pending update alone
    assert all(uid in restarted.handled for uid in range(2, 1002)) and 1 not in restarted.handled
    restarted.done(1)
    await restarted.flush()
    assert path.stat().st_size == 0  # nothing pending: no word of anyone is kept


async def test_a_stalled_spool_write_leaves_the_event_loop_free(workspaces_dir: Path) -> None:
    """A spool whose disk does not answer (here a FIFO nobody reads yet: opening it blocks)
    must not stop the event loop, which runs everybody's turns: the loop gets to run while the
    write waits; the write then fails (a FIFO cannot be fsynced) with an OSError, so that
    update is not acknowledged. When the write ran on the loop, the loop never ran until the
    reader gave up waiting for it."""
    workspaces_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a test's folder
    path = workspaces_dir / ".telegram-999.spool"
    os.mkfifo(path)
    loop_ran, over = threading.Event(), threading.Event()
    saw: list[bool] = []

    def reader() -> None:  # the disk answering, once the loop has run (or after 5 s)
        saw.append(loop_ran.wait(5))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # the spool's open goes through now
        over.wait(5)
        os.close(fd)

    spool = Spool(path)
    update = {"update_id": 1, "message": {"message_id": 1, "from": {"id": 7}, "text": "hi"}}
    disk = threading.Thread(target=reader)
    disk.start()
    asyncio.get_running_loop().call_soon(loop_ran.set)
    try:
        with pytest.raises(OSError):
            await spool.add([update])
    finally:
        over.set()
        await asyncio.to_thread(disk.join)
    assert saw == [True]  # the loop ran while the spool's write was stuck
    await spool.flush()
    assert 1 not in spool  # not pending: it was never on disk
