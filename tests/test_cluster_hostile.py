"""The cluster's wire under hostile or broken input, over a real nats-server: a message that
cannot be decoded or handled is dropped (logged, terminated, counted in /metrics) and the
partition or the ingress goes on with the next; an answer the platform keeps refusing is given
up after `[cluster] max_deliveries`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from bot.cluster import wire
from bot.cluster.adopt import subscribe_answers
from bot.cluster.connection import Names
from bot.cluster.ingress import BrokerCore
from bot.cluster.partition import partition_of
from bot.cluster.wire import RemoteTurnFailed
from bot.config import ClusterConfig
from bot.inbound import Inbound
from bot.observe.metrics import REGISTRY
from bot.outbound import BufferedOutbound, Outbound, Reply
from tests.agent_helpers import dm
from tests.cluster_helpers import WAIT_S, serving, settings
from tests.nats_server import NatsServer

pytestmark = pytest.mark.timeout(60)

NESTED = b"[" * 50_000 + b"]" * 50_000  # json.loads: RecursionError, not ValueError


def rejected(kind: str, reason: str) -> float:
    """The /metrics figure of messages of `kind` dropped for `reason`."""
    labels = {"kind": kind, "reason": reason}
    return REGISTRY.get_sample_value("lightgrep_cluster_rejected_total", labels) or 0.0


@contextlib.asynccontextmanager
async def raw_client(server: NatsServer) -> AsyncIterator[Client]:
    """A bare NATS client: what any program that reaches the server can do."""
    client = await nats.connect(server.url)
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def ingress(cluster: ClusterConfig) -> AsyncIterator[BrokerCore]:
    core = BrokerCore(cluster)
    assert await core.start(asyncio.Event())
    try:
        yield core
    finally:
        await core.close()


class Echo:
    """The worker's core: answers "echo <text>" (the far side of the port, not the agent)."""

    async def handle(self, inbound: Inbound, out: Outbound) -> None:
        await out.begin()
        await out.add_text(f"echo {inbound.text}")
        await out.finish()


async def stored(client: Client, stream: str) -> int:
    return (await client.jetstream().stream_info(stream)).state.messages


async def until(check: Any, what: str) -> None:
    async def poll() -> None:
        while not await check():  # noqa: ASYNC110 - polled: it asks NATS or a fake
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), WAIT_S)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_a_nested_message_is_dropped_and_its_partition_goes_on(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """50,000 '[' then 50,000 ']' on the partition of the person who writes next: that
    message is terminated and counted, its sender told it failed, the next one answered."""
    cluster = settings(nats_server)
    names = Names(cluster.subject_prefix)
    person = dm("1", "hello")
    subject = names.in_subject(partition_of(person.user_key, cluster.partitions))
    before = rejected("message", "malformed")
    async with serving(Echo(), cluster, tmp_path / "w"), raw_client(nats_server) as raw:
        told = await raw.subscribe(names.out_subject("prober"))
        await raw.flush()
        headers = {wire.REPLY: names.out_subject("prober"), wire.KEY: "k1", wire.MSG_ID: "m1"}
        await raw.jetstream().publish(subject, NESTED, headers=headers)
        async with ingress(cluster) as core:
            out = BufferedOutbound()
            await asyncio.wait_for(core.handle(person, out), WAIT_S)
            assert out.reply.text == "echo hello"
        answer = await told.next_msg(timeout=WAIT_S)  # the sender is told it failed
        assert (answer.headers or {})[wire.KEY] == "k1"
        assert [op for op, _ in wire.decode_calls(answer.data)] == ["error"]
        assert rejected("message", "malformed") == before + 1
        await until(lambda: _none_left(raw, names.in_stream), "the in stream to be empty")


async def _none_left(client: Client, stream: str) -> bool:
    return await stored(client, stream) == 0


async def fake_worker(raw: Client, names: Names, body: bytes) -> asyncio.Task[None]:
    """Answers the first message on any partition with `body` (as a broken worker would)."""
    sub = await raw.subscribe(f"{names.prefix}.in.>")
    await raw.flush()  # the server has the subscription before anyone publishes

    async def answer() -> None:
        msg = await sub.next_msg(timeout=WAIT_S)
        headers = msg.headers or {}
        key = headers[wire.KEY]
        reply = {wire.KEY: key, wire.ATTEMPT: "a", wire.SEQ: "0", wire.MSG_ID: f"{key}:0"}
        await raw.jetstream().publish(headers[wire.REPLY], body, headers=reply)

    return asyncio.create_task(answer())


async def test_a_nested_answer_fails_the_turn_instead_of_holding_it_forever(
    nats_server: NatsServer,
) -> None:
    """The adapter's handle() ends with the apology (RemoteTurnFailed); the answer message
    is taken off the stream, counted, and the next answer is read as usual."""
    cluster = settings(nats_server)
    names = Names(cluster.subject_prefix)
    before = rejected("answer", "malformed")
    async with raw_client(nats_server) as raw, ingress(cluster) as core:
        worker = await fake_worker(raw, names, NESTED)
        with pytest.raises(RemoteTurnFailed):
            await asyncio.wait_for(core.handle(dm("1", "hi"), BufferedOutbound()), WAIT_S)
        await worker
        assert rejected("answer", "malformed") == before + 1
        good = wire.encode_calls([wire.call("begin", False), wire.call("add_text", "fine"),
                                  wire.call("finish")])  # fmt: skip
        worker = await fake_worker(raw, names, good)
        out = BufferedOutbound()
        await asyncio.wait_for(core.handle(dm("1", "again"), out), WAIT_S)
        await worker
        assert out.reply.text == "fine"
        await until(lambda: _none_left(raw, names.out_stream), "the out stream to be empty")


class Refusing:
    """The platform's side of a resend (bot.platform.Resender): it refuses every time."""

    name = "discord"

    def __init__(self) -> None:
        self.tries = 0

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        self.tries += 1
        raise RuntimeError("403 Forbidden: Missing Access")


class Taking:
    """A platform that takes every resent answer."""

    name = "discord"

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, str], str]] = []

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        self.sent.append((destination, reply.text if reply else ""))


