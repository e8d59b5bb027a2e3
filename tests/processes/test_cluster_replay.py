"""Signed cluster messages captured and published again, over a real nats-server: whoever may
read `<prefix>.in.>` (the worker's NATS user may) sees every signed message, and whoever may
publish there can send it again. A copy is refused and not answered, whether it comes after
`[cluster] max_message_age_s` or within it; so is an answer's copy at the ingress. And keys
can be replaced without losing a message: `signing_key` is a list, the first signs, every one
is accepted.

JetStream itself drops a copy published under the same `Nats-Msg-Id` within its duplicate
window (two minutes here); the tests shorten that window on the server, as two minutes of
waiting would, so that the copy reaches the worker or the ingress, as it did in the review."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from bot.cluster import wire
from bot.cluster.connection import Names
from bot.cluster.ingress import BrokerCore
from bot.cluster.signing import Seen
from bot.config import ClusterConfig
from bot.inbound import Inbound
from bot.outbound import BufferedOutbound, Outbound
from memory.workspace import Workspaces
from tests.rigs.agent import make_agent
from tests.rigs.cluster import (
    PEER,
    WAIT_S,
    Taking,
    _none_left,
    ask,
    for_channel,
    ingress,
    raw_client,
    rejected,
    serving,
    settings,
    until,
    whole_answer,
)
from tests.rigs.fakes.openai_server import FakeOpenAI
from tests.rigs.nats_server import NatsServer

pytestmark = pytest.mark.timeout(60)

OLD_KEY = "the-old-signing-key-of-the-cluster-0123456789"
NEW_KEY = "the-new-signing-key-of-the-cluster-9876543210"


class Echo:
    """The worker's core: answers "echo <text>" (the far side of the port, not the agent)."""

    async def handle(self, inbound: Inbound, out: Outbound) -> None:
        await out.begin()
        await out.add_text(f"echo {inbound.text}")
        await out.finish()


def telegram(text: str, n: int) -> Inbound:
    """A Telegram private message of user 42, with its platform id, as the adapter gives it."""
    return Inbound("telegram", "telegram:dm:42", "telegram-42", text, message_id=f"42:{n}")


async def shorten_duplicate_window(raw: Client, stream: str, seconds: float) -> None:
    """What waiting out JetStream's duplicate window would do, sooner."""
    js = raw.jetstream()
    config = (await js.stream_info(stream)).config
    config.duplicate_window = seconds
    await js.update_stream(config)


async def publish_again(raw: Client, msg: Msg, stream: str, window_s: float) -> None:
    """Publish a captured message again, as it was, until JetStream stores it (nats-server
    forgets an id on a timer, a little after the window; the attacker just tries again).

    Each try that is still a duplicate changes the window again (`window_s`, give or take 10
    ms): nats-server fires its purge timer at once when the window changes, and a purge that
    ran before the new window was in place waited out the old one, two minutes (seen once under
    load: "timed out waiting for JetStream to store the copy")."""
    tries = itertools.count(1)

    async def stored() -> bool:
        ack = await raw.jetstream().publish(msg.subject, msg.data, headers=msg.headers)
        if ack.duplicate:
            nudge = 0.01 if next(tries) % 2 else 0.0
            await shorten_duplicate_window(raw, stream, window_s + nudge)
            await asyncio.sleep(0.2)
        return not ack.duplicate

    await until(stored, "JetStream to store the copy")


def groups_choice(root: Path) -> Any:
    from bot.commands.basic import MEMORY_IN_GROUPS

    return Workspaces(root).get("telegram-42").preferences.get(MEMORY_IN_GROUPS)


async def replay_privacy_on(
    nats_server: NatsServer, fake_llm: FakeOpenAI, tmp_path: Path, cluster: ClusterConfig,
    wait_s: float,
) -> tuple[list[str], Any, float]:  # fmt: skip
    """The person says /privacy groups on, then off; someone who captured the first message
    publishes it again `wait_s` later. The answers the ingress got after the copy (before the
    person's next message's), the person's choice then, and the messages refused as replays."""
    names = Names(cluster.subject_prefix)
    agent = make_agent(fake_llm, tmp_path / "w")
    before = rejected("message", "replayed")
    async with serving(agent, cluster, tmp_path / "w"), raw_client(nats_server) as raw:
        tap = await raw.subscribe(f"{names.prefix}.in.>")
        await raw.flush()
        async with ingress(cluster) as core:
            on = await ask(core, telegram("/privacy groups on", 1))
            assert "I use your memory" in on.reply.text
            off = await ask(core, telegram("/privacy groups off", 2))
            assert "I don't use your memory" in off.reply.text
            first = await tap.next_msg(timeout=WAIT_S)
            assert b"/privacy groups on" in first.data
            await shorten_duplicate_window(raw, names.in_stream, 0.5)
            answers = await raw.subscribe(names.out_subject(core.ingress_id))
            await raw.flush()
            await asyncio.sleep(wait_s)
            await publish_again(raw, first, names.in_stream, 0.5)
            after = await ask(core, telegram("/privacy", 3))
            assert "I don't use your memory" in after.reply.text
            seen: list[str] = []
            while True:  # every answer up to the person's own, which ends with /privacy's
                msg = await answers.next_msg(timeout=WAIT_S)
                text = "".join(a for op, a in wire.decode_calls(msg.data) if op == "add_text")
                seen.append(text)
                if "I don't use your memory" in text:
                    break
    await agent.aclose()
    return seen[:-1], groups_choice(tmp_path / "w"), rejected("message", "replayed") - before


