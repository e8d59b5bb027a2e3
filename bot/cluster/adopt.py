"""Answers on their way to an ingress that died and has not come back, sent by another ingress.

Every ingress keeps its id in the key-value bucket `<prefix>-ingresses` while it runs (renewed
every third of `[cluster] lease_ttl_s`, deleted when it stops cleanly; a dead one's expires).
Every `lease_ttl_s` each ingress looks at the answer consumers (`ingress-<id>`, one per ingress
id): one whose ingress's key is gone and that still holds answers is *adopted*, by one ingress
at a time (a claim in the bucket). Its consumer is made afresh (what the dead run was given
comes again at once, as at an ingress's own start) and its answers are handed to resend.py:
those with a destination on a platform this ingress serves are sent and acknowledged; those of a
platform it does not serve are left for another; those without a destination are dropped, as
their platform delivers the message again (Telegram). An ingress that comes back on its folder
makes its consumer afresh too and takes its answers back; an answer both had in hand in that
instant may be sent twice, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from typing import Any

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import (
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue

from bot.cluster import wire
from bot.cluster.connection import Names, expiring_keys
from bot.cluster.resend import PULL_BATCH, PULL_WAIT_S, Resending, drop
from bot.cluster.signing import Signer
from bot.config import ClusterConfig

log = logging.getLogger(__name__)

MAX_PENDING_ANSWERS = 20_000  # answer messages delivered, not yet acknowledged
IDLE_CONSUMER_S = 3600.0  # an answer consumer nobody pulls from this long: NATS deletes it


async def subscribe_answers(
    js: JetStreamContext, names: Names, settings: ClusterConfig, ingress_id: str
) -> Any:
    """The pull subscription of one ingress id's answers, its consumer made afresh: what an
    earlier holder was given and did not acknowledge comes at once, not after the ack wait."""
    durable = names.ingress_consumer(ingress_id)
    with contextlib.suppress(NotFoundError):
        await js.delete_consumer(names.out_stream, durable)
    config = ConsumerConfig(
        durable_name=durable,
        filter_subject=names.out_subject(ingress_id),
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=max(60.0, settings.ack_wait_s),
        max_deliver=-1,
        max_ack_pending=MAX_PENDING_ANSWERS,
        inactive_threshold=IDLE_CONSUMER_S,
    )
    await js.add_consumer(names.out_stream, config)
    return await js.pull_subscribe_bind(durable=durable, stream=names.out_stream)


class Adopter:
    """Keeps this ingress's key alive and adopts the answers of dead ones (see above)."""

    def __init__(
        self, js: JetStreamContext, names: Names, settings: ClusterConfig, me: str,
        resending: Resending, signer: Signer,
    ) -> None:  # fmt: skip
        self._js = js
        self._signer = signer
        self._names = names
        self._settings = settings
        self._me = me
        self._resending = resending
        self._kv: KeyValue | None = None

    async def run(self) -> None:
        """Until cancelled: renew our key, and look for dead ingresses' answers."""
        ttl = self._settings.lease_ttl_s
        rounds = 0
        while True:
            try:
                kv = self._kv or await expiring_keys(
                    self._js, self._names.ingress_bucket, ttl, self._settings.replicas
                )
                self._kv = kv
                await kv.put(self._me, json.dumps({"host": socket.gethostname(),
                                                   "pid": os.getpid()}).encode())  # fmt: skip
                if rounds % 3 == 0:
                    await self._scan(kv)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away: the next round tries again
                log.debug("ingress: could not renew our key or look for answers (%s)", exc)
            rounds += 1
            await asyncio.sleep(ttl / 3)

    async def release(self) -> None:
        """A clean stop: our key goes at once (our answers wait for our next run)."""
        if self._kv is not None:
            with contextlib.suppress(Exception):
                await self._kv.delete(self._me)

    async def _scan(self, kv: KeyValue) -> None:
        prefix = self._names.ingress_consumer("")
        for info in await self._js.consumers_info(self._names.out_stream):
            other = info.name[len(prefix) :] if info.name.startswith(prefix) else None
            if not other or other == self._me:
                continue
            if not (info.num_pending or info.num_ack_pending):
                continue
            try:
                await kv.get(other)
                continue  # alive
            except KeyNotFoundError:
                pass
            try:  # one adopter at a time (its claim expires with it)
                claim = await kv.create(f"adopting.{other}", self._me.encode())
            except KeyWrongLastSequenceError:
                continue
            log.info("ingress: %s has stopped with answers on their way; sending them", other)
            try:
                await self._adopt(other)
            finally:
                with contextlib.suppress(Exception):
                    await kv.delete(f"adopting.{other}", last=claim)

    async def _adopt(self, other: str) -> None:
        sub = await subscribe_answers(self._js, self._names, self._settings, other)
        try:
            while True:
                try:
                    msgs = await sub.fetch(PULL_BATCH, timeout=PULL_WAIT_S)
                except (nats.errors.TimeoutError, TimeoutError):
                    return
                for msg in msgs:
                    refused = self._signer.refusal("answer", msg)
                    if refused is not None:
                        log.warning("ingress: dropping an answer for %s: %s", other,
                                    refused.detail)  # fmt: skip
                        drop(msg, refused.reason)
                        continue
                    key = (msg.headers or {}).get(wire.KEY, "")
                    try:
                        self._resending.take(key, msg, ours=False)
                    except Exception:  # one bad answer must not hold up the others
                        log.exception("ingress: dropping an answer of %s that could not be "
                                      "taken", other)  # fmt: skip
                        drop(msg, "failed")
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
