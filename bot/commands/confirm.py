"""Questions that wait for a "yes": what /forget and /wipe ask before they remove anything.

A question belongs to one user and one action and expires, so a button pressed tomorrow, or a
"/wipe confirm" typed into another chat by someone else, removes nothing. Each question has a
short token; a button carries it, so pressing the button of an older question cannot confirm a
newer one. A typed confirmation without the token confirms the user's latest question.
Kept in memory only: a restart forgets every question, which errs on the side of keeping data.

Questions nobody answers must not pile up in RAM (a question holds the words to forget): a
person has at most one per action, one is dropped a TTL after it expired (until then a late
"confirm" is told that it expired rather than that nothing was asked), and at most MAX_OPEN are
kept for everyone together, the oldest dropped first, which again only means asking again.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

CONFIRM_TTL_S = 300.0  # five minutes
MAX_OPEN = 10_000  # questions kept for everyone together


@dataclass(frozen=True)
class Question:
    action: str  # "forget", "wipe"
    payload: str  # what to act on (the words to forget)
    token: str
    expires: float


@dataclass(frozen=True)
class Answer:
    """The outcome of a confirmation: `question` when it may go ahead, else why not."""

    question: Question | None
    problem: str = ""  # "none", "expired", "other" (a token of another question)


class Confirmations:
    """Pending questions by (user key, action); at most one of each per user."""

    def __init__(
        self,
        ttl_s: float = CONFIRM_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        max_open: int = MAX_OPEN,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_open = max_open
        self._clock = clock
        # In the order asked, so the oldest are first (every question lives ttl_s).
        self._pending: OrderedDict[tuple[str, str], Question] = OrderedDict()

    def __len__(self) -> int:
        """Questions held (open, or expired less than a TTL ago)."""
        return len(self._pending)

    def ask(self, user_key: str, action: str, payload: str = "") -> Question:
        """A new question, replacing the user's earlier one for this action."""
        now = self._clock()
        self._drop_stale(now)
        question = Question(action, payload, secrets.token_hex(3), now + self.ttl_s)
        self._pending[(user_key, action)] = question
        self._pending.move_to_end((user_key, action))  # a question asked again is the newest
        while len(self._pending) > self.max_open:
            self._pending.popitem(last=False)
        return question

    def take(self, user_key: str, action: str, token: str = "") -> Answer:
        """Consume the user's question for `action` if it is still open (and `token` is its)."""
        question = self._pending.get((user_key, action))
        if question is None:
            return Answer(None, "none")
        if token and token != question.token:
            return Answer(None, "other")
        del self._pending[(user_key, action)]
        if self._clock() > question.expires:
            return Answer(None, "expired")
        return Answer(question)

    def cancel(self, user_key: str, action: str) -> bool:
        return self._pending.pop((user_key, action), None) is not None

    def _drop_stale(self, now: float) -> None:
        """Drop the questions that expired more than a TTL ago (the oldest come first)."""
        while self._pending:
            question = next(iter(self._pending.values()))
            if now <= question.expires + self.ttl_s:
                return
            self._pending.popitem(last=False)

    def forget_user(self, user_key: str) -> None:
        """Forget every question of a user (after /wipe nothing of them is kept)."""
        for key in [k for k in self._pending if k[0] == user_key]:
            del self._pending[key]
