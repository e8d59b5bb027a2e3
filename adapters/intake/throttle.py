"""At most one event per chat per interval: a refusal to a stranger, whose flood must cost the
bot neither sends nor flood-limit waits."""

from __future__ import annotations

import time
from collections.abc import Hashable

REFUSAL_INTERVAL_S = 600.0  # at most one refusal per stranger's chat this often


class PerChatInterval:
    """At most one event per chat per `interval_s`: the first passes. Bounded: past `max_chats`
    chats inside their interval (a swarm of strangers) every event is held back until it passes."""

    def __init__(self, interval_s: float = REFUSAL_INTERVAL_S, max_chats: int = 10_000) -> None:
        self.interval_s = interval_s
        self._max = max_chats
        self._last: dict[Hashable, float] = {}

    def allow(self, chat: Hashable) -> bool:
        now = time.monotonic()
        last = self._last.get(chat)
        if last is not None and now - last < self.interval_s:
            return False
        if len(self._last) >= self._max:  # forget the chats whose interval is over
            self._last = {c: t for c, t in self._last.items() if now - t < self.interval_s}
            if len(self._last) >= self._max:
                return False
        self._last[chat] = now
        return True
