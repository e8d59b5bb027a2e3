"""The ingress side: `BrokerCore`, the Core the adapters of `lightgrep ingress` are handed.

`handle(inbound, out)` publishes the message to its user's partition and waits until JetStream
has it (retrying through an outage: meanwhile the adapter does not acknowledge the platform, which
keeps the message). Then it waits for the answer, which a worker publishes (its Outbound calls,
in order) to this process's own subject, and replays the calls into `out` as they arrive
(assembly.py), so the adapter shows a streamed answer while it is written, as in one process.
So `handle` returns after the answer, as the agent's does: the adapter's "typing…" shows the
whole time, Discord's interaction is deferred after its `defer_after_s`, and the platform is
acknowledged only after both JetStream and the answer (an adapter needs no change to run here).
Answers travel through a JetStream stream, so one published while NATS or this process's
connection was away arrives after the reconnection.

An answer is acknowledged once the platform has it. An ingress that restarts on the same
folder has the same id, so it gets the answers on their way to the run before; nobody waits for
them. Telegram delivers the message again (it was not acknowledged): its publish is then a
duplicate, so it is published again under a new `Nats-Msg-Id`, and the worker's core, which
recognises the message by its platform id, answers with what it has on file, without persisting
it twice or asking the model again; the old answer is dropped. Discord does not deliver a
message again: its answer names where it goes (`Inbound.destination`) and is sent by
resend.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import uuid
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.object_store import ObjectStore

from bot.cluster import wire
from bot.cluster.adopt import Adopter, subscribe_answers
from bot.cluster.assembly import Assembly
from bot.cluster.chats import SharedChats
from bot.cluster.connection import Names, bodies, connect, ensure_streams
from bot.cluster.lease import folder_id
from bot.cluster.partition import partition_of
from bot.cluster.people import SharedPeople
from bot.cluster.publish import Publisher
from bot.cluster.push import deliver_pushed
from bot.cluster.resend import Resending, ack_soon, drop, pull_forever
from bot.cluster.signing import digest, signer_of
from bot.config import ClusterConfig
from bot.inbound import Inbound
from bot.observe.metrics import CLUSTER_REDELIVERED, count_cluster, count_rejected, watch_cluster
from bot.outbound import Outbound
from bot.platform import Resender
from bot.tasks import cancel_and_wait

log = logging.getLogger(__name__)



def new_ingress_id() -> str:
    """Unique per process run: host, pid, and a random part (a subject token: no dots)."""
    return f"{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def ingress_id_for(folder: Path) -> str:
    """The same for every run on this folder (`lightgrep ingress` holds its lock): a restarted
    ingress gets the answers that were on their way to the one before (resend.py)."""
    return f"{_host()}-{folder_id(folder)[:12]}"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:40] or "host"


class BrokerCore:
    """Core for the adapters of an ingress: the answers come from the workers (see above)."""

    def __init__(
        self,
        settings: ClusterConfig,
        ingress_id: str | None = None,
        chats: SharedChats | None = None,
    ) -> None:
        self._settings = settings
        self._names = Names(settings.subject_prefix)
        self._signer = signer_of(settings)
        self.ingress_id = ingress_id or new_ingress_id()
        self._reply_subject = self._names.out_subject(self.ingress_id)
        self._answers: dict[str, Assembly] = {}
        self._client: Client | None = None
        self._publisher: Publisher | None = None
        self._receipts: Publisher | None = None  # where answers went (Inbound.delivered)
        self._bodies: ObjectStore | None = None
        self._limit = 0
        self._listener: asyncio.Task[None] | None = None
        self._adopter: Adopter | None = None
        self._adopting: asyncio.Task[None] | None = None
        self._delivering: set[str] = set()  # answered; the adapter is sending it
        self.resending = Resending(settings.max_deliveries)
        self._js: JetStreamContext | None = None
        self._pushes: list[asyncio.Task[None]] = []  # reminders of each platform (push.py)
        # Who is whom (people.py): a message goes to the partition of its sender's person,
        # so every platform of one person is served by one worker, one writer.
        self.people = SharedPeople(None)
        self._chats = chats  # the chats' settings its adapters ask (group triggers)

    @property
    def waiting(self) -> int:
        """Messages published whose answer has not come yet."""
        return len(self._answers)

    def health(self) -> dict[str, Any]:
        """For /healthz (bot/observe/server.py): healthy while connected to NATS."""
        connected = self._client is not None and self._client.is_connected
        return {"healthy": connected, "nats_connected": connected, "waiting": self.waiting}

    async def start(self, stop: asyncio.Event) -> bool:
        """Connect and listen for answers; False if `stop` came first."""
        client = await connect(
            self._settings, f"lightgrep ingress {self.ingress_id}", stop, role="ingress"
        )
        if client is None:
            return False
        self._client = client
        js = self._js = client.jetstream()
        await ensure_streams(js, self._names, self._settings)
        self._publisher = Publisher(js, "a user's message", "message", self._signer, "message")
        self._receipts = Publisher(
            js, "where an answer was sent", "receipt", self._signer, "message"
        )
        self._bodies = await bodies(js, self._names, self._settings)
        await self.people.start(js, self._names, self._settings)
        if self._chats is not None:
            await self._chats.start(js, self._names, self._settings)
        self._limit = max(1024, client.max_payload - wire.HEADROOM)
        sub = await self._subscribe(js)
        self._listener = asyncio.create_task(self._listen(js, sub))
        self._adopter = Adopter(
            js, self._names, self._settings, self.ingress_id, self.resending, self._signer
        )
        self._adopting = asyncio.create_task(self._adopter.run())
        for platform in self.resending.senders:  # registered before start()
            self._deliver_pushed(platform)
        watch_cluster(lambda: client.is_connected, lambda: self.waiting)
        log.info("ingress %s: answers come on %s", self.ingress_id, self._reply_subject)
        return True

    def send_with(self, platform: str, adapter: Resender) -> None:
        """Send through `adapter` the answers for `platform` whose handle() call is gone, and
        the reminders the workers send for it (push.py, from start() on)."""
        self.resending.senders[platform] = adapter
        if self._js is not None:
            self._deliver_pushed(platform)

    def _deliver_pushed(self, platform: str) -> None:
        assert self._js is not None
        self._pushes.append(
            asyncio.create_task(
                deliver_pushed(
                    self._js, self._names, self._settings, platform, self.resending, self._signer
                )
            )
        )

    async def close(self) -> None:
        for task in (self._adopting, self._listener, *self._pushes):
            if task is not None:
                await cancel_and_wait(task)
        await self.people.close()
        if self._chats is not None:
            await self._chats.close()
        await self.resending.close()
        if self._adopter is not None:
            await self._adopter.release()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()

    async def handle(self, inbound: Inbound, out: Outbound) -> None:
        """Publish, wait for the answer, replay it into `out` (RemoteTurnFailed: the worker's
        core raised, and the adapter apologises as for any core)."""
        assert self._publisher is not None, "start() first"
        key = uuid.uuid4().hex
        if inbound.delivered is not None:  # a receipt: the worker notes it, answers nothing
            await out.begin(private=False)
            await self._publish(inbound, key, receipt=True)
            await out.finish()
            return
        answer = self._answers[key] = Assembly()
        try:
            await self._publish(inbound, key)
            await answer.replay(out)
        finally:
            del self._answers[key]
            self._settle(key, answer, inbound)

    def _settle(self, key: str, answer: Assembly, inbound: Inbound) -> None:
        """Acknowledge the answer once the platform has it: for an answer that can be sent by
        its destination, when the adapter's task that called handle() is done sending it (a
        cancelled one is left in the stream, and sent by resend.py); else now."""
        task = asyncio.current_task()
        if inbound.destination is None or task is None:
            ack_soon(answer.msgs)
            return
        self._delivering.add(key)

        def sent(done: asyncio.Future[object]) -> None:
            self._delivering.discard(key)
            if not done.cancelled():
                ack_soon(answer.msgs)

        task.add_done_callback(sent)

    async def _publish(self, inbound: Inbound, key: str, *, receipt: bool = False) -> None:
        assert self._publisher is not None and self._receipts is not None
        person = self.people.resolve(inbound.user_key)
        partition = partition_of(person, self._settings.partitions)
        subject = self._names.in_subject(partition)
        body = wire.encode_inbound(inbound)
        msg_id = f"{inbound.platform}:{inbound.message_id}" if inbound.message_id else key
        headers = {wire.MSG_ID: msg_id, wire.REPLY: self._reply_subject, wire.KEY: key}
        if len(body) > self._limit:
            body = await self._put_body(key, body, headers, inbound.session_key)
        publisher = self._receipts if receipt else self._publisher
        ack, retried = await publisher.publish(subject, body, headers)
        if ack.duplicate and not retried and not receipt:
            # Published before by an earlier run (the platform delivered it again after a
            # restart): that run was to get the answer. Ask again under a new id.
            log.info("message %s was published before; asking for its answer again", msg_id)
            headers[wire.MSG_ID] = f"{msg_id}#{key}"  # a large body: the one stored above
            await self._publisher.publish(subject, body, headers)

    async def _put_body(
        self, name: str, body: bytes, headers: dict[str, str], session_key: str
    ) -> bytes:
        """Keep a body too large for a message in the object store; the message's stub body."""
        assert self._bodies is not None
        backoff = 0.2
        while True:
            try:
                await self._bodies.put(name, body)
                break
            except Exception as exc:  # NATS away: as for any publish, hold it and retry
                log.warning("NATS: cannot store a large message (%s); retrying", exc)
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)
        headers[wire.BODY] = name
        headers[wire.SESSION] = session_key
        headers[wire.DIGEST] = await asyncio.to_thread(digest, body)  # ~50 ms for 25 MB
        return b""

    async def _subscribe(self, js: JetStreamContext) -> Any:
        return await subscribe_answers(js, self._names, self._settings, self.ingress_id)

    async def _listen(self, js: JetStreamContext, sub: Any) -> None:
        await pull_forever(sub, lambda: self._subscribe(js), self._take, "answer")

    def _take(self, msg: Msg) -> None:
        refused = self._signer.refusal("answer", msg)
        if refused is not None:
            log.warning("ingress: dropping an answer on %s: %s", msg.subject, refused.detail)
            drop(msg, refused.reason)
            return
        key = (msg.headers or {}).get(wire.KEY, "")
        if msg.metadata.num_delivered > 1:
            count_cluster(CLUSTER_REDELIVERED, "answer")
        answer = self._answers.get(key)
        if answer is None:
            if key in self._delivering:  # being sent: a later attempt's, or a redelivery
                ack_soon([msg])
            else:  # nobody waits for it: the answer of an earlier run, or asked twice
                self.resending.take(key, msg)
            return
        try:
            answer.add(msg)
        except wire.WireError as exc:  # acknowledged with the answer, which fails
            log.error("ingress: an answer that is not ours (%s)", exc)
            count_rejected("answer", "malformed")
            answer.fail(str(exc))
