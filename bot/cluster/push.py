"""Reminders in cluster mode: the worker that owns a person sends theirs, the ingress delivers.

A worker's scheduler (bot/reminders/scheduler.py) sends through a `PushSender` per platform: the
reminder, as the Outbound calls of an answer, is published to `<prefix>.out.reminders-<platform>`
with its place as the DESTINATION header. Every ingress that serves the platform pulls from one
durable consumer of that subject, shared, so each reminder goes to one of them, which sends it
through its adapter's `send_to` exactly as an answer whose ingress was gone (resend.py) and
acknowledges it once the platform took it; one the platform refused, or whose ingress died
holding it, is delivered again. The worker records the reminder as sent once JetStream has it.
Like every answer it is signed (signing.py): an ingress sends none a worker of this cluster did
not write, so no one who can publish to NATS can have the bot post in a chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import BadRequestError

from bot.cluster import wire
from bot.cluster.connection import Names
from bot.cluster.resend import PULL_WAIT_S, Resending, drop, pull_forever
from bot.cluster.signing import Signer
from bot.config import ClusterConfig
from bot.outbound import Reply

log = logging.getLogger(__name__)

PUBLISH_TRIES = 3
PUBLISH_TIMEOUT_S = 2.0


class PushSender:
    """A worker's sender of one platform's reminders (bot.platform.Resender)."""

    def __init__(self, js: JetStreamContext, names: Names, platform: str, signer: Signer) -> None:
        self._js = js
        self._subject = names.push_subject(platform)
        self._platform = platform
        self._signer = signer

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        """Published once JetStream has it; raises if it could not be (the scheduler tries
        again later, rather than holding a stop up)."""
        reply = reply or Reply("(Something went wrong on my side.)")
        calls = [
            wire.call("begin", reply.private),
            wire.call("add_text", reply.text),
            wire.call("finish"),
        ]
        body = wire.encode_calls(calls)
        key = uuid.uuid4().hex
        headers = {
            wire.KEY: key,
            wire.ATTEMPT: key,
            wire.SEQ: "0",
            wire.DESTINATION: wire.destination_of(self._platform, destination),
            # Unique: a repeating reminder's text is the same each time, and must not be taken
            # for a duplicate of the last one (a retry of this very publish may be, and is).
            wire.MSG_ID: f"reminder:{key}",
        }
        error: Exception | None = None
        for attempt in range(PUBLISH_TRIES):
            # Signed as an answer to its own subject, at each try (signing.py): an ingress
            # sends it only if a worker of this cluster wrote it, and no answer can be passed
            # off as one.
            self._signer.sign("answer", self._subject, headers, body)
            try:
                await self._js.publish(
                    self._subject, body, timeout=PUBLISH_TIMEOUT_S, headers=headers
                )
                return
            except Exception as exc:  # every failure of nats-py means "not stored yet"
                error = exc
                await asyncio.sleep(0.2 * (attempt + 1))
        raise ConnectionError(f"NATS did not take the reminder ({error})")


async def deliver_pushed(
    js: JetStreamContext,
    names: Names,
    settings: ClusterConfig,
    platform: str,
    resending: Resending,
    signer: Signer,
) -> None:
    """Until cancelled, in an ingress: the reminders of `platform`, sent by resending; one
    not signed by a worker of this cluster is dropped, logged and counted."""
    sub: Any = None
    while sub is None:
        try:
            sub = await _subscribe(js, names, settings, platform)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # NATS away: as everywhere, wait and try again
            log.debug("ingress: cannot subscribe to the reminders of %s (%s)", platform, exc)
            await asyncio.sleep(PULL_WAIT_S)

    def take(msg: Msg) -> None:
        refused = signer.refusal("answer", msg)
        if refused is not None:
            log.warning("ingress: dropping a reminder on %s: %s", msg.subject, refused.detail)
            drop(msg, refused.reason)
            return
        resending.take((msg.headers or {}).get(wire.KEY, ""), msg)

    await pull_forever(sub, lambda: _subscribe(js, names, settings, platform), take, "reminder")

async def _subscribe(
    js: JetStreamContext, names: Names, settings: ClusterConfig, platform: str
) -> Any:
    """The consumer every ingress of the platform shares (made by the first; kept, not made
    afresh as an ingress's own is: the others are pulling from it)."""
    durable = names.push_consumer(platform)
    config = ConsumerConfig(
        durable_name=durable,
        filter_subject=names.push_subject(platform),
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=max(60.0, settings.ack_wait_s),
        max_deliver=-1,
    )
    with contextlib.suppress(BadRequestError):  # it exists already
        await js.add_consumer(names.out_stream, config)
    return await js.pull_subscribe_bind(durable=durable, stream=names.out_stream)
