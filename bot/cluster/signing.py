"""Which cluster messages came from this cluster's own processes, and only once: an HMAC over
each, with the time it was signed and an id of its own.

Anyone who can publish to NATS could otherwise hand a worker `{"user_key": "telegram-42",
"text": "/memory"}` with a reply subject of their own and read that person's memory, or hand an
ingress an answer naming a Discord channel and have the bot post it there. So every message an
ingress publishes and every answer a worker publishes carries `Lg-Mac`: HMAC-SHA256, keyed by
`[cluster] signing_key` (shared by the cluster's processes, never sent), over what it is (a
"message" or an "answer", so one cannot pass for the other), its subject (its partition, or
the ingress it goes to), the headers that say what to do with it and its body. A body kept in
the object store is covered by its SHA-256 in `Lg-Digest`. A receiver drops, logs and counts
what does not verify (worker.py, ingress.py, adopt.py, push.py).

A signed message can still be captured (whoever may read `<prefix>.in.>` sees every one) and
published again: a `/privacy groups on` answered a second time after its sender said "off".
So the MAC also covers `Lg-Time`, when it was signed, and `Lg-Nonce`, a random id:
- A message NATS stored more than `[cluster] max_message_age_s` after it was signed is
  refused, and one stored that long before (a clock off by more). The time compared is the one
  JetStream stamped when it stored the message, not the time it is read: a message waiting
  in the stream while no worker runs is not too old, and a redelivery keeps its stamp, while a
  copy published again gets a new one. A publisher signs again at each try (publish.py, and
  the client holds no publish while NATS is away: connection.py), so waiting out an outage
  does not age a message.
- A message whose id was taken before, as another stored message, is refused: a copy
  published again within the age. A JetStream redelivery is the same stored message (its
  stream and sequence), so it is not a replay and is handled as before (the worker skips what
  it has done, the core recognises a platform id). The ids are kept twice the age limit
  (`Seen`): a copy refused by its age needs no memory, so the memory is bounded by the
  messages of that window. A process that restarts forgets them; then JetStream's duplicate
  window, at least that long (connection.py), drops a copy, as the id it was published under
  (`Nats-Msg-Id`) is signed too and cannot be changed.

Keys can be replaced without losing a message: `signing_key` may be a list, the first signs
and every one is accepted (docs/cluster.md says in which order to change them).

With `[cluster] private_network = true` (connection.py) the key is not required: without one
nothing is signed and everything taken, as before; with one everything is signed and an
unsigned message is taken too (the first is logged), so that a running cluster can move to
signed messages without dropping what its older processes send: give every process the key
with private_network = true, then set private_network = false (docs/cluster.md). A message signed
with another key, or replayed, is dropped either way.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nats.aio.msg import Msg

from bot.cluster import wire
from bot.config import ClusterConfig

log = logging.getLogger(__name__)

Kind = Literal["message", "answer"]
VERSION = b"lightgrep-wire-2\n"  # 1: without the time and the id
# Every header the receiver acts on, present or not (an absent one is signed as absent).
SIGNED = (
    wire.MSG_ID, wire.REPLY, wire.KEY, wire.ATTEMPT, wire.SEQ, wire.PART, wire.BODY,
    wire.SESSION, wire.DESTINATION, wire.DIGEST, wire.TIME, wire.NONCE,
)  # fmt: skip
DEFAULT_MAX_AGE_S = 60.0


@dataclass(frozen=True)
class Refusal:
    """Why a received message is not taken: `reason` for /metrics, `detail` for the log."""

    reason: Literal["unauthenticated", "replayed"]
    detail: str


class Seen:
    """The ids of the messages taken in the last `keep_s` seconds, with the stored message
    each came as (stream, sequence): the same again is a redelivery, anything else a copy."""

    def __init__(self, keep_s: float) -> None:
        self._keep_s = keep_s
        self._ids: dict[str, tuple[str, int]] = {}
        self._expiry: deque[tuple[float, str]] = deque()  # (when it is forgotten, id), in order

    def __len__(self) -> int:
        return len(self._ids)

    def first(self, nonce: str, stored: tuple[str, int]) -> tuple[str, int] | None:
        """None if `nonce` is new or came as `stored` before; else the message it came as."""
        now = time.monotonic()
        while self._expiry and self._expiry[0][0] <= now:
            self._ids.pop(self._expiry.popleft()[1], None)
        known = self._ids.get(nonce)
        if known is None:
            self._ids[nonce] = stored
            self._expiry.append((now + self._keep_s, nonce))
        return known if known is not None and known != stored else None


class Signer:
    """Signs what this process publishes and checks what it receives; `keys`: the cluster's
    (the first signs, every one verifies); `required`: an unsigned message is refused;
    `max_age_s`: see the module docstring."""

    def __init__(
        self,
        keys: str | Sequence[str] | None,
        *,
        required: bool = True,
        max_age_s: float = DEFAULT_MAX_AGE_S,
    ) -> None:
        listed = [keys] if isinstance(keys, str) else list(keys or [])
        self._keys = [key.encode("utf-8") for key in listed if key]
        self._required = required
        self._max_age_s = max_age_s
        self._seen = Seen(2 * max_age_s)
        self._said = False

    @property
    def on(self) -> bool:
        return bool(self._keys)

    def sign(self, kind: Kind, subject: str, headers: dict[str, str], body: bytes) -> None:
        """Stamp `headers` with the time and a new id, and put the MAC in (after every other
        header is set; nothing without a key). Called again for each try of a publish."""
        if not self._keys:
            return
        headers[wire.TIME] = str(time.time_ns() // 1_000_000)
        headers[wire.NONCE] = uuid.uuid4().hex
        headers[wire.MAC] = self._mac(self._keys[0], kind, subject, headers, body)

    def refusal(self, kind: Kind, msg: Msg) -> Refusal | None:
        """Why a message JetStream delivered is not taken, or None: it is ours, and new."""
        if not self._keys:
            return None
        headers = msg.headers or {}
        given = headers.get(wire.MAC)
        if not given and not self._required:
            if not self._said:
                self._said = True
                log.warning(
                    "cluster: taking unsigned messages, as [cluster] private_network = true "
                    "(from a process without signing_key); with private_network = false "
                    "they are dropped"
                )
            return None
        if not given:
            return Refusal("unauthenticated", "not signed")
        if not any(
            hmac.compare_digest(given, self._mac(key, kind, msg.subject, headers, msg.data))
            for key in self._keys
        ):
            return Refusal(
                "unauthenticated",
                "signed with none of this process's [cluster] signing_key, or changed on the "
                "way" + ("" if wire.TIME in headers else " (or by an older LightGrep)"),
            )
        return self._replay(headers, msg)

    def _replay(self, headers: dict[str, str], msg: Msg) -> Refusal | None:
        nonce = headers.get(wire.NONCE, "")
        try:
            signed = int(headers.get(wire.TIME, "")) / 1000
        except ValueError:  # signed with our key: our own bug
            signed = None
        if signed is None or not nonce:
            return Refusal("unauthenticated", f"without a {wire.TIME} or {wire.NONCE} header")
        meta = msg.metadata
        late = meta.timestamp.timestamp() - signed
        if abs(late) > self._max_age_s:
            when = "after" if late > 0 else "before"
            return Refusal(
                "replayed",
                f"stored by NATS {abs(late):.0f} s {when} it was signed ([cluster] "
                f"max_message_age_s = {self._max_age_s:g}): a copy published again, or a "
                "clock that is off",
            )
        stored = (meta.stream, meta.sequence.stream)
        first = self._seen.first(nonce, stored)
        if first is not None:
            return Refusal(
                "replayed",
                f"a copy published again (its id came as message {first[1]} of {first[0]})",
            )
        return None

    @staticmethod
    def _mac(
        key: bytes, kind: Kind, subject: str, headers: dict[str, str] | None, body: bytes
    ) -> str:
        said = [(headers or {}).get(name) for name in SIGNED]
        head = json.dumps([kind, subject, said], separators=(",", ":")).encode("utf-8")
        return hmac.new(key, VERSION + head + b"\n" + body, hashlib.sha256).hexdigest()


def signer_of(settings: ClusterConfig) -> Signer:
    """The Signer of a process with these [cluster] settings."""
    return Signer(
        settings.signing_key,
        required=not settings.private_network,
        max_age_s=settings.max_message_age_s,
    )


def digest(body: bytes) -> str:
    """The `Lg-Digest` of a body kept in the object store."""
    return hashlib.sha256(body).hexdigest()
