"""One person with a Telegram and a Discord account, talking to one `lightgrep run` (/link)."""

from __future__ import annotations

import re
from typing import Any

from bot.commands.linking import ALPHABET
from tests.rigs.cli import STEP_TIMEOUT
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)
from tests.rigs.fakes.telegram_server import (
    FakeTelegram,
)

TG, DC, DM_CHANNEL, GROUP = 42, 77, 555, -1001234


BEA = user_payload(DC, "bea")


CODE = re.compile(rf"\b[{ALPHABET}]{{8}}\b")


class Person:
    """One person with a Telegram and a Discord account, talking to one `lightgrep run`."""

    def __init__(self, tg: FakeTelegram, dc: FakeDiscord) -> None:
        self.tg, self.dc = tg, dc
        tg.started_users.add(TG)  # has a private chat with the bot, for answers asked in groups

    async def telegram(self, text: str, expect: str) -> str:
        before = len(self.tg.sent_to(TG))
        self.tg.dm(TG, text)
        return await self._tg_wait(before, expect)

    async def telegram_group(self, text: str, expect: str) -> str:
        before = len(self.tg.sent_to(TG))
        self.tg.group(GROUP, TG, text)
        return await self._tg_wait(before, expect)

    async def telegram_told(self, expect: str) -> None:
        """A message on Telegram that Bea did not ask for (a notice)."""

        def told() -> bool:
            return any(expect in m.text for m in self.tg.sent_to(TG))

        try:
            await self.tg.wait_until(told, wait_s=STEP_TIMEOUT)
        except TimeoutError:
            raise TimeoutError(f"Telegram: no notice {expect!r}") from None

    async def _tg_wait(self, before: int, expect: str) -> str:
        def said() -> str:
            return "\n".join(m.text for m in self.tg.sent_to(TG)[before:])

        try:
            await self.tg.wait_until(lambda: expect in said(), wait_s=STEP_TIMEOUT)
        except TimeoutError:
            raise TimeoutError(f"Telegram: no {expect!r}; said since: {said()!r}") from None
        return said()

    async def discord(self, text: str, expect: str) -> str:
        before = len(self.dc.seen_in(DM_CHANNEL))
        await self.dc.dispatch("MESSAGE_CREATE", self.dc.message(BEA, text, channel_id=DM_CHANNEL))

        def said() -> str:
            return "\n".join(self.dc.seen_in(DM_CHANNEL)[before:])

        try:
            await self.dc.wait_until(lambda: expect in said(), within=STEP_TIMEOUT)
        except TimeoutError:
            raise TimeoutError(f"Discord: {text!r} got no {expect!r}; said: {said()!r}") from None
        return said()

    async def link_telegram_to_discord(self) -> str:
        """/link on Telegram, the code on Discord: the question, before any confirmation."""
        offer = await self.telegram("/link", "Your link code")
        [code] = set(CODE.findall(offer))
        return await self.discord(f"/link {code}", "/link confirm")


def llm_that_files(fake_llm: FakeOpenAI, entry: str, memory: str) -> None:
    """Answers "Noted."; a consolidation files `entry` and writes `memory`."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if is_consolidation(request):
            return save_memory_call(entry, memory)
        return completion("Noted.")

    fake_llm.default = answer
