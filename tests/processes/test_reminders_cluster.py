"""Reminders in cluster mode, as real processes: `lightgrep ingress` and two `lightgrep worker`s
over a real nats-server, on the fake Telegram. The worker that owns a person's partition keeps
and sends their reminders; each reaches Telegram through the ingress, once."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.cluster_harness import ClusterRig
from bench.harness import FIRST_USER_ID
from bot.cluster.connection import Names, connect
from bot.keys import user_key
from tests.rigs.cluster import (
    TOKEN,
    Taking,
    _none_left,
    for_channel,
    ingress,
    publish,
    raw_client,
    rejected,
    settings,
    whole_answer,
)
from tests.rigs.cluster import until as hostile_until
from tests.rigs.cluster_rig import cluster_rig
from tests.rigs.nats_server import NatsServer
from tests.rigs.reminders import LATE_S, due_of, records, texts, until, wall_time

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def rig(tmp_path: Path, nats_server: NatsServer) -> AsyncIterator[ClusterRig]:
    async with cluster_rig(tmp_path, nats_server, latency_s=0.05, reply_words=5) as rig:
        yield rig


async def messages_waiting(nats: NatsServer, stream: str) -> int:
    client = await connect(settings(nats), "test", asyncio.Event())
    assert client is not None
    try:
        return (await client.jetstream().stream_info(stream)).state.messages
    finally:
        await client.close()


async def test_two_workers_send_each_reminder_once_through_the_ingress(
    rig: ClusterRig, nats_server: NatsServer
) -> None:
    await rig.start()
    people = range(FIRST_USER_ID, FIRST_USER_ID + 8)
    assert {rig.worker_of(p) for p in people} == {0, 1}
    rng = random.Random(1)
    for person in people:
        rig.telegram.dm(person, f"/remind in {rng.choice((2, 3))} seconds stretch R{person}")
    for person in people:
        await until(
            lambda p=person: texts(rig.telegram, p, f"⏰ Reminder: stretch R{p}"),
            f"the reminder of {person}",
        )
    await asyncio.sleep(1.0)  # nothing more comes
    for person in people:
        assert len(texts(rig.telegram, person, f"⏰ Reminder: stretch R{person}")) == 1
        home, other = rig.worker_of(person), 1 - rig.worker_of(person)
        kept = records(rig.workspaces(home), user_key("telegram", person))
        assert [r["type"] for r in kept] == ["set", "delivered"]
        [sent] = texts(rig.telegram, person, f"⏰ Reminder: stretch R{person}")
        due = due_of(rig.workspaces(home), user_key("telegram", person), "stretch")
        late = wall_time(sent) - due.timestamp()
        assert -0.05 <= late <= LATE_S, f"sent {late:+.3f} s from its time"
        assert not records(rig.workspaces(other), user_key("telegram", person))
    for _ in range(100):  # acknowledged by the ingress once Telegram took each
        if not await messages_waiting(nats_server, "lightgrep-out"):
            break
        await asyncio.sleep(0.05)
    assert await messages_waiting(nats_server, "lightgrep-out") == 0
    assert await rig.terminate() == [0, 0, 0]


async def test_a_reminder_from_outside_the_cluster_is_not_sent(guarded: NatsServer) -> None:
    """Anyone who can publish to NATS could otherwise have the bot post in any chat through
    the reminders' subject: only one a worker of this cluster signed is sent."""
    cluster = settings(guarded, private_network=False, token=TOKEN)
    names = Names(cluster.subject_prefix)
    platform = Taking()
    before = rejected("answer", "unauthenticated")
    async with raw_client(guarded, TOKEN) as raw, ingress(cluster) as core:
        core.send_with("discord", platform)
        subject = names.push_subject("discord")
        await publish(raw, subject, whole_answer("buy crypto"), for_channel("f", "66"), None)
        await publish(raw, subject, whole_answer("stretch"), for_channel("g", "8"), "answer")

        async def sent() -> bool:
            return bool(platform.sent)

        await hostile_until(sent, "the worker's reminder to be sent")
        await hostile_until(lambda: _none_left(raw, names.out_stream), "nothing left")
    assert platform.sent == [({"channel": "8"}, "stretch")]
    assert rejected("answer", "unauthenticated") == before + 1
