"""A worker: consumes its partitions' messages and answers them with the real core.

Each partition is a durable pull consumer on `<prefix>.in.<n>`. A message is acknowledged only
after every Outbound call of its answer has been published to the answer stream and JetStream
has acknowledged it, so a worker killed mid-turn leaves the message to be delivered again; the
core recognises a message it has already persisted by its id (persisted once, answered with
what is on file, or answered now). A running turn tells JetStream it is still at work
(`in_progress`) every third of the ack wait, so a long turn is not delivered twice. A loop held
past the ack wait (a loaded machine) still lets JetStream deliver a message again: while it
runs, the copy is ignored; one that arrives as it ends (the ack crossed it) is acknowledged,
not run again (`_done`, the last DONE_REMEMBERED stream sequences finished here).

Different sessions' messages run at once; one session's run in the order of the partition. At
start the consumers are made afresh: a consumer remembers what it delivered to the previous run
and would deliver that again only after the ack wait, behind newer messages; a new consumer of
a work queue starts at the oldest message not yet acknowledged, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from nats.js.object_store import ObjectStore

from bot.cluster import wire
from bot.cluster.connection import Names, bodies, connect, ensure_streams
from bot.cluster.lease import Holder, Leases
from bot.cluster.partition import describe_ranges, partition_of, serves
from bot.cluster.publish import Publisher
from bot.cluster.push import PushSender
from bot.cluster.signing import digest, signer_of
from bot.config import ClusterConfig
from bot.inbound import Inbound
from bot.observe.metrics import (
    CLUSTER_ACKED,
    CLUSTER_REDELIVERED,
    count_cluster,
    count_rejected,
    watch_cluster,
)
from bot.outbound import BufferedOutbound, Button, Notice, OutFile
from bot.tasks import cancel_and_wait

if TYPE_CHECKING:
    from bot.cluster.chats import SharedChats
    from bot.cluster.people import SharedPeople
    from bot.platform import Core

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 256  # messages of all partitions fetched and not yet acknowledged
DONE_REMEMBERED = 10_000  # stream sequences finished here: a late redelivery is not run again
FETCH_BATCH = 64
FETCH_WAIT_S = 1.0
FAILED = "the worker's core raised"
FIRST_TEXT_S = 0.2  # the first streamed text waits this long for more (a short answer: one message)
STREAM_EVERY_S = 0.5  # then the streamed text leaves at most this often


class PublishingOutbound:
    """The reply port in a worker: the calls published, in order, to the ingress's subject.

    Calls are gathered and published together: the ones made while the text streams every
    STREAM_EVERY_S at most (the first FIRST_TEXT_S after the first piece), the rest when the
    answer ends (finish, or error when the core raised). The ingress paces what it shows
    itself (adapters/live.py); this only bounds the messages: an answer written in a fraction
    of a second travels as one message, a long one as about two a second. `seq` numbers the
    messages of one attempt."""

    def __init__(self, publisher: Publisher, subject: str, key: str, part_limit: int) -> None:
        self._publisher = publisher
        self._subject = subject
        self._key = key
        self._attempt = uuid.uuid4().hex  # this run of this delivery
        self._seq = 0
        self._limit = part_limit
        self._calls: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()  # one flush at a time: messages leave in `seq` order
        self._timer: asyncio.Task[None] | None = None
        self._flushed_text = False
        self.destination: str | None = None  # wire.destination(inbound), on every message

    async def begin(self, *, private: bool = False) -> None:
        await self._send("begin", private)

    async def add_text(self, text: str) -> None:
        await self._send("add_text", text)

    async def attach_file(self, file: OutFile) -> None:
        await self._send("attach_file", file)

    async def offer(self, buttons: tuple[Button, ...]) -> None:
        await self._send("offer", tuple(buttons))

    async def notice(self, what: Notice) -> None:
        await self._send("notice", what)

    async def finish(self) -> None:
        await self._send("finish")

    async def error(self) -> None:
        await self._send("error", FAILED)

    async def _send(self, op: wire.Op, arg: Any = None) -> None:
        self._calls.append(wire.call(op, arg))
        if op in wire.ENDS:
            if self._timer is not None:
                self._timer.cancel()  # a flush under way is let finish (it holds the lock)
            await self._flush()
        elif op in ("add_text", "notice") and self._timer is None:
            delay = STREAM_EVERY_S if self._flushed_text else FIRST_TEXT_S
            self._timer = asyncio.create_task(self._flush_after(delay))

    async def _flush_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._timer = None  # from here on, a new piece starts the next wait
        self._flushed_text = True
        await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            if not self._calls:
                return
            calls, self._calls = self._calls, []
            parts = wire.split(wire.encode_calls(calls), self._limit)
            for index, part in enumerate(parts):
                headers = {
                    wire.KEY: self._key,
                    wire.ATTEMPT: self._attempt,
                    wire.SEQ: str(self._seq),
                    # JetStream drops a message published twice (a retry whose first try got
                    # through).
                    wire.MSG_ID: f"{self._attempt}:{self._seq}:{index}",
                }
                if self.destination is not None:
                    headers[wire.DESTINATION] = self.destination
                if len(parts) > 1:
                    headers[wire.PART] = f"{index}/{len(parts)}"
                await self._publisher.publish(self._subject, part, headers)
            self._seq += 1


class Worker:
    """Serves a fixed set of partitions until stopped (bot/cli/main.py `lightgrep worker`)."""

    name = "worker"

    def __init__(
        self,
        core: Core,
        settings: ClusterConfig,
        partitions: list[int],
        me: Holder,
        people: SharedPeople | None = None,
        before_serving: Callable[[], None] | None = None,
        chats: SharedChats | None = None,
    ) -> None:
        self.ready = asyncio.Event()
        self._core = core
        self._people = people  # who is whom: a message goes to its person's partition
        self._before_serving = before_serving  # once the table is read (People.finish_shipping)
        self._chats = chats  # the chats' settings (the agent's book)
        self._settings = settings
        self._names = Names(settings.subject_prefix)
        self._signer = signer_of(settings)
        self._partitions = partitions
        self._owns = serves(partitions, settings.partitions)
        self._me = me
        self._in_flight: set[int] = set()  # stream sequences fetched, not yet acknowledged
        self._done: OrderedDict[int, None] = OrderedDict()  # finished, the last DONE_REMEMBERED
        self._room = asyncio.Event()
        self._chains: dict[str, asyncio.Task[None]] = {}  # session key → its last message
        self._tasks: set[asyncio.Task[None]] = set()
        self._stores: ObjectStore  # the large bodies (set once connected)
        self._client: Client | None = None
        self._leases: Leases | None = None
        self._js: JetStreamContext | None = None

    def health(self) -> dict[str, Any]:
        """For /healthz (bot/observe/server.py): healthy while connected and serving every partition
        with its claim held."""
        connected = self._client is not None and self._client.is_connected
        held = [p for p in self._partitions if self._leases is not None and self._leases.holds(p)]
        missing = sorted(set(self._partitions) - set(held))
        return {
            "healthy": connected and self.ready.is_set() and not missing,
            "nats_connected": connected,
            "serving": self.ready.is_set(),
            "partitions_held": describe_ranges(held) if held else "",
            "partitions_not_held": describe_ranges(missing) if missing else "",
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, claim the partitions (LeaseHeld if another worker has one), serve until
        `stop`, then finish the running turns and give the claims up."""
        client = await connect(
            self._settings, f"lightgrep worker {self._me.pid}", stop, role="worker"
        )
        if client is None:
            return
        self._client = client
        leases: Leases | None = None
        try:
            js = client.jetstream()
            await ensure_streams(js, self._names, self._settings)
            if self._people is not None:
                await self._people.start(js, self._names, self._settings)
            if self._chats is not None:
                await self._chats.start(js, self._names, self._settings)
            if self._before_serving is not None:
                await asyncio.to_thread(self._before_serving)
            leases = self._leases = Leases(
                js, self._names, self._partitions, self._me, self._settings.lease_ttl_s,
                self._settings.replicas,
            )  # fmt: skip
            await leases.acquire()
            await self._serve(client, js, leases, stop)
        finally:
            if leases is not None:
                await leases.release()
            if self._people is not None:
                await self._people.close()
            if self._chats is not None:
                await self._chats.close()
            with contextlib.suppress(Exception):
                await client.close()

    async def _serve(
        self, client: Client, js: JetStreamContext, leases: Leases, stop: asyncio.Event
    ) -> None:
        self._js = js
        self._forwarder = Publisher(
            js, "a message of another worker's person", "message", self._signer, "message"
        )
        publisher = Publisher(js, "an answer", "answer", self._signer, "answer")
        self._stores = await bodies(js, self._names, self._settings)
        limit = max(1024, client.max_payload - wire.HEADROOM)
        subs = {p: await self._subscribe(js, p) for p in self._partitions}
        fetching = asyncio.Event()  # set: stop fetching (`stop`, or a lost claim)
        loops = [
            asyncio.create_task(self._consume(p, sub, publisher, limit, fetching))
            for p, sub in subs.items()
        ]
        keeper = asyncio.create_task(leases.keep(fetching))
        watch_cluster(
            lambda: client.is_connected,
            leases={p: functools.partial(leases.holds, p) for p in self._partitions},
        )
        stopping = asyncio.create_task(stop.wait())
        log.info(
            "worker: serving partitions %s of %d (pid %s, workspaces %s)",
            describe_ranges(self._partitions),
            self._settings.partitions,
            self._me.pid,
            self._me.workspaces,
        )
        self.ready.set()
        try:
            await asyncio.wait({keeper, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            fetching.set()
            stopping.cancel()
            for loop in loops:
                loop.cancel()  # what a cancelled fetch brought is delivered again later
            await asyncio.gather(*loops, return_exceptions=True)
            if self._tasks:
                log.info("worker: stopping; finishing %d running turn(s)", len(self._tasks))
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            await cancel_and_wait(keeper)
            self.ready.clear()
        lost = keeper.exception() if keeper.done() and not keeper.cancelled() else None
        if lost is not None:
            raise lost  # a claim lost to another worker

    def owns(self, user_key: str) -> bool:
        """Whether this worker serves the person: it sends their reminders too."""
        return self._owns(user_key)

    def sender(self, platform: str) -> PushSender:
        """What sends the reminders of `platform` (once ready): push.py."""
        assert self._js is not None, "not serving yet"
        return PushSender(self._js, self._names, platform, self._signer)

    async def _subscribe(self, js: JetStreamContext, partition: int) -> Any:
        durable = self._names.partition_consumer(partition)
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(self._names.in_stream, durable)
        config = ConsumerConfig(
            durable_name=durable,
            filter_subject=self._names.in_subject(partition),
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self._settings.ack_wait_s,
            max_deliver=-1,  # never given up on: nothing is lost
            max_ack_pending=MAX_IN_FLIGHT,
        )
        await js.add_consumer(self._names.in_stream, config)
        return await js.pull_subscribe_bind(durable=durable, stream=self._names.in_stream)

    async def _consume(
        self, partition: int, sub: Any, publisher: Publisher, limit: int, stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            room = MAX_IN_FLIGHT - len(self._in_flight)
            if room <= 0:
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), FETCH_WAIT_S)
                continue
            try:
                msgs = await sub.fetch(min(room, FETCH_BATCH), timeout=FETCH_WAIT_S)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except Exception as exc:  # NATS away: the client reconnects; so do we
                log.debug("worker: fetch on partition %s failed (%s)", partition, exc)
                await asyncio.sleep(FETCH_WAIT_S)
                continue
            for msg in msgs:
                try:
                    self._dispatch(msg, publisher, limit)
                except Exception:  # one message must never end its partition's loop
                    log.exception("worker: dropping a message of partition %s", partition)
                    self._spawn(self._drop(msg, "failed"))

    def _dispatch(self, msg: Msg, publisher: Publisher, limit: int) -> None:
        seq = msg.metadata.sequence.stream
        delivered = msg.metadata.num_delivered
        if delivered > 1:
            count_cluster(CLUSTER_REDELIVERED, "message")
        if seq in self._in_flight:
            return  # delivered again while still running here (the ack wait passed)
        if seq in self._done:  # delivered again as it finished (the ack crossed it): done
            self._spawn(self._ack_again(msg))
            return
        headers = msg.headers or {}
        refused = self._signer.refusal("message", msg)
        if refused is not None:  # its reply subject is not to be trusted either: no answer
            log.warning("worker: dropping message %s on %s: %s", seq, msg.subject, refused.detail)
            self._spawn(self._drop(msg, refused.reason))
            return
        stored = headers.get(wire.BODY)
        out: PublishingOutbound | None = None  # the sender's answer, once we know where
        try:
            reply, key = headers[wire.REPLY], headers[wire.KEY]
            if not reply.startswith(self._names.out_subject("")) or "*" in reply or ">" in reply:
                raise wire.WireError(f"answers go to {self._names.out_subject('<ingress>')}")
            out = PublishingOutbound(publisher, reply, key, limit)
            if delivered > self._settings.max_deliveries:
                log.error(
                    "worker: dropping message %s, delivered %d times ([cluster] max_deliveries)",
                    seq, delivered,
                )  # fmt: skip
                self._spawn(self._drop(msg, "too_many_deliveries", out))
                return
            inbound: Inbound | None = None  # a stored body is fetched in its turn
            if stored is None:
                inbound = wire.decode_inbound(msg.data)
                session = inbound.session_key
            else:
                session = headers[wire.SESSION]
        except (wire.WireError, KeyError) as exc:
            log.error("worker: dropping message %s, not a LightGrep message (%s)", seq, exc)
            self._spawn(self._drop(msg, "malformed", out))
            return
        self._in_flight.add(seq)
        previous = self._chains.get(session)
        task = self._spawn(self._process(msg, seq, inbound, stored, out, previous))
        self._chains[session] = task

        def unchain(done: asyncio.Task[None]) -> None:
            if self._chains.get(session) is done:
                del self._chains[session]

        task.add_done_callback(unchain)

    async def _process(
        self,
        msg: Msg,
        seq: int,
        inbound: Inbound | None,
        stored: str | None,
        out: PublishingOutbound,
        previous: asyncio.Task[None] | None,
    ) -> None:
        keepalive = asyncio.create_task(self._keep_alive(msg))
        try:
            if previous is not None:
                await asyncio.wait({previous})  # one session's messages in order
            if inbound is None:
                assert stored is not None
                inbound = await self._fetch(stored, seq, (msg.headers or {}).get(wire.DIGEST))
            if inbound is not None and await self._forwarded(msg, seq, inbound):
                keepalive.cancel()
                with contextlib.suppress(Exception):
                    await msg.ack()
                return  # its body, if stored, is read by the worker it went to
            receipt = inbound is not None and inbound.delivered is not None
            if inbound is not None and receipt:  # noted; nobody waits for an answer
                try:
                    await self._core.handle(inbound, BufferedOutbound())
                except Exception:  # a reply to that answer then quotes the platform's text
                    log.exception("worker: a receipt failed for %s", inbound.session_key)
            elif inbound is not None:
                out.destination = wire.destination(inbound)
                try:
                    await self._core.handle(inbound, out)
                except Exception:
                    log.exception("worker: the turn failed for session %s", inbound.session_key)
                    await out.error()
            keepalive.cancel()
            try:
                await msg.ack()
                count_cluster(CLUSTER_ACKED, "receipt" if receipt else "message")
            except Exception as exc:  # delivered again later; the core will not repeat it
                log.warning("worker: could not acknowledge message %s (%s)", seq, exc)
            if stored is not None and inbound is not None:
                with contextlib.suppress(Exception):  # a leftover only costs space
                    await self._stores.delete(stored)
        except wire.WireError as exc:  # a stored body that is not an Inbound, or not the one sent
            log.error("worker: dropping message %s, not a LightGrep message (%s)", seq, exc)
            await self._drop(msg, exc.reason, out)
            if stored is not None:
                with contextlib.suppress(Exception):
                    await self._stores.delete(stored)
        except Exception:  # our own bug, on this message only: the others go on
            log.exception("worker: dropping message %s, which could not be handled", seq)
            await self._drop(msg, "failed", out)
        finally:
            keepalive.cancel()
            self._in_flight.discard(seq)
            self._done[seq] = None
            if len(self._done) > DONE_REMEMBERED:
                self._done.popitem(last=False)
            self._room.set()

    @staticmethod
    async def _ack_again(msg: Msg) -> None:
        with contextlib.suppress(Exception):  # not taken: delivered again, skipped again
            await msg.ack()

    async def _forwarded(self, msg: Msg, seq: int, inbound: Inbound) -> bool:
        """A message whose sender's person is another partition's (the ingress chose before a
        link or unlink reached it): published to that partition, as the ingress would have,
        and True. Only after reading the table again: a change the watch has not brought yet
        would else send it back and forth."""
        if self._people is None or self.owns(self._people.resolve(inbound.user_key)):
            return False
        await self._people.refresh()
        person = self._people.resolve(inbound.user_key)
        if self.owns(person):
            return False
        subject = self._names.in_subject(partition_of(person, self._settings.partitions))
        headers = {k: v for k, v in (msg.headers or {}).items() if k != wire.MAC}
        headers[wire.MSG_ID] = f"{headers.get(wire.MSG_ID, '')}>{self._names.in_stream}:{seq}"
        await self._forwarder.publish(subject, msg.data, headers)
        log.info("worker: message %s is of %s's partition now; forwarded", seq, person)
        return True

    async def _drop(
        self, msg: Msg, reason: str, out: PublishingOutbound | None = None
    ) -> None:
        """Done with a message that cannot be handled: its sender is told the turn failed (the
        adapter apologises), JetStream never delivers it again, /metrics counts it."""
        count_rejected("message", reason)
        if out is not None:
            with contextlib.suppress(Exception):
                await out.error()
        with contextlib.suppress(Exception):  # not terminated: delivered again, dropped again
            await msg.term()

    async def _fetch(self, name: str, seq: int, expected: str | None) -> Inbound | None:
        """A body kept in the object store; None if it is gone (this message was answered
        before, and its body deleted); WireError if it is not an Inbound, NotAuthentic if it
        is not the body the signed message names (`expected`: its digest)."""
        while True:
            try:
                result = await self._stores.get(name)
                body = result.data or b""
                checked = expected is not None or self._signer.on
                # The digest of 25 MB takes ~50 ms: off the loop.
                if checked and await asyncio.to_thread(digest, body) != expected:
                    raise wire.NotAuthentic("a stored body that is not the one sent")
                return wire.decode_inbound(body)
            except NotFoundError:  # also ObjectNotFoundError
                log.info("worker: message %s was answered before (its body is gone)", seq)
                return None
            except wire.WireError:
                raise
            except Exception as exc:  # NATS away: wait, as for every call
                log.warning("worker: cannot fetch the body of message %s (%s)", seq, exc)
                await asyncio.sleep(1.0)

    async def _keep_alive(self, msg: Msg) -> None:
        """Until cancelled: tell JetStream the message is being worked on (a long turn, or one
        waiting behind its session's earlier message)."""
        every = max(0.5, self._settings.ack_wait_s / 3)
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