async def test_a_signed_command_published_again_after_the_age_limit_is_refused(
    nats_server: NatsServer, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    """The review's replay: a signed `/privacy groups on` published again after the age limit
    was answered again and put the person's memory back into group chats against their "off"."""
    cluster = settings(nats_server, max_message_age_s=1.0)
    answered, choice, refused = await replay_privacy_on(
        nats_server, fake_llm, tmp_path, cluster, wait_s=2.5
    )
    assert answered == []  # the copy got no answer
    assert choice is False  # the person's "off" stands
    assert refused == 1


async def test_a_signed_command_published_again_within_the_age_limit_is_refused(
    nats_server: NatsServer, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    """Within the age limit the copy is recognised by its id: taken once already."""
    cluster = settings(nats_server)  # max_message_age_s: the default
    answered, choice, refused = await replay_privacy_on(
        nats_server, fake_llm, tmp_path, cluster, wait_s=1.0
    )
    assert answered == []
    assert choice is False
    assert refused == 1


async def test_an_answer_published_again_is_not_sent_again(nats_server: NatsServer) -> None:
    """An answer nobody waits for is sent by its destination (a Discord channel, a reminder):
    its copy is not posted a second time, neither within the age limit nor after it, when the
    ingress that sent it has restarted on its folder (its id, its answers) and remembers
    nothing of what it sent."""
    cluster = settings(nats_server, max_message_age_s=1.0)
    names = Names(cluster.subject_prefix)
    subject = names.out_subject("desk")
    platform = Taking()
    before = rejected("answer", "replayed")

    async def handled(raw: Client) -> None:  # acknowledged, or dropped
        await until(lambda: _none_left(raw, names.out_stream), "the copy to be handled")

    async with raw_client(nats_server) as raw:
        captured = await raw.subscribe(subject)
        await raw.flush()
        async with desk(cluster, platform):
            headers = for_channel("r1", "66")
            PEER.sign("answer", subject, headers, body := whole_answer("your reminder"))
            await raw.jetstream().publish(subject, body, headers=headers)
            first = await captured.next_msg(timeout=WAIT_S)

            async def sent() -> bool:
                return len(platform.sent) == 1

            await until(sent, "the answer to be sent")
            await shorten_duplicate_window(raw, names.out_stream, 0.3)
            await asyncio.sleep(0.4)
            await publish_again(raw, first, names.out_stream, 0.3)
            await handled(raw)
        await asyncio.sleep(2.0)
        await publish_again(raw, first, names.out_stream, 0.3)
        async with desk(cluster, platform):
            await handled(raw)
    assert platform.sent == [({"channel": "66"}, "your reminder")]
    assert rejected("answer", "replayed") == before + 2


@contextlib.asynccontextmanager
async def desk(cluster: ClusterConfig, platform: Taking) -> AsyncIterator[BrokerCore]:
    """An ingress whose id is "desk" (one that restarts on its folder keeps its id)."""
    core = BrokerCore(cluster, ingress_id="desk")
    core.send_with("discord", platform)
    assert await core.start(asyncio.Event())
    try:
        yield core
    finally:
        await core.close()


async def test_a_message_signed_with_the_old_key_is_answered_by_a_worker_with_the_new_one(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A key rotation loses nothing: a message an ingress signed with the old key waits in the
    stream while the worker restarts with [new, old]; it is answered, and the answer, signed
    with the new key, is taken by the ingress, which accepts both ([old, new])."""
    ingress_side = settings(nats_server, signing_key=[OLD_KEY, NEW_KEY])
    worker_side = settings(nats_server, signing_key=[NEW_KEY, OLD_KEY])
    async with ingress(ingress_side) as core:
        turn = asyncio.create_task(ask(core, telegram("hello", 1)))
        await asyncio.sleep(1.0)  # published, no worker yet
        assert not turn.done()
        async with serving(Echo(), worker_side, tmp_path / "w"):
            out = await turn
    assert out.reply.text == "echo hello"


async def test_a_message_signed_with_a_key_not_in_the_list_is_refused(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A worker with [new, old] drops, unanswered, what a third key signed."""
    worker_side = settings(nats_server, signing_key=[NEW_KEY, OLD_KEY])
    stranger = settings(nats_server, signing_key="a-third-key-that-is-in-no-list-0123456789")
    before = rejected("message", "unauthenticated")
    async with serving(Echo(), worker_side, tmp_path / "w"), ingress(stranger) as core:
        turn = asyncio.create_task(core.handle(telegram("hello", 1), BufferedOutbound()))

        async def dropped() -> bool:
            return rejected("message", "unauthenticated") == before + 1

        await until(dropped, "the message signed with a third key to be dropped")
        assert not turn.done()
        turn.cancel()


def test_the_ids_taken_are_forgotten_after_twice_the_age_limit() -> None:
    """The memory of ids is bounded by the messages of a window: a copy older than that is
    refused by its age, so its id need not be kept. A redelivery (the same stored message) is
    not a copy."""
    seen = Seen(0.2)
    assert seen.first("a", ("in", 1)) is None
    assert seen.first("a", ("in", 1)) is None  # redelivered
    assert seen.first("a", ("in", 7)) == ("in", 1)  # published again
    time.sleep(0.25)
    assert seen.first("b", ("in", 8)) is None
    assert len(seen) == 1


async def test_a_message_held_through_an_outage_longer_than_the_age_limit_is_answered(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """The ingress holds a message while NATS is away, longer than the age limit: each try is
    signed afresh, so when NATS takes it, it is not too old; nothing is lost."""
    cluster = settings(nats_server, max_message_age_s=1.0)
    async with serving(Echo(), cluster, tmp_path / "w"), ingress(cluster) as core:
        await nats_server.stop()
        turn = asyncio.create_task(ask(core, telegram("through the outage", 1)))
        await asyncio.sleep(2.5)
        await nats_server.start()
        out = await turn
    assert out.reply.text == "echo through the outage"
