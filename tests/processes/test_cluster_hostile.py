"""The cluster's wire under hostile or broken input, over a real nats-server: a message that
cannot be decoded or handled is dropped (logged, terminated, counted in /metrics) and the
partition or the ingress goes on with the next; an answer the platform keeps refusing is given
up after `[cluster] max_deliveries`; a message or an answer not signed with the cluster's
`signing_key` is dropped unanswered and changes nothing."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from bot.cluster import wire
from bot.cluster.adopt import subscribe_answers
from bot.cluster.connection import Names
from bot.cluster.partition import partition_of
from bot.cluster.signing import Signer
from bot.cluster.wire import RemoteTurnFailed
from bot.inbound import Attachment, Inbound
from bot.outbound import BufferedOutbound, Outbound, Reply
from memory.workspace import Workspaces
from tests.rigs.agent import dm, make_agent, user_home
from tests.rigs.cluster import (
    PEER,
    TOKEN,
    WAIT_S,
    Taking,
    _none_left,
    for_channel,
    ingress,
    publish,
    raw_client,
    rejected,
    serving,
    settings,
    stored,
    until,
    whole_answer,
)
from tests.rigs.fakes.openai_server import FakeOpenAI
from tests.rigs.nats_server import NatsServer

pytestmark = pytest.mark.timeout(60)

NESTED = b"[" * 50_000 + b"]" * 50_000  # json.loads: RecursionError, not ValueError


class Echo:
    """The worker's core: answers "echo <text>" (the far side of the port, not the agent)."""

    async def handle(self, inbound: Inbound, out: Outbound) -> None:
        await out.begin()
        await out.add_text(f"echo {inbound.text}")
        await out.finish()


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
        await publish(raw, subject, NESTED, headers, "message")
        async with ingress(cluster) as core:
            out = BufferedOutbound()
            await asyncio.wait_for(core.handle(person, out), WAIT_S)
            assert out.reply.text == "echo hello"
        answer = await told.next_msg(timeout=WAIT_S)  # the sender is told it failed
        assert (answer.headers or {})[wire.KEY] == "k1"
        assert [op for op, _ in wire.decode_calls(answer.data)] == ["error"]
        assert rejected("message", "malformed") == before + 1
        await until(lambda: _none_left(raw, names.in_stream), "the in stream to be empty")


class FakeWorker:
    """Answers the messages of every partition with a body a test gives it (as a broken
    worker would), through its own consumer of the in stream."""

    def __init__(self, raw: Client, names: Names) -> None:
        self._raw = raw
        self._names = names
        self._sub: Any = None

    async def answer_next(self, body: bytes) -> None:
        js = self._raw.jetstream()
        if self._sub is None:
            self._sub = await js.pull_subscribe(
                f"{self._names.prefix}.in.*", durable="fake", stream=self._names.in_stream
            )
        [msg] = await self._sub.fetch(1, timeout=WAIT_S)
        headers = msg.headers or {}
        key = headers[wire.KEY]
        reply = {wire.KEY: key, wire.ATTEMPT: "a", wire.SEQ: "0", wire.MSG_ID: f"{key}:0"}
        await publish(self._raw, headers[wire.REPLY], body, reply, "answer")
        await msg.ack()


async def test_a_nested_answer_fails_the_turn_instead_of_holding_it_forever(
    nats_server: NatsServer,
) -> None:
    """The adapter's handle() ends with the apology (RemoteTurnFailed); the answer message
    is taken off the stream, counted, and the next answer is read as usual."""
    cluster = settings(nats_server)
    names = Names(cluster.subject_prefix)
    before = rejected("answer", "malformed")
    async with raw_client(nats_server) as raw, ingress(cluster) as core:
        worker = FakeWorker(raw, names)
        answering = asyncio.create_task(worker.answer_next(NESTED))
        with pytest.raises(RemoteTurnFailed):
            await asyncio.wait_for(core.handle(dm("1", "hi"), BufferedOutbound()), WAIT_S)
        await answering
        assert rejected("answer", "malformed") == before + 1
        good = wire.encode_calls([wire.call("begin", False), wire.call("add_text", "fine"),
                                  wire.call("finish")])  # fmt: skip
        answering = asyncio.create_task(worker.answer_next(good))
        out = BufferedOutbound()
        await asyncio.wait_for(core.handle(dm("1", "again"), out), WAIT_S)
        await answering
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
        await publish(raw, subject, whole_answer("late"), for_channel("k", "9"), "answer")
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
        await publish(raw, subject, NESTED, for_channel("k1", "7"), "answer")
        await publish(raw, subject, whole_answer("kept"), for_channel("k2", "8"), "answer")
        async with ingress(cluster) as core:
            core.send_with("discord", platform)

            async def sent() -> bool:
                return bool(platform.sent)

            await until(sent, "the good answer to be sent")
        assert platform.sent == [({"channel": "8"}, "kept")]


