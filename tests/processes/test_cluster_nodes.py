"""compose.cluster.yaml's NATS as shipped: deploy/nats.conf (with deploy/nats-users.conf beside
it) on three real nats-servers, with the passwords deploy/nats-passwords writes. The nodes form
their cluster; a node without the route password is not let in; a client without a role's user
is refused; each role, with its own env file, connects and may not do the other's job."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import stat
import subprocess
import time
import urllib.request
from pathlib import Path

import nats
import pytest

from bot.cluster.connection import Names, connect, ensure_streams
from bot.config import ClusterConfig
from tests.rigs import REPO
from tests.rigs.cluster import WAIT_S, settings
from tests.rigs.nats_auth import violation
from tests.rigs.nats_server import NatsServer, free_port

pytestmark = pytest.mark.timeout(90)

JOIN_S = 20.0


async def streams_as(cluster: ClusterConfig, role: str) -> None:
    """Connect as `role` (its inbox) and make or check the streams, as it does on starting."""
    client = await asyncio.wait_for(connect(cluster, role, asyncio.Event(), role=role), WAIT_S)
    assert client is not None
    try:
        await ensure_streams(client.jetstream(), Names(cluster.subject_prefix), cluster)
    finally:
        await client.close()


def env_file(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def node_config(folder: Path, routes: list[int], index: int, monitor: int) -> Path:
    """deploy/nats.conf for node `index` of three on one machine: only the cluster's port, the
    monitoring port and the store (the test's `-sd`) differ from compose's, where each node is
    a host of its own."""
    text = (REPO / "deploy" / "nats.conf").read_text()
    for pattern, new in [
        (r"^  listen: 0\.0\.0\.0:6222$", f"  listen: 127.0.0.1:{routes[index]}"),
        (r"^http: 127\.0\.0\.1:8222", f"http: 127.0.0.1:{monitor}"),
        (r"^  store_dir: /data/nats.*$", "  # store_dir: the NatsServer's -sd"),
    ]:
        text, count = re.subn(pattern, new, text, flags=re.MULTILINE)
        assert count == 1, f"deploy/nats.conf has no line {pattern}"
    node = folder / f"nats-{index + 1}"
    node.mkdir(parents=True)
    shutil.copy(REPO / "deploy" / "nats-users.conf", node / "nats-users.conf")
    (node / "nats.conf").write_text(text)
    return node / "nats.conf"


def monitoring(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        return dict(json.loads(answer.read()))


def routed_to(monitor: int) -> set[str]:
    """The names of the nodes this node has a route with, as its monitoring port says."""
    routes = monitoring(monitor, "/routez").get("routes") or []
    return {str(route.get("remote_name")) for route in routes}


def meta_leader(monitor: int) -> str:
    """The JetStream meta leader this node knows of ("" while there is none)."""
    return str((monitoring(monitor, "/jsz").get("meta_cluster") or {}).get("leader") or "")


def make_env_files(folder: Path) -> None:
    """deploy/nats-passwords as the docs run it: three files of mode 600, never replaced."""
    made = subprocess.run(
        [str(REPO / "deploy" / "nats-passwords"), str(folder)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "mode 600" in made.stdout
    for name in ("nats.env", "ingress.env", "worker.env"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    again = subprocess.run([str(REPO / "deploy" / "nats-passwords"), str(folder)],
                           capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 1 and "is there already" in again.stderr


async def test_the_shipped_cluster_lets_in_only_its_nodes_and_its_roles(tmp_path: Path) -> None:
    make_env_files(tmp_path)
    passwords = env_file(tmp_path / "nats.env")
    routes = [free_port() for _ in range(3)]
    for name, port in zip(("nats-1", "nats-2", "nats-3"), routes, strict=True):
        # compose's host names, here all 127.0.0.1 with a port each
        passwords["NATS_ROUTES"] = passwords["NATS_ROUTES"].replace(
            f"@{name}:6222", f"@127.0.0.1:{port}"
        )
    ingress, worker = env_file(tmp_path / "ingress.env"), env_file(tmp_path / "worker.env")
    assert ingress["NATS_PASSWORD"] == passwords["LIGHTGREP_INGRESS_PASSWORD"]
    assert worker["NATS_PASSWORD"] == passwords["LIGHTGREP_WORKER_PASSWORD"]

    monitors = [free_port() for _ in range(3)]
    nodes: list[NatsServer] = []
    for i in range(3):
        node = NatsServer(tmp_path / f"store-{i + 1}", tmp_path / f"nats-{i + 1}.log")
        node.extra = ["-c", str(node_config(tmp_path, routes, i, monitors[i]))]
        node.env = {**passwords, "NATS_NAME": f"nats-{i + 1}"}
        nodes.append(node)
    try:
        await asyncio.gather(*(node.start() for node in nodes))
        deadline = time.monotonic() + JOIN_S
        while routed_to(monitors[0]) != {"nats-2", "nats-3"}:
            assert time.monotonic() < deadline, f"no cluster: {routed_to(monitors[0])}"
            await asyncio.sleep(0.2)

        # A node of someone else's: without the route password, and with a wrong one.
        log = tmp_path / "nats-1.log"
        refused_before = log.read_text().count("authentication error")
        for name, where in [
            ("rogue-a", f"nats://127.0.0.1:{routes[0]}"),
            ("rogue-b", f"nats://lightgrep-route:wrong@127.0.0.1:{routes[0]}"),
        ]:
            rogue = NatsServer(tmp_path / name, tmp_path / f"{name}.log")
            rogue.extra = ["-n", name, "--cluster_name", "lightgrep", "--cluster",
                           f"nats://127.0.0.1:{free_port()}", "--routes", where]  # fmt: skip
            nodes.append(rogue)
            await rogue.start()
        deadline = time.monotonic() + JOIN_S
        while log.read_text().count("authentication error") < refused_before + 2:
            assert time.monotonic() < deadline, f"rogues not refused: {routed_to(monitors[0])}"
            await asyncio.sleep(0.2)
        assert routed_to(monitors[0]) == {"nats-2", "nats-3"}
        while not meta_leader(monitors[0]):  # JetStream's cluster has chosen its leader
            assert time.monotonic() < deadline, "no JetStream meta leader"
            await asyncio.sleep(0.2)

        # No user, or one that is not a role's: refused. Each role's env file: connects,
        # JetStream with replicas = 3 works, and the other role's job is refused.
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(nodes[0].url, allow_reconnect=False, max_reconnect_attempts=0,
                               connect_timeout=2)  # fmt: skip
        as_ingress = settings(
            nodes[0],
            private_network=False,
            replicas=3,
            user=ingress["NATS_USER"],
            password=ingress["NATS_PASSWORD"],
        )
        as_worker = settings(
            nodes[1],
            private_network=False,
            replicas=3,
            user=worker["NATS_USER"],
            password=worker["NATS_PASSWORD"],
        )
        await streams_as(as_ingress, "ingress")
        await streams_as(as_worker, "worker")
        for who, subject in [
            (as_ingress, "lightgrep.out.someone"),  # an answer: a worker's job
            (as_ingress, "$KV.lightgrep-links.table"),  # who is whom: a worker's
            (as_worker, "$KV.lightgrep-ingresses.someone"),  # which ingresses run: theirs
            (as_worker, "$JS.API.STREAM.DELETE.lightgrep-in"),  # the people's messages
        ]:
            said = await violation(who, subject, "publish")
            assert said == f'nats: permissions violation for publish to "{subject.lower()}"'
    finally:
        await asyncio.gather(*(node.stop() for node in nodes))
