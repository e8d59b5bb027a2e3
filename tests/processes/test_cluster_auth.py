"""NATS credentials against a real nats-server that asks for them: a token, a user and
password, an nkey seed, a .creds file. The right one connects (and JetStream works); a wrong
one, none, or two at once is one clear line naming the setting, never the secret."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from bot.cluster import wire
from bot.cluster.adopt import subscribe_answers
from bot.cluster.chats import SharedChats
from bot.cluster.connection import ClusterError, Names, connect, ensure_streams
from bot.cluster.ingress import BrokerCore
from bot.cluster.people import SharedPeople
from bot.cluster.signing import Signer
from bot.config import ClusterConfig
from bot.inbound import Attachment, Inbound
from bot.outbound import BufferedOutbound, Outbound, OutFile, Reply
from tests.rigs import REPO
from tests.rigs.agent import dm
from tests.rigs.cluster import WAIT_S, serving, settings
from tests.rigs.nats_auth import creds_user, nkey_user, violation
from tests.rigs.nats_server import NatsServer

pytestmark = pytest.mark.timeout(60)


async def connect_once(cluster: ClusterConfig) -> None:
    client = await asyncio.wait_for(connect(cluster, "test", asyncio.Event()), WAIT_S)
    assert client is not None
    try:
        await ensure_streams(client.jetstream(), Names(cluster.subject_prefix), cluster)
    finally:
        await client.close()


async def refusal(cluster: ClusterConfig) -> str:
    with pytest.raises(ClusterError) as refused:
        await connect_once(cluster)
    said = str(refused.value)
    assert "\n" not in said
    return said


@pytest.fixture
async def server(tmp_path: Path) -> NatsServer:
    return NatsServer(tmp_path / "nats", tmp_path / "nats.log")


@pytest.mark.parametrize("method", ["token", "user and password", "nkey_seed_file", "creds_file"])
async def test_each_way_to_authenticate_connects_and_a_wrong_one_is_one_line(
    method: str, server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    right = settings(server)
    wrong = settings(server)
    secret = ""
    if method == "token":
        server.extra = ["--auth", "right-t0ken"]
        right.token, wrong.token = "right-t0ken", "wrong-t0ken"
        secret = wrong.token
    elif method == "user and password":
        server.extra = ["--user", "bot", "--pass", "right-pa55"]
        right.user = wrong.user = "bot"
        right.password, wrong.password = "right-pa55", "wrong-pa55"
        secret = wrong.password
    elif method == "nkey_seed_file":
        (tmp_path / "other").mkdir()
        conf, right.nkey_seed_file = nkey_user(tmp_path)
        _, wrong.nkey_seed_file = nkey_user(tmp_path / "other")  # a key the server never saw
        secret = wrong.nkey_seed_file.read_text().strip()
        server.extra = ["-c", str(conf)]
    else:
        (tmp_path / "other").mkdir()
        conf, right.creds_file = creds_user(tmp_path)
        _, wrong.creds_file = creds_user(tmp_path / "other")  # another operator's user
        secret = wrong.creds_file.read_text().split("SEED-----\n")[1].split("\n")[0]
        server.extra = ["-c", str(conf)]
    await server.start()
    try:
        await connect_once(right)
        caplog.set_level(logging.DEBUG)
        said = await refusal(wrong)
        assert said == f"NATS at {server.url} refused our credentials ([cluster] {method})"
        assert secret and secret not in caplog.text and secret not in said
        nothing = settings(server)
        assert (await refusal(nothing)).startswith(f"NATS at {server.url} asks for credentials")
    finally:
        await server.stop()


async def test_two_ways_at_once_or_an_unreadable_file_are_refused_before_connecting(
    server: NatsServer, tmp_path: Path
) -> None:
    both = settings(server, token="t", user="bot", password="p")
    assert await refusal(both) == (
        "[cluster] has token and user and password: choose one way to authenticate"
    )
    half = settings(server, user="bot")
    assert await refusal(half) == "[cluster] user and password go together: set both"
    missing = settings(server, nkey_seed_file=tmp_path / "nowhere.nk")
    said = await refusal(missing)
    assert said == f"[cluster] nkey_seed_file {tmp_path / 'nowhere.nk'}: cannot read it " + (
        "(No such file or directory)"
    )


async def test_without_credentials_and_a_signing_key_nothing_starts_unless_told(
    server: NatsServer,
) -> None:
    """The safe setup is the easy one: no credentials, no signing key, or a NATS that lets
    anyone in are each one line naming what to set, and private_network."""
    await server.start()  # asks no credentials
    try:
        bare = settings(server, private_network=False, signing_key=None)
        said = await refusal(bare)
        assert said.startswith("[cluster] sets no NATS credentials (token, user and password")
        assert said.endswith("or private_network = true if nothing but this cluster's processes "
                             "can reach NATS")  # fmt: skip
        unsigned = settings(server, private_network=False, signing_key=None, token="t0ken")
        said = await refusal(unsigned)
        assert said.startswith("[cluster] signing_key is not set") and "private_network" in said
        open_door = settings(server, private_network=False, token="t0ken")
        said = await refusal(open_door)
        assert said.startswith(f"NATS at 127.0.0.1:{server.port} lets anyone connect")
        assert "[cluster] private_network = true" in said
        await connect_once(settings(server, private_network=True, signing_key=None))
    finally:
        await server.stop()


class Mirror:
    """A worker's core that answers with a file as large as the message's attachment."""

    async def handle(self, inbound: Inbound, out: Outbound) -> None:
        await out.begin()
        await out.add_text(f"got {inbound.text}")
        if inbound.attachments:
            size = len(inbound.attachments[0].data or b"")
            await out.attach_file(OutFile("back.bin", "application/octet-stream", data=b"x" * size))
        await out.finish()


async def test_the_shipped_nats_users_do_their_jobs_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """deploy/nats-users.conf on a real nats-server: an ingress and a worker, each with its
    user, answer a message and a 3 MB one (through the object store, the answer in parts)
    without a permission refused; the ingress's user cannot publish answers or read the
    messages or change who is whom (the link table), the worker's cannot read the ingress's
    replies."""
    monkeypatch.setenv("LIGHTGREP_INGRESS_PASSWORD", "ingress-pa55-0123456789")
    monkeypatch.setenv("LIGHTGREP_WORKER_PASSWORD", "worker-pa55-0123456789")
    shutil.copy(REPO / "deploy" / "nats-users.conf", tmp_path / "nats-users.conf")
    (tmp_path / "nats.conf").write_text('include "nats-users.conf"\n')
    server = NatsServer(tmp_path / "nats", tmp_path / "nats.log")
    server.extra = ["-c", str(tmp_path / "nats.conf")]
    await server.start()
    as_ingress = settings(server, private_network=False, user="lightgrep-ingress",
                          password="ingress-pa55-0123456789")  # fmt: skip
    as_worker = settings(server, private_network=False, user="lightgrep-worker",
                         password="worker-pa55-0123456789")  # fmt: skip
    caplog.set_level(logging.WARNING)
    big = os.urandom(3 * 1024 * 1024)
    audio = Attachment("audio", "audio/ogg", "v.ogg", len(big), big)
    voice = Inbound("telegram", "telegram:dm:1", "telegram-1", "voice", attachments=(audio,))
    try:
        await dead_ingress_with_an_answer(as_ingress, as_worker)
        people = SharedPeople(tmp_path / "w")  # the link table's buckets, as a worker's
        chats = SharedChats(tmp_path / "w")  # and the chats' settings
        async with serving(Mirror(), as_worker, tmp_path / "w", people=people, chats=chats):
            core = BrokerCore(as_ingress, chats=SharedChats(tmp_path / "i"))
            platform = Taking()
            core.send_with("discord", platform)
            assert await core.start(asyncio.Event())
            try:
                for message in (dm("1", "hi"), voice):
                    out = BufferedOutbound()
                    await asyncio.wait_for(core.handle(message, out), WAIT_S)
                    assert out.reply.text == f"got {message.text}"
                assert [len(f.read()) for f in out.reply.files] == [len(big)]
                await asyncio.wait_for(platform.taken.wait(), WAIT_S)  # adopted, sent
            finally:
                await core.close()
        assert "NATS refused" not in caplog.text and "Permissions" not in caplog.text
        for who, subject, kind in [
            (as_ingress, "lightgrep.out.someone", "publish"),
            (as_ingress, "lightgrep.in.>", "subscription"),
            (as_ingress, "_INBOX.lightgrep-worker.>", "subscription"),
            (as_ingress, "$KV.lightgrep-links.table", "publish"),  # who is whom: workers'
            (as_ingress, "$KV.lightgrep-chats.chat", "publish"),
            (as_worker, "_INBOX.lightgrep-ingress.>", "subscription"),
            (as_worker, "$JS.API.STREAM.PURGE.lightgrep-in", "publish"),
        ]:
            said = await violation(who, subject, kind)
            assert said == f'nats: permissions violation for {kind} to "{subject.lower()}"'

    finally:
        await server.stop()


class Taking:
    """The platform of an answer sent by its destination (bot.platform.Resender)."""

    name = "discord"

    def __init__(self) -> None:
        self.taken = asyncio.Event()

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        self.taken.set()


async def dead_ingress_with_an_answer(as_ingress: ClusterConfig, as_worker: ClusterConfig) -> None:
    """An ingress that stopped for good, its answer consumer holding a Discord answer (which
    a live ingress adopts and sends: adopt.py)."""
    names = Names(as_worker.subject_prefix)
    ingress = await connect(as_ingress, "dead ingress", asyncio.Event(), role="ingress")
    worker = await connect(as_worker, "worker", asyncio.Event(), role="worker")
    assert ingress is not None and worker is not None
    try:
        await ensure_streams(ingress.jetstream(), names, as_ingress)
        sub = await subscribe_answers(ingress.jetstream(), names, as_ingress, "dead")
        await sub.unsubscribe()
        body = wire.encode_calls([wire.call("begin", False), wire.call("finish")])
        subject = names.out_subject("dead")
        where = json.dumps({"platform": "discord", "channel": "1"})
        headers = {wire.KEY: "k", wire.ATTEMPT: "a", wire.SEQ: "0", wire.DESTINATION: where}
        Signer(as_worker.signing_key).sign("answer", subject, headers, body)
        await worker.jetstream().publish(subject, body, headers=headers)
    finally:
        await ingress.close()
        await worker.close()
