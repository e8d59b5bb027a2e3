"""The one-time codes of /link, their throttle, and the ports the link commands are given.

A code is 8 characters from an alphabet without look-alikes (no 0/O, 1/I/L), ~2^39 of them,
valid 10 minutes and once: taking it, right or not, ends it. A wrong code says nothing about
whose it could be, and each key may give only WRONG_PER_HOUR wrong ones an hour, so guessing a
code (10,000 live at most) would take longer than any code lives. Kept in RAM only: a restart
forgets every code, which only means asking for a new one. In cluster mode the same interface
is kept in NATS (bot/cluster/people.py: SharedCodes), so any worker takes any worker's code.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from memory.control.link import Merged

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL_S = 600.0
WRONG_PER_HOUR = 5
MAX_CODES = 10_000  # live codes for everyone together; the oldest go first
MAX_TRACKED = 10_000  # keys whose wrong codes are remembered


@dataclass(frozen=True)
class Redeemed:
    """A code's owner (the key that asked for it), or why there is none."""

    owner: str | None
    problem: str = ""  # "throttled" or "invalid"
    retry_after_s: float = 0.0


class LinkCodes:
    """Codes by value, and the wrong codes each key gave in the last hour."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._codes: OrderedDict[str, tuple[str, float]] = OrderedDict()  # code → owner, expiry
        self._wrong: OrderedDict[str, deque[float]] = OrderedDict()

    async def issue(self, owner: str) -> str:
        """A new code for `owner`, replacing the one it had."""
        now = self._clock()
        for code in [c for c, (who, _) in self._codes.items() if who == owner]:
            del self._codes[code]
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        self._codes[code] = (owner, now + CODE_TTL_S)
        while len(self._codes) > MAX_CODES:
            self._codes.popitem(last=False)
        return code

    async def redeem(self, code: str, by: str) -> Redeemed:
        """The owner of `code`, which is used up; a wrong, expired or used code counts against
        `by`, who is refused without looking once it gave WRONG_PER_HOUR in the last hour."""
        now = self._clock()
        wrong = self._wrong.get(by, deque())
        while wrong and wrong[0] <= now - 3600:
            wrong.popleft()
        if len(wrong) >= WRONG_PER_HOUR:
            return Redeemed(None, "throttled", wrong[0] + 3600 - now)
        found = self._codes.pop(normalise(code), None)
        if found is not None and now <= found[1]:
            return Redeemed(found[0])
        wrong.append(now)
        self._wrong[by] = wrong
        self._wrong.move_to_end(by)
        while len(self._wrong) > MAX_TRACKED:
            self._wrong.popitem(last=False)
        return Redeemed(None, "invalid")


def normalise(code: str) -> str:
    """As typed: any case, spaces or a dash in the middle allowed."""
    return "".join(code.split()).replace("-", "").upper()


class Codes(Protocol):
    """LinkCodes, or the cluster's shared codes."""

    async def issue(self, owner: str) -> str: ...
    async def redeem(self, code: str, by: str) -> Redeemed: ...


class PersonMoves(Protocol):
    """Cluster mode: a person's files travel between workers (bot/cluster/people.py)."""

    def arriving(self, person: str) -> bool: ...
    async def ship(
        self, root: Path, person: str, links: Callable[[dict[str, str]], dict[str, str]]
    ) -> None: ...
    async def arrivals(self, person: str) -> list[tuple[str, bytes]]: ...
    async def arrived(self, person: str, names: list[str]) -> None: ...
    def here(self, person: str) -> bool: ...  # served by this worker
    async def notify(self, person: str, to: str, text: str) -> None: ...
    def when_arriving(self, take: Callable[[str], None]) -> None: ...  # files came: take(person)


@dataclass(frozen=True)
class LinkPort:
    """What the link commands may do, given by the core: this platform's own key, the keys of
    its person, the codes, and the two changes (made with every file of both people still)."""

    own_key: str
    members: Callable[[], list[str]]
    resolve: Callable[[str], str]
    codes: Codes
    join: Callable[[str], Awaitable[Merged]]  # own key → the person of this key
    leave: Callable[[str], Awaitable[list[str]]]  # a key of the person out; the keys left
    tell: Callable[[str, str], Awaitable[None]]  # a notice for a key (bot/agent/telling.py)