def whole_answer(text: str) -> bytes:
    calls = [wire.call("begin", False), wire.call("add_text", text), wire.call("finish")]
    return wire.encode_calls(calls)


def for_channel(key: str, channel: str) -> dict[str, str]:
    """The headers of a one-message answer nobody waits for, sent by its destination."""
    where = json.dumps({"platform": "discord", "channel": channel})
    return {wire.KEY: key, wire.ATTEMPT: "a", wire.SEQ: "0", wire.MSG_ID: f"{key}:0",
            wire.DESTINATION: where}  # fmt: skip


async def test_an_answer_the_platform_keeps_refusing_is_given_up(
    nats_server: NatsServer,
) -> None:
    cluster = settings(nats_server, max_deliveries=3)
    names = Names(cluster.subject_prefix)
    platform = Refusing()
    before = rejected("answer", "too_many_deliveries")
    async with raw_client(nats_server) as raw, ingress(cluster) as core:
        core.send_with("discord", platform)
        subject = names.out_subject(core.ingress_id)
        await raw.jetstream().publish(subject, whole_answer("late"), headers=for_channel("k", "9"))
        await until(lambda: _none_left(raw, names.out_stream), "the answer to be given up")
        assert platform.tries == 3
        assert rejected("answer", "too_many_deliveries") == before + 1


async def test_a_bad_answer_does_not_stop_the_adoption_of_a_dead_ingresss_others(
    nats_server: NatsServer,
) -> None:
    """A dead ingress's answers: the first cannot be read, the second is sent all the same."""
    cluster = settings(nats_server)
    names = Names(cluster.subject_prefix)
    platform = Taking()
    async with raw_client(nats_server) as raw:
        js = raw.jetstream()
        async with ingress(cluster):  # makes the streams
            pass
        sub = await subscribe_answers(js, names, cluster, "dead-one")  # its consumer, left
        await sub.unsubscribe()
        subject = names.out_subject("dead-one")
        await js.publish(subject, NESTED, headers=for_channel("k1", "7"))
        await js.publish(subject, whole_answer("kept"), headers=for_channel("k2", "8"))
        async with ingress(cluster) as core:
            core.send_with("discord", platform)

            async def sent() -> bool:
                return bool(platform.sent)

            await until(sent, "the good answer to be sent")
        assert platform.sent == [({"channel": "8"}, "kept")]
