"""NATS credentials against a real nats-server that asks for them: a token, a user and
password, an nkey seed, a .creds file. The right one connects (and JetStream works); a wrong
one, none, or two at once is one clear line naming the setting, never the secret."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bot.cluster.connection import ClusterError, Names, connect, ensure_streams
from bot.config import ClusterConfig
from tests.cluster_helpers import WAIT_S, settings
from tests.nats_auth import creds_user, nkey_user
from tests.nats_server import NatsServer

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
