"""The answers an ingress receives that no handle() call waits for, sent by their destination
(and the reminders the workers send, push.py, which arrive the same way).

An answer stays in the answer stream until the ingress acknowledges it, which it does only once
the platform took it (ingress.py). If the ingress dies before, the answer is delivered again to
the ingress that restarts on the same folder (its id is the folder's), which has no handle()
call waiting for it: if the answer names its destination (`Inbound.destination`, Discord's),
it is sent here through the adapter's `send_to` (bot.platform.Resender), once complete, and
acknowledged after; one the platform refuses is delivered again later (after 1 s, doubling to
15 minutes), and given up after `[cluster] max_deliveries` tries (logged, counted in /metrics:
a channel the bot was removed from must not be asked forever). An answer without a
destination is dropped: its platform delivers the message again (Telegram), and that message's
answer is the one sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from bot.cluster import wire
from bot.cluster.assembly import Assembly
from bot.observe.metrics import CLUSTER_ACKED, CLUSTER_RESENT, count_cluster, count_rejected
from bot.outbound import BufferedOutbound, Reply
from bot.platform import Resender

log = logging.getLogger(__name__)

PULL_BATCH = 256  # messages fetched at once from an ingress's consumers
PULL_WAIT_S = 1.0

RETRY_AFTER_S = 5.0  # an answer for a platform this ingress does not serve: for another
FIRST_RETRY_S = 1.0  # an answer the platform refused comes back this much later, doubling
MAX_RETRY_S = 900.0
REMEMBERED = 10_000  # keys of answers sent here, so a late second attempt is not sent again


class Resending:
    """Sends the answers whose handle() call is gone (see the module docstring)."""

    def __init__(self, max_deliveries: int) -> None:
        self.senders: dict[str, Resender] = {}  # platform → its adapter
        self.max_deliveries = max_deliveries
        self.sent = 0  # answers sent here (for /metrics)
        self._pending: dict[str, Assembly] = {}  # key → the answer, until it is complete
        self._done: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def take(self, key: str, msg: Msg, *, ours: bool = True) -> None:
        """A message of an answer nobody waits for; `ours`: sent to our id, not adopted from a
        dead ingress's (adopt.py), whose answers for a platform we do not serve are left."""
        if key in self._done or not (msg.headers or {}).get(wire.DESTINATION):
            ack_soon([msg])
            return
        answer = self._pending.setdefault(key, Assembly())
        if msg.metadata.num_delivered > self.max_deliveries:  # a part that never completes
            log.error("ingress: an answer still incomplete after %d deliveries, dropped",
                      msg.metadata.num_delivered)  # fmt: skip
            del self._pending[key]
            drop([*answer.msgs, msg], "too_many_deliveries")
            return
        try:
            answer.add(msg)
        except wire.WireError as exc:
            log.error("ingress: an answer that is not ours, dropped (%s)", exc)
            answer.msgs.remove(msg)  # its other messages may still make a whole answer
            drop([msg], "malformed")
            return
        calls = answer.whole()
        if calls is None:
            return
        del self._pending[key]
        self._remember(key)
        task = asyncio.create_task(self._send(key, answer, calls, ours))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Let the sends under way finish (a send is never cut half way)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _send(
        self, key: str, answer: Assembly, calls: list[tuple[str, object]], ours: bool
    ) -> None:
        try:
            platform, destination = wire.parse_destination(answer.destination or "")
        except wire.WireError as exc:
            log.error("ingress: an answer with a bad destination, dropped (%s)", exc)
            ack_soon(answer.msgs)
            return
        sender = self.senders.get(platform)
        if sender is None and not ours:  # for an ingress that serves it
            self._done.pop(key, None)
            for msg in answer.msgs:
                with contextlib.suppress(Exception):
                    await msg.nak(delay=RETRY_AFTER_S)
            return
        if sender is None:
            log.warning("ingress: an answer for %s, which this ingress does not serve: dropped",
                        platform)  # fmt: skip
            ack_soon(answer.msgs)
            return
        out = BufferedOutbound()
        reply: Reply | None
        try:
            await wire.replay(calls, out)
            reply = out.reply
        except wire.RemoteTurnFailed:
            reply = None
        try:
            await sender.send_to(destination, reply)
        except Exception as exc:  # not taken: delivered again, tried again, up to a bound
            self._done.pop(key, None)
            tries = max(msg.metadata.num_delivered for msg in answer.msgs)
            if tries >= self.max_deliveries:
                log.error("ingress: could not send an earlier answer on %s in %d tries (%s); "
                          "given up", platform, tries, exc)  # fmt: skip
                drop(answer.msgs, "too_many_deliveries")
                return
            log.warning("ingress: could not send an earlier answer on %s (%s); retrying later",
                        platform, exc)  # fmt: skip
            delay = min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** (tries - 1))
            for msg in answer.msgs:
                with contextlib.suppress(Exception):
                    await msg.nak(delay=delay)
            return
        self.sent += 1
        count_cluster(CLUSTER_RESENT)
        log.info("ingress: sent on %s a message nobody waited for (a reminder, or an answer whose "
                 "ingress had stopped)", platform)  # fmt: skip
        ack_soon(answer.msgs)

    def _remember(self, key: str) -> None:
        self._done[key] = None
        while len(self._done) > REMEMBERED:
            self._done.popitem(last=False)


