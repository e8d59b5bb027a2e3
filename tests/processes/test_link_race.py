"""/link confirmed on both sides at once (issue 32, item 2), and a stop during a merge: a real
`lightgrep run` serving the fake Telegram and the fake Discord over real sockets."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from memory.workspace import Workspaces
from tests.processes.test_link import fill, links_of, serving
from tests.rigs.cli import STEP_TIMEOUT
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.link import BEA, CODE, DM_CHANNEL, TG

STOP_WITHIN_S = 10.0  # a stop ends the process well before any supervisor gives up


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
