"""A circuit breaker per endpoint of a chain (bot/llm/chain.py).

WHY: an endpoint that is down costs every message its timeout before the next endpoint is
asked. After `failures` calls in a row have failed it is passed over ("open") for `cooldown_s`
(longer when a 429 said when to come back); then one call is let through ("half-open"): if it
answers the endpoint is back ("closed"), if not it is passed over again. Nobody resets it by
hand. The clock is `time.monotonic` unless a test gives another.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

State = Literal["closed", "open", "half_open"]
STATE_VALUES: dict[State, int] = {"closed": 0, "open": 1, "half_open": 2}  # for the gauge


class Breaker:
    """Whether an endpoint is asked now: `allow()` before a call, `succeeded()` or `failed()`
    after it."""

    def __init__(
        self,
        failures: int = 3,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._in_a_row = 0
        self._open_until: float | None = None  # None: closed
        self._probing = False  # the half-open probe is under way

    @property
    def state(self) -> State:
        if self._open_until is None:
            return "closed"
        if self._probing or self._clock() >= self._open_until:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """Whether to call the endpoint now; when half-open, only one call at a time probes."""
        state = self.state
        if state == "closed":
            return True
        if state == "open" or self._probing:
            return False
        self._probing = True
        return True

    def succeeded(self) -> None:
        self._in_a_row, self._open_until, self._probing = 0, None, False

    def failed(self, retry_after_s: float | None = None) -> None:
        """A failed call; `retry_after_s`: the server said when to come back (a 429's
        Retry-After), which opens the breaker at once for at least that long."""
        self._in_a_row += 1
        probe_failed = self._probing
        self._probing = False
        if probe_failed or self._in_a_row >= self.failures or retry_after_s:
            wait = max(self.cooldown_s, retry_after_s or 0.0)
            self._open_until = self._clock() + wait

    def released(self) -> None:
        """A half-open probe that ended neither way (cancelled): another may probe."""
        self._probing = False
