"""Publishing to JetStream until it has the message, through any outage.

Both sides need this: the ingress must not acknowledge a platform's message before JetStream
has it, and a worker must not acknowledge a message before JetStream has its answer. So a
publish that fails (NATS away, JetStream electing a leader) is retried, with a back-off, until
JetStream acknowledges it; the log says once that it is waiting and once that it works again.
Each try is signed afresh (signing.py): a message that waited out an outage is not refused as
too old when JetStream finally has it.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext
from nats.js.api import PubAck

from bot.cluster.signing import Kind, Signer
from bot.observe.metrics import CLUSTER_PUBLISHED, count_cluster

log = logging.getLogger(__name__)

PUBLISH_TIMEOUT_S = 5.0
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0


class Publisher:
    """JetStream publishes that wait out outages, each try signed by `signer` as `signed_as`;
    `waiting` counts the publishes held up."""

    def __init__(
        self, js: JetStreamContext, what: str, kind: str, signer: Signer, signed_as: Kind
    ) -> None:
        self._js = js
        self._what = what  # "a user's message", "an answer": for the log
        self._kind = kind  # "message", "answer": for /metrics
        self._signer = signer
        self._signed_as = signed_as
        self.waiting = 0
        self._said = False

    async def publish(
        self, subject: str, body: bytes, headers: dict[str, str]
    ) -> tuple[PubAck, bool]:
        """The acknowledgement, and whether an earlier try of this publish may have reached
        JetStream (then a duplicate acknowledgement is this very message). `headers` are
        signed here, at each try (those of the last try are left in it)."""
        backoff = FIRST_BACKOFF_S
        tried = False
        while True:
            self._signer.sign(self._signed_as, subject, headers, body)
            try:
                ack = await self._js.publish(
                    subject, body, timeout=PUBLISH_TIMEOUT_S, headers=headers
                )
            except Exception as exc:  # every failure of nats-py means "not stored yet"
                if not tried:
                    self.waiting += 1
                tried = True
                if not self._said:
                    self._said = True
                    log.warning(
                        "NATS: cannot publish %s (%s: %s); holding it and retrying",
                        self._what,
                        type(exc).__name__,
                        str(exc) or "no detail",
                    )
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                continue
            count_cluster(CLUSTER_PUBLISHED, self._kind)
            if tried:
                self.waiting -= 1
                if self._said and not self.waiting:
                    self._said = False
                    log.info("NATS: publishing %s works again", self._what)
            return ack, tried
