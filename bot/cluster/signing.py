"""Which cluster messages came from this cluster's own processes: an HMAC over each.

Anyone who can publish to NATS could otherwise hand a worker `{"user_key": "telegram-42",
"text": "/memory"}` with a reply subject of their own and read that person's memory, or hand an
ingress an answer naming a Discord channel and have the bot post it there. So every message an
ingress publishes and every answer a worker publishes carries `Lg-Mac`: HMAC-SHA256, keyed by
`[cluster] signing_key` (shared by the cluster's processes, never sent), over what it is (a
"message" or an "answer", so one cannot pass for the other), its subject (its partition, or
the ingress it goes to), the headers that say what to do with it and its body. A body kept in
the object store is covered by its SHA-256 in `Lg-Digest`. A receiver drops, logs and counts
what does not verify (worker.py, ingress.py, adopt.py).

With `[cluster] private_network = true` (connection.py) the key is not required: without one
nothing is signed and everything taken, as before; with one everything is signed and an
unsigned message is taken too (the first is logged), so that a running cluster can move to
signed messages without dropping what its older processes send: give every process the key
with private_network = true, then set private_network = false (docs/cluster.md). A message signed
with another key is dropped either way.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Literal

from bot.cluster import wire

log = logging.getLogger(__name__)

Kind = Literal["message", "answer"]
VERSION = b"lightgrep-wire-1\n"
# Every header the receiver acts on, present or not (an absent one is signed as absent).
SIGNED = (
    wire.MSG_ID, wire.REPLY, wire.KEY, wire.ATTEMPT, wire.SEQ, wire.PART, wire.BODY,
    wire.SESSION, wire.DESTINATION, wire.DIGEST,
)  # fmt: skip


class Signer:
    """Signs what this process publishes and checks what it receives, with one shared key;
    `required`: an unsigned message is refused (see the module docstring)."""

    def __init__(self, key: str | None, *, required: bool = True) -> None:
        self._key = key.encode("utf-8") if key else None
        self._required = required
        self._said = False

    @property
    def on(self) -> bool:
        return self._key is not None

    def sign(self, kind: Kind, subject: str, headers: dict[str, str], body: bytes) -> None:
        """Put the MAC into `headers` (after every other header is set; nothing without a key)."""
        if self._key is not None:
            headers[wire.MAC] = self._mac(self._key, kind, subject, headers, body)

    def refusal(
        self, kind: Kind, subject: str, headers: dict[str, str] | None, body: bytes
    ) -> str | None:
        """Why a received message is not taken (for the log), or None: it is ours."""
        if self._key is None:
            return None
        given = (headers or {}).get(wire.MAC)
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
            return "not signed"
        if not hmac.compare_digest(given, self._mac(self._key, kind, subject, headers, body)):
            return "signed with another key, or changed on the way"
        return None

    @staticmethod
    def _mac(
        key: bytes, kind: Kind, subject: str, headers: dict[str, str] | None, body: bytes
    ) -> str:
        said = [(headers or {}).get(name) for name in SIGNED]
        head = json.dumps([kind, subject, said], separators=(",", ":")).encode("utf-8")
        return hmac.new(key, VERSION + head + b"\n" + body, hashlib.sha256).hexdigest()


def digest(body: bytes) -> str:
    """The `Lg-Digest` of a body kept in the object store."""
    return hashlib.sha256(body).hexdigest()
