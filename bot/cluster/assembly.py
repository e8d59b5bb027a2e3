"""One answer as it arrives at the ingress: its messages gathered by attempt and replayed into
the adapter's Outbound while they come, so the platform shows the text as it is written.

A worker publishes an answer's calls in a few messages (worker.py `PublishingOutbound`), each
numbered within its *attempt* (one worker's run of one delivery). The ingress follows the first
attempt that begins and replays each message as soon as the ones before it are in. If that
worker dies mid-answer, JetStream gives the message to another, whose attempt starts over: the
port cannot take text back, so once the new attempt is complete the ingress adds only what it
adds to the text already shown (the same answer, read back from the session file, or the model
writing the same words), or, if it says something else, its whole text after a blank line.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.msg import Msg

from bot.cluster import wire
from bot.outbound import Outbound

Call = tuple[str, Any]


class Assembly:
    """The messages of one answer (see the module docstring)."""

    def __init__(self) -> None:
        self.msgs: list[Msg] = []  # every message of it, acknowledged once it is delivered
        self.destination: str | None = None  # where it goes without the ingress that asked
        self._attempts: dict[str, dict[int, list[Call]]] = {}  # attempt → seq → calls
        self._parts: dict[tuple[str, int], dict[int, bytes]] = {}
        self._failed: str | None = None
        self._changed = asyncio.Event()

    def add(self, msg: Msg) -> None:
        """Take one message of the answer (WireError if it is not one)."""
        self.msgs.append(msg)
        headers = msg.headers or {}
        self.destination = headers.get(wire.DESTINATION, self.destination)
        attempt = headers.get(wire.ATTEMPT, "")
        try:
            seq = int(headers.get(wire.SEQ, ""))
        except ValueError:
            raise wire.WireError(f"bad {wire.SEQ} header") from None
        index, count = wire.part_of(headers)
        body = msg.data
        if count > 1:
            parts = self._parts.setdefault((attempt, seq), {})
            parts[index] = body
            if len(parts) < count:
                return
            body = b"".join(parts[i] for i in range(count))
            del self._parts[(attempt, seq)]
        calls = wire.decode_calls(body)
        # The same message twice (a retried publish, a redelivery): the first is kept.
        self._attempts.setdefault(attempt, {}).setdefault(seq, calls)
        self._changed.set()

    def fail(self, reason: str) -> None:
        """The answer cannot be read: replay raises RemoteTurnFailed (the adapter apologises)."""
        self._failed = reason
        self._changed.set()

    def whole(self) -> list[Call] | None:
        """The calls of the first attempt that is complete; None while none is."""
        for attempt in self._attempts:
            calls = self._complete(attempt)
            if calls is not None:
                return calls
        return None

    async def replay(self, out: Outbound) -> None:
        """Make the answer's calls on `out` as they arrive, until it ends (RemoteTurnFailed if
        the worker's core raised, as wire.replay)."""
        following: str | None = None
        next_seq = 0
        begun, shown = False, ""
        while True:
            self._changed.clear()  # a message arriving while we replay sets it again
            if self._failed is not None:
                raise wire.RemoteTurnFailed(self._failed)
            if following is not None and self._complete(following) is None:
                for other in self._attempts:
                    calls = self._complete(other) if other != following else None
                    if calls is not None:  # the followed worker died: this one answered
                        await wire.replay(_resumed(calls, begun, shown), out)
                        return
            if following is None:
                following = next((a for a, got in self._attempts.items() if 0 in got), None)
            batches = self._attempts.get(following or "", {})
            while next_seq in batches:
                batch = batches[next_seq]
                next_seq += 1
                begun = begun or any(op == "begin" for op, _ in batch)
                shown += "".join(arg for op, arg in batch if op == "add_text")
                await wire.replay(batch, out)
                if batch and batch[-1][0] in wire.ENDS:
                    return
            await self._changed.wait()

    def _complete(self, attempt: str) -> list[Call] | None:
        batches = self._attempts[attempt]
        if sorted(batches) != list(range(len(batches))):
            return None  # a message still on its way
        calls = [call for seq in range(len(batches)) for call in batches[seq]]
        return calls if calls and calls[-1][0] in wire.ENDS else None


def _resumed(calls: list[Call], begun: bool, shown: str) -> list[Call]:
    """A complete attempt's calls, after another attempt's beginning was already replayed."""
    text = "".join(arg for op, arg in calls if op == "add_text")
    rest = text[len(shown) :] if text.startswith(shown) else f"\n\n{text}"  # "" is a prefix
    head: list[Call] = [] if begun else [c for c in calls if c[0] == "begin"][:1]
    others = [c for c in calls if c[0] not in ("begin", "add_text")]
    return head + ([("add_text", rest)] if rest else []) + others