_acking: set[asyncio.Task[None]] = set()


def ack_soon(msgs: list[Msg]) -> None:
    """Acknowledge answer messages without waiting (done with either way; one that fails is
    delivered again, and dropped then)."""
    for msg in msgs:
        task = asyncio.ensure_future(_quiet(msg.ack()))
        _acking.add(task)
        task.add_done_callback(_acking.discard)


async def _quiet(ack: Awaitable[None]) -> None:
    with contextlib.suppress(Exception):
        await ack
        count_cluster(CLUSTER_ACKED, "answer")


def drop(msgs: Msg | list[Msg], reason: str) -> None:
    """Answer messages that cannot be sent, counted once by `reason` (CLUSTER_REJECTED) and
    terminated without waiting: JetStream never delivers them again."""
    msgs = msgs if isinstance(msgs, list) else [msgs]
    count_rejected("answer", reason)
    for msg in msgs:
        task = asyncio.ensure_future(_terminate(msg))
        _acking.add(task)
        task.add_done_callback(_acking.discard)


async def _terminate(msg: Msg) -> None:
    with contextlib.suppress(Exception):  # not terminated: delivered again, dropped again
        await msg.term()


async def pull_forever(
    sub: Any, subscribe: Callable[[], Awaitable[Any]], take: Callable[[Msg], None], what: str
) -> None:
    """Until cancelled, in an ingress: every message of the pull subscription `sub` to `take`
    (one that raises is dropped, logged and counted: it must not stop the others). A consumer
    that is gone (idle too long, cut off from NATS, or adopted) is made again by `subscribe`;
    while NATS is away the client reconnects, and this waits and asks again. `what`: the
    messages' name in the log ("answer", "reminder")."""
    while True:
        try:
            msgs = await sub.fetch(PULL_BATCH, timeout=PULL_WAIT_S)
        except (nats.errors.TimeoutError, TimeoutError):
            continue
        except asyncio.CancelledError:
            raise
        except NotFoundError:
            log.warning("ingress: the %s consumer was gone; making it again", what)
            with contextlib.suppress(Exception):
                sub = await subscribe()
            continue
        except Exception as exc:
            log.debug("ingress: fetching %ss failed (%s)", what, exc)
            await asyncio.sleep(PULL_WAIT_S)
            continue
        for msg in msgs:
            try:
                take(msg)
            except Exception:
                log.exception("ingress: dropping a %s message that could not be taken", what)
                drop(msg, "failed")