async def test_a_message_from_outside_the_cluster_gets_nothing_and_changes_nothing(
    guarded: NatsServer, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    """Someone with the NATS token asks the worker for a person's memory, to wipe it, and to
    remember something, with a reply subject of their own: unsigned, signed with another key,
    or replaying a signed message's headers on another body. Nothing comes back, nothing
    changes; the person, through the ingress, is answered as before."""
    cluster = settings(guarded, private_network=False, token=TOKEN)
    names = Names(cluster.subject_prefix)
    workspaces = Workspaces(tmp_path / "w")
    workspaces.get("telegram-42").memory.write("## User Information\n- likes pears\n")
    agent = make_agent(fake_llm, tmp_path / "w")
    person = dm("42", "/memory")
    subject = names.in_subject(partition_of(person.user_key, cluster.partitions))
    stranger = Signer("another-key-that-is-not-the-cluster-key")
    before = rejected("message", "unauthenticated")

    def forged(text: str, n: int) -> tuple[bytes, dict[str, str]]:
        body = wire.encode_inbound(dm("42", text))
        headers = {wire.REPLY: names.out_subject("thief"), wire.KEY: f"t{n}",
                   wire.MSG_ID: f"t{n}"}  # fmt: skip
        return body, headers

    async with serving(agent, cluster, tmp_path / "w"), raw_client(guarded, TOKEN) as raw:
        answers = await raw.subscribe(f"{names.prefix}.out.>")
        await raw.flush()
        body, headers = forged("/memory", 1)
        await publish(raw, subject, body, headers, None)  # unsigned
        body, headers = forged("/wipe", 2)
        stranger.sign("message", subject, headers, body)  # another key
        await raw.jetstream().publish(subject, body, headers=headers)
        body, headers = forged("remember: I hate pears", 3)
        PEER.sign("message", subject, headers, b"{}")  # signed for another body
        await raw.jetstream().publish(subject, body, headers=headers)
        async with ingress(cluster) as core:
            out = BufferedOutbound()
            await asyncio.wait_for(core.handle(person, out), WAIT_S)
            # The person's own message, after the forged ones on the same partition and
            # session: had any been answered, its answer would have come first.
            seen = await answers.next_msg(timeout=WAIT_S)
        assert seen.subject == names.out_subject(core.ingress_id)
    assert "likes pears" in out.reply.text
    assert rejected("message", "unauthenticated") == before + 3
    assert workspaces.get("telegram-42").memory.read() == "## User Information\n- likes pears\n"
    sessions = user_home(tmp_path / "w", "42") / "sessions"
    assert not any("hate pears" in f.read_text() for f in sessions.glob("*.jsonl"))
    assert fake_llm.chat_requests == []
    await agent.aclose()


async def test_an_answer_from_outside_the_cluster_is_not_sent_to_the_channel_it_names(
    guarded: NatsServer,
) -> None:
    """An answer nobody waits for is sent by its destination (a restarted ingress's Discord
    answers): one that no worker signed would make the bot post anything anywhere."""
    cluster = settings(guarded, private_network=False, token=TOKEN)
    names = Names(cluster.subject_prefix)
    platform = Taking()
    before = rejected("answer", "unauthenticated")
    async with raw_client(guarded, TOKEN) as raw, ingress(cluster) as core:
        core.send_with("discord", platform)
        subject = names.out_subject(core.ingress_id)
        await publish(raw, subject, whole_answer("buy crypto"), for_channel("f", "66"), None)
        await publish(raw, subject, whole_answer("yours"), for_channel("g", "8"), "answer")

        async def sent() -> bool:
            return bool(platform.sent)

        await until(sent, "the worker's answer to be sent")
        await until(lambda: _none_left(raw, names.out_stream), "the out stream to be empty")
    assert platform.sent == [({"channel": "8"}, "yours")]
    assert rejected("answer", "unauthenticated") == before + 1


async def test_an_unsigned_message_is_taken_on_a_private_network_while_keys_are_rolled_out(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """private_network = true: a worker with the key still answers an ingress that has none
    yet (a cluster moving to signed messages, docs/cluster.md), but not a message signed with
    another key."""
    cluster = settings(nats_server)  # private_network = true, a signing key
    unsigned = settings(nats_server, signing_key=None)
    async with serving(Echo(), cluster, tmp_path / "w"):
        async with ingress(unsigned) as old:
            out = BufferedOutbound()
            await asyncio.wait_for(old.handle(dm("1", "hi"), out), WAIT_S)
            assert out.reply.text == "echo hi"
        other = settings(nats_server, signing_key="another-key-that-is-not-the-cluster-key")
        before = rejected("message", "unauthenticated")
        async with ingress(other) as wrong:
            turn = asyncio.create_task(wrong.handle(dm("2", "hi"), BufferedOutbound()))

            async def dropped() -> bool:
                return rejected("message", "unauthenticated") == before + 1

            await until(dropped, "the message signed with another key to be dropped")
            assert not turn.done()  # unanswered
            turn.cancel()


async def test_a_large_body_swapped_in_the_object_store_is_not_taken(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A voice message too large for one NATS message waits in the object store; someone puts
    another person's "/memory" there under its name before the worker fetches it. The signed
    message names the body's digest: the worker drops it and the sender's turn fails."""
    cluster = settings(nats_server)
    names = Names(cluster.subject_prefix)
    voice = os.urandom(2 * 1024 * 1024)
    message = Inbound("telegram", "telegram:dm:1", "telegram-1", "", attachments=(
        Attachment("audio", "audio/ogg", "voice.ogg", len(voice), voice, voice=True),))  # fmt: skip
    before = rejected("message", "unauthenticated")
    async with raw_client(nats_server) as raw, ingress(cluster) as core:
        turn = asyncio.create_task(core.handle(message, BufferedOutbound()))
        store = await raw.jetstream().object_store(names.body_bucket)

        async def published() -> bool:
            return await stored(raw, names.in_stream) == 1

        await until(published, "the message to be published")
        [info] = [i for i in await store.list() if not i.deleted]
        await store.put(info.name, wire.encode_inbound(dm("42", "/memory")))
        async with serving(Echo(), cluster, tmp_path / "w"):
            with pytest.raises(RemoteTurnFailed):
                await asyncio.wait_for(turn, WAIT_S)
    assert rejected("message", "unauthenticated") == before + 1
