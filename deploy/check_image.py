"""The container image run as an operator runs it, against fakes on 127.0.0.1 (deploy/check-image).

Builds the image, then: its size, what is in it (its user and group, no pip) and cold start;
`doctor` and a piped `chat` against the fake model; compose.yaml with the fake Telegram (one
message answered, a stop while a turn is under way finishes it, `down` and `up` again with the
memory kept on the volume, log rotation and the memory limit applied, then `backup create`
inside the running container while another person talks, `verify` and `restore` into a new
volume, and `doctor` on it); compose.cluster.yaml (3 NATS nodes with the env files
deploy/nats-passwords writes, an ingress and two workers each with its own NATS user,
replicas = 3): a client without a role's user, an ingress publishing an answer and a worker
changing what is not its own are refused by NATS, and one NATS node SIGKILLed during traffic:
every message persisted once and answered. One line per check, figures included; exit
1 on any failure. The fakes are bench/harness.py's, in this process; the containers reach them
on the host network (../shared/CONTAINERS.md), which the compose files get from an override.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.crash_loop import Traffic  # noqa: E402
from bench.harness import TOKEN, BenchLLM, BenchTelegram, read_workspaces  # noqa: E402

SINGLE = "lgcheck"  # compose project names: containers and volumes are <project>_<name>…
CLUSTER = "lgcheck-cluster"
FILES = {SINGLE: "compose.yaml", CLUSTER: "compose.cluster.yaml"}
STEP_S = 180.0  # a step that takes this long is stuck (a cold start is seconds)


class CheckFailed(Exception):
    pass


def say(status: str, what: str, detail: str = "") -> None:
    print(f"{status:<5} {what}{': ' + detail if detail else ''}", flush=True)


async def sh(*cmd: str, stdin: bytes | None = None, check: bool = True) -> tuple[int, str]:
    """A command's exit code and its output (stdout and stderr together)."""
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin), STEP_S * 4)
    text = out.decode(errors="replace")
    if check and proc.returncode:
        raise CheckFailed(f"{' '.join(cmd[:4])}… exited {proc.returncode}:\n{text[-3000:]}")
    return proc.returncode or 0, text


async def until(predicate: Callable[[], bool], wait_s: float, what: str) -> None:
    deadline = time.monotonic() + wait_s
    while not predicate():  # polled: the fakes' state and the containers'
        if time.monotonic() > deadline:
            raise CheckFailed(f"no {what} within {wait_s:.0f} s")
        await asyncio.sleep(0.1)


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


class Check:
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        self.image = args.image
        self.folder = folder
        self.llm = BenchLLM(latency_s=0.2, reply_words=8)
        self.telegram = BenchTelegram()
        self.rng = random.Random(1)  # the filler words of the messages

    # ---- the image ------------------------------------------------------------------------

    async def build(self) -> None:
        started = time.monotonic()
        await sh(
            "nice", "-n", "10", "docker", "build", "--network", "host",
            "--build-arg", f"BASE={self.args.base}", "-t", self.image, str(ROOT),
        )  # fmt: skip
        took = time.monotonic() - started
        size = await self.image_mb(self.image)
        base = await self.image_mb(self.args.base)
        say("OK", "build", f"{took:.0f} s; image {size:.0f} MB on a {base:.0f} MB base "
            f"(the project's layers {size - base:.0f} MB)")  # fmt: skip

    async def contents(self) -> None:
        """Its user and group by name, and nothing in its venv that installs packages."""
        _, who = await sh("docker", "run", "--rm", "--entrypoint", "id", self.image)
        found = (
            "import importlib.util as u; "
            "print([m for m in ('pip', 'setuptools') if u.find_spec(m)])"
        )
        _, pip = await sh(
            "docker", "run", "--rm", "--entrypoint", "python3", self.image, "-c", found,
        )  # fmt: skip
        named = "uid=10001(lightgrep) gid=10001(lightgrep)" in who
        if not named or pip.strip() != "[]":
            raise CheckFailed(f"the image's user: {who.strip()}; in its venv: {pip.strip()}")
        say("OK", "the image's user and venv", f"{who.strip()}; pip and setuptools: none")

    async def image_mb(self, name: str) -> float:
        _, out = await sh("docker", "image", "inspect", "-f", "{{.Size}}", name)
        return int(out.strip()) / 1e6

    async def cold_start(self) -> None:
        """`--version` (the container and Python), and `run` from `docker run` to polling."""
        versions, ready = [], []
        for _ in range(3):
            started = time.monotonic()
            _, out = await sh("docker", "run", "--rm", self.image, "--version")
            versions.append(time.monotonic() - started)
        for _ in range(3):
            polls = len(self.telegram.method_calls("getUpdates"))
            started = time.monotonic()
            _, cid = await sh(
                "docker", "run", "-d", "--network", "host", "--read-only", "--tmpfs", "/tmp",
                *self.mounts(), self.image, "run",
            )  # fmt: skip
            try:
                await self.telegram.wait_until(
                    lambda n=polls: len(self.telegram.method_calls("getUpdates")) > n, STEP_S
                )
                ready.append(time.monotonic() - started)
            finally:
                await sh("docker", "rm", "-f", "-v", cid.strip())  # and its /data volume
        say(
            "OK",
            "cold start",
            f"{out.strip()}: `docker run … --version` {statistics.median(versions):.2f} s, "
            f"`docker run … run` to its first getUpdates {statistics.median(ready):.2f} s "
            f"(medians of 3; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
        )

    def mounts(self) -> list[str]:
        return [
            "-v", f"{self.folder / 'config.toml'}:/etc/lightgrep/config.toml:ro",
            "--env-file", str(self.folder / "lightgrep.env"),
        ]  # fmt: skip

    async def doctor(self) -> None:
        code, out = await sh(
            "docker", "run", "--rm", "--network", "host", "--read-only", *self.mounts(),
            self.image, "doctor", check=False,
        )  # fmt: skip
        if code:
            raise CheckFailed(f"doctor exited {code}:\n{out}")
        say("OK", "docker run … doctor", "\n      " + "\n      ".join(out.strip().splitlines()))

    async def piped_chat(self) -> None:
        asked = len(self.llm.chat_requests)
        code, out = await sh(
            "docker", "run", "--rm", "-i", "--network", "host", "--read-only",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges", *self.mounts(),
            self.image, "chat", "--user", "checker",
            stdin=b"LG1m0 hello from a pipe\n/status\n", check=False,
        )  # fmt: skip
        if code or "ack LG1m0" not in out or "Model" not in out:
            raise CheckFailed(f"piped chat exited {code}:\n{out}")
        turns = len(self.llm.chat_requests) - asked
        shown = " | ".join(line for line in out.strip().splitlines()[:3])
        say("OK", "echo … | docker run -i … chat", f"{turns} model call; {shown[:160]}")

    # ---- compose.yaml ---------------------------------------------------------------------

    def compose(self, project: str, *args: str) -> tuple[str, ...]:
        """docker-compose with the project's file as shipped, and the check's override."""
        return (
            "docker-compose", "--project-directory", str(self.folder), "-p", project,
            "-f", str(ROOT / FILES[project]),
            "-f", str(self.folder / f"{project}.override.yaml"), *args,
        )  # fmt: skip

    def override(self, project: str, services: dict[str, dict[str, object]]) -> None:
        """Every service on the host network, where the fakes are (JSON is YAML)."""
        for service in services.values():
            service["network_mode"] = "host"
            service.setdefault("image", self.image)
        text = json.dumps({"services": services}, indent=1)
        (self.folder / f"{project}.override.yaml").write_text(text)

    async def container(self, project: str, service: str) -> str:
        _, out = await sh(*self.compose(project, "ps", "-q", service))
        return out.strip()

    async def inspect(self, cid: str, field: str) -> str:
        _, out = await sh("docker", "inspect", "-f", field, cid)
        return out.strip()

    async def wait_healthy(self, project: str, services: list[str]) -> float:
        started = time.monotonic()
        for service in services:
            cid = await self.container(project, service)
            deadline = time.monotonic() + STEP_S
            while (health := await self.inspect(cid, "{{.State.Health.Status}}")) != "healthy":
                if time.monotonic() > deadline:
                    log = await self.inspect(cid, "{{json .State.Health.Log}}")
                    raise CheckFailed(f"{service} is {health}: {log[-1500:]}")
                await asyncio.sleep(0.5)
        return time.monotonic() - started

    async def single_bot(self) -> None:
        [metrics] = free_ports(1)
        health = {"test": ["CMD", "lightgrep-entrypoint", "healthcheck"], "interval": "2s"}
        self.override(
            SINGLE,
            {
                "lightgrep": {
                    "environment": {"LIGHTGREP_METRICS_LISTEN": f"127.0.0.1:{metrics}"},
                    "healthcheck": health,
                }
            },
        )
        compose = lambda *a: self.compose(SINGLE, *a)  # noqa: E731
        user = 7001
        try:
            started = time.monotonic()
            await sh(*compose("up", "-d"))
            await self.answered(user, 0)
            first = time.monotonic() - started
            healthy = await self.wait_healthy(SINGLE, ["lightgrep"]) + first
            cid = await self.container(SINGLE, "lightgrep")
            say("OK", "compose.yaml up", f"first answer {first:.1f} s after `up -d`, healthy "
                f"(/healthz) after {healthy:.1f} s")  # fmt: skip

            # A stop while a turn waits for the model: the bot finishes it, then exits 0.
            self.llm.latency_s = 3.0
            self.telegram.send(user, 1, self.rng)
            await until(lambda: self.asked(f"LG{user}m1"), STEP_S, "request for LG7001m1")
            stop_at = time.monotonic()
            await sh(*compose("stop"))
            stopped = time.monotonic() - stop_at
            code = await self.inspect(cid, "{{.State.ExitCode}}")
            self.llm.latency_s = 0.2
            if code != "0" or not self.telegram.answers.get(f"LG{user}m1"):
                raise CheckFailed(
                    f"stop mid-turn: exit code {code}, answer sent: "
                    f"{bool(self.telegram.answers.get(f'LG{user}m1'))}"
                )
            say("OK", "compose stop mid-turn", f"the turn finished and was answered, exit code "
                f"{code} after {stopped:.1f} s (SIGTERM reached the bot)")  # fmt: skip

            await sh(*compose("down"))
            await sh(*compose("up", "-d"))
            request = await self.answered(user, 2)
            remembered = [f"LG{user}m{n}" in json.dumps(request["messages"]) for n in (0, 1)]
            volume = await self.volume_path(SINGLE, "lightgrep-data")
            state_on_disk = read_workspaces(volume / "lightgrep" / "workspaces")
            if not all(remembered) or state_on_disk.problems:
                raise CheckFailed(f"after down/up: earlier messages in the prompt {remembered}, "
                                  f"problems {state_on_disk.problems}")  # fmt: skip
            say("OK", "compose down, up", f"the third turn's prompt holds the first two; the "
                f"volume holds {state_on_disk.persisted} user messages, each once: "
                f"{not state_on_disk.duplicated}")  # fmt: skip
            await self.limits(await self.container(SINGLE, "lightgrep"))
            await self.backup_round_trip(compose, volume)
        finally:
            await sh(*compose("logs", "--no-color", "--tail", "5"), check=False)
            await sh(*compose("down", "-v"), check=False)

    async def limits(self, cid: str) -> None:
        """compose.yaml's log rotation and memory limit, as Docker applied them."""
        log = json.loads(await self.inspect(cid, "{{json .HostConfig.LogConfig}}"))
        memory = int(await self.inspect(cid, "{{.HostConfig.Memory}}"))
        if not memory or not log.get("Config", {}).get("max-size"):
            raise CheckFailed(f"no limits: memory {memory}, log {log}")
        rotation = f"max-size {log['Config']['max-size']} x {log['Config'].get('max-file')}"
        say("OK", "compose.yaml limits",
            f"memory {memory / 2**20:.0f} MiB, logs {log['Type']} {rotation}")  # fmt: skip

    async def backup_round_trip(self, compose: Callable[..., tuple[str, ...]], live: Path) -> None:
        """`backup create -` in the running container (docs/running.md's way) while another
        person talks; `verify`, `restore` into a new volume, `doctor` on it: every message
        answered before the backup is in the restored copy, once."""
        talker, before = 7002, []
        for seq in range(3):
            await self.answered(talker, seq)
            before.append(f"LG{talker}m{seq}")
        during = [self.telegram.send(talker, seq, self.rng) for seq in range(3, 6)]
        archive = self.folder / "backups" / "lightgrep-backup.tar.gz"
        archive.parent.mkdir(exist_ok=True)
        archive.parent.chmod(0o755)
        started = time.monotonic()
        with archive.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *compose("exec", "-T", "lightgrep", "lightgrep", "backup", "create", "-"),
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, err = await asyncio.wait_for(proc.communicate(), STEP_S)
        took = time.monotonic() - started
        if proc.returncode:
            raise CheckFailed(f"backup create exited {proc.returncode}: {err.decode()[-1500:]}")
        archive.chmod(0o644)  # read by the container's user
        await until(lambda: all(self.telegram.answers.get(n) for n in during), STEP_S,
                    "answers to the messages sent during the backup")  # fmt: skip
        restored = f"{SINGLE}-restored"
        run = (
            "docker", "run", "--rm", "--network", "host", "--read-only", *self.mounts(),
            "-v", f"{archive.parent}:/backups:ro", "-v", f"{restored}:/data", self.image,
        )  # fmt: skip
        try:
            _, verified = await sh(*run, "backup", "verify", f"/backups/{archive.name}")
            _, restore = await sh(*run, "backup", "restore", f"/backups/{archive.name}")
            code, doctor = await sh(*run, "doctor", check=False)
            _, where = await sh("docker", "volume", "inspect", "-f", "{{.Mountpoint}}", restored)
            copy = read_workspaces(Path(where.strip()) / "lightgrep" / "workspaces")
            original = read_workspaces(live / "lightgrep" / "workspaces")
        finally:
            await sh("docker", "volume", "rm", "-f", restored, check=False)
        missing = [n for n in before if copy.user_tokens.get(n) != 1]
        if code or missing or copy.problems or copy.duplicated:
            raise CheckFailed(f"restored copy: doctor exit {code}, not there once {missing}, "
                              f"problems {copy.problems[:5]}:\n{doctor}")  # fmt: skip
        say("OK", "backup in the running container", f"{archive.stat().st_size / 1e3:.0f} kB "
            f"in {took:.1f} s while {len(during)} more messages came and were answered; "
            f"verify: {verified.strip().splitlines()[-1][:160]}; restore: "
            f"{restore.strip().splitlines()[-1][:120]}; the copy holds {copy.persisted} user "
            f"messages (the live volume {original.persisted}), each of the {len(before)} "
            f"answered before it once; doctor on it exits 0")  # fmt: skip

    def asked(self, name: str) -> dict | None:
        for request in self.llm.chat_requests:
            if name in json.dumps(request["messages"][-1:]):
                return request
        return None

    async def answered(self, user: int, seq: int) -> dict:
        """Send message `seq` of `user`; the model's request for it, once it is answered."""
        name = self.telegram.send(user, seq, self.rng)
        await until(lambda: bool(self.telegram.answers.get(name)), STEP_S, f"answer to {name}")
        request = self.asked(name)
        assert request is not None
        return request

    async def volume_path(self, project: str, volume: str) -> Path:
        _, out = await sh("docker", "volume", "inspect", "-f", "{{.Mountpoint}}",
                          f"{project}_{volume}")  # fmt: skip
        return Path(out.strip())

    # ---- compose.cluster.yaml -------------------------------------------------------------

    async def cluster(self) -> None:
        ports = free_ports(12)
        client, route, monitor, metrics = ports[0:3], ports[3:6], ports[6:9], ports[9:12]
        secrets_of = env_file(self.folder / "nats.env")
        routes = secrets_of["NATS_ROUTES"]
        for i, port in enumerate(route):  # compose's host names, here 127.0.0.1 and a port each
            routes = routes.replace(f"@nats-{i + 1}:6222", f"@127.0.0.1:{port}")
        services: dict[str, dict[str, object]] = {}
        shipped = (ROOT / "deploy" / "nats.conf").read_text()
        (self.folder / "deploy").mkdir(exist_ok=True)
        for name in ("nats.conf", "nats-users.conf"):
            shutil.copy(ROOT / "deploy" / name, self.folder / "deploy" / name)
        for i in range(3):
            # The shipped config; only its route port differs (three nodes on one host here).
            node = self.folder / f"nats-{i + 1}"
            node.mkdir()
            text = shipped.replace("  listen: 0.0.0.0:6222", f"  listen: 127.0.0.1:{route[i]}")
            if text == shipped:
                raise CheckFailed("deploy/nats.conf has no line '  listen: 0.0.0.0:6222'")
            (node / "nats.conf").write_text(text)
            shutil.copy(ROOT / "deploy" / "nats-users.conf", node / "nats-users.conf")
            for path in (node, node / "nats.conf", node / "nats-users.conf"):
                path.chmod(0o755 if path.is_dir() else 0o644)  # read by the container's user
            url = f"http://127.0.0.1:{monitor[i]}/healthz"
            services[f"nats-{i + 1}"] = {
                "command": [
                    "nats-server", "--config", "/etc/nats/nats.conf", "-a", "127.0.0.1",
                    "-p", str(client[i]), "-m", str(monitor[i]),
                ],
                "environment": {"NATS_NAME": f"nats-{i + 1}", "NATS_ROUTES": routes},
                "volumes": [f"{node / 'nats.conf'}:/etc/nats/nats.conf:ro",
                            f"{node / 'nats-users.conf'}:/etc/nats/nats-users.conf:ro"],
                "healthcheck": {"test": ["CMD", "lightgrep-entrypoint", "healthcheck", url],
                                "interval": "2s"},
            }  # fmt: skip
        nats_url = ",".join(f"nats://127.0.0.1:{p}" for p in client)
        for i, name in enumerate(("ingress", "worker-0", "worker-1")):
            services[name] = {
                "environment": {
                    "LIGHTGREP_CLUSTER_NATS_URL": nats_url,
                    "LIGHTGREP_METRICS_LISTEN": f"127.0.0.1:{metrics[i]}",
                },
                "healthcheck": {"test": ["CMD", "lightgrep-entrypoint", "healthcheck"],
                                "interval": "2s"},
            }  # fmt: skip
        self.override(CLUSTER, services)
        compose = lambda *a: self.compose(CLUSTER, *a)  # noqa: E731
        try:
            started = time.monotonic()
            await sh(*compose("up", "-d"))
            await self.wait_healthy(CLUSTER, list(services))
            say(
                "OK",
                "compose.cluster.yaml up",
                f"6 containers healthy "
                f"{time.monotonic() - started:.0f} s after `up -d`; {self.streams(monitor[0])}; "
                f"{self.routes(monitor[0])}",
            )
            await self.refusals(f"nats://127.0.0.1:{client[0]}")
            await self.rogue_node(route[0], monitor[0])

            traffic = Traffic(self.telegram, users=self.args.users, burst=2, seed=3)
            traffic.start()
            answered = lambda: sum(bool(self.telegram.answers.get(n)) for n in traffic.sent)  # noqa: E731
            await until(lambda: answered() >= 40, STEP_S, "40 answers before the kill")
            leader = self.meta_leader(monitor[0])
            victim = await self.container(CLUSTER, leader)
            at_kill = answered()
            await sh("docker", "kill", victim)
            killed_at = time.monotonic()
            await until(lambda: answered() >= at_kill + 100, STEP_S, "answers with a node down")
            down_s = time.monotonic() - killed_at
            while_down = answered() - at_kill
            await sh("docker", "start", victim)
            await until(lambda: answered() >= at_kill + while_down + 40, STEP_S, "answers after")
            traffic.running = False
            await until(lambda: not traffic.owed(), STEP_S, "every answer")
            await sh(*compose("stop"))
            codes = [await self.inspect(await self.container(CLUSTER, s), "{{.State.ExitCode}}")
                     for s in ("ingress", "worker-0", "worker-1")]  # fmt: skip
            _, logs = await sh(*compose("logs", "--no-color", "ingress", "worker-0", "worker-1"))
            if "permissions violation" in logs or "NATS refused" in logs:
                refused = [line for line in logs.splitlines() if "refused" in line]
                raise CheckFailed(f"a role's own job refused by NATS: {refused[:3]}")

            copies: dict[str, int] = {}
            problems: list[str] = []
            for worker in ("worker-0", "worker-1"):
                folder = await self.volume_path(CLUSTER, worker) / "lightgrep" / "workspaces"
                state = read_workspaces(folder)
                problems += state.problems
                for name, count in state.user_tokens.items():
                    copies[name] = copies.get(name, 0) + count
            sent = traffic.sent
            once = sum(1 for n in sent if copies.get(n) == 1)
            twice = sum(1 for n in sent if copies.get(n, 0) > 1)
            answers = sum(1 for n in sent if self.telegram.answers.get(n))
            lost = [n for n in sent if not copies.get(n) or not self.telegram.answers.get(n)]
            say(
                "OK" if not (lost or twice or problems) and codes == ["0"] * 3 else "FAIL",
                "one NATS node SIGKILLed during traffic",
                f"{leader} (the JetStream meta leader) down {down_s:.0f} s, {while_down} answers "
                f"meanwhile; {self.args.users} users: sent {len(sent)}, persisted once {once}, "
                f"twice {twice}, answered {answers}, lost {len(lost)}; exit codes on stop "
                f"{codes}; damaged files {len(problems)}",
            )
            if lost or twice or problems or codes != ["0"] * 3:
                raise CheckFailed(f"lost {lost[:10]}, problems {problems[:5]}")
        finally:
            await sh(*compose("down", "-v"), check=False)

    def streams(self, monitor: int) -> str:
        """The JetStream streams and their replicas, as the monitoring endpoint reports them."""
        info = self.monitoring(monitor, "/jsz?streams=true&config=true")
        found = [
            (s["name"], s["config"].get("num_replicas"))
            for account in info.get("account_details", [])
            for s in account.get("stream_detail", [])
        ]
        return "streams " + ", ".join(f"{name} R{replicas}" for name, replicas in found)

    def routes(self, monitor: int) -> str:
        """Whom nats-1 has routes with (they got in with the route password)."""
        found = self.monitoring(monitor, "/routez").get("routes") or []
        names = sorted({str(r.get("remote_name")) for r in found})
        return f"nats-1's routes: {', '.join(names)}"

    async def refusals(self, url: str) -> None:
        """What NATS refuses, asked with the env files' credentials from this machine: no
        user; an ingress publishing an answer or changing who is whom; a worker changing which
        ingresses run or deleting the people's messages."""
        import nats  # the checkout's venv: the client the bot uses

        async def quiet(exc: Exception) -> None:  # (the refusal is the finding, below)
            pass

        try:
            await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0,
                               connect_timeout=5, error_cb=quiet)  # fmt: skip
        except nats.errors.Error as exc:
            anonymous = str(exc)
        else:
            raise CheckFailed("NATS let a client without a user in")
        said = []
        for role, subject in [
            ("ingress", "lightgrep.out.someone"),
            ("ingress", "$KV.lightgrep-links.table"),
            ("worker", "$KV.lightgrep-ingresses.someone"),
            ("worker", "$JS.API.STREAM.DELETE.lightgrep-in"),
        ]:
            who = env_file(self.folder / f"{role}.env")
            error = await violation(url, who["NATS_USER"], who["NATS_PASSWORD"], subject)
            if f'permissions violation for publish to "{subject.lower()}"' not in error:
                raise CheckFailed(f"{role} publishing to {subject}: {error or 'allowed'}")
            said.append(f"{role} -> {subject}")
        say("OK", "NATS refuses what a role may not do", f"no user: {anonymous}; "
            f"a permissions violation for each of {', '.join(said)}")  # fmt: skip

    async def rogue_node(self, route: int, monitor: int) -> None:
        """A nats-server of this machine's (the checkout's venv) asking nats-1 for a route
        without the route password: refused, so it never becomes a node."""
        from tests.rigs.nats_server import nats_server_binary

        client, listen = free_ports(2)
        log = self.folder / "rogue.log"
        with log.open("wb") as out:
            rogue = await asyncio.create_subprocess_exec(
                nats_server_binary(), "-n", "rogue", "-a", "127.0.0.1", "-p", str(client),
                "--cluster_name", "lightgrep", "--cluster", f"nats://127.0.0.1:{listen}",
                "--routes", f"nats://127.0.0.1:{route}", stdout=out, stderr=out,
            )  # fmt: skip
        try:
            # it tries at once, then each second: a few tries are in nats-1's log by then
            await asyncio.sleep(5)
            found = self.monitoring(monitor, "/routez").get("routes") or []
            names = {str(r.get("remote_name")) for r in found}
        finally:
            rogue.terminate()
            await rogue.wait()
        tried = "Error" in log.read_text() or "Authorization" in log.read_text()
        if "rogue" in names or not tried:
            raise CheckFailed(f"a node without the route password: routes {names}, "
                              f"its log {log.read_text()[-800:]}")  # fmt: skip
        say("OK", "a node without the route password", f"refused: nats-1's routes stay "
            f"{', '.join(sorted(names))}")  # fmt: skip

    def meta_leader(self, monitor: int) -> str:
        return str(self.monitoring(monitor, "/jsz")["meta_cluster"]["leader"])

    @staticmethod
    def monitoring(port: int, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return json.loads(answer.read())

    # ---- all of it ------------------------------------------------------------------------

    async def run(self) -> None:
        await self.llm.start()
        await self.telegram.start()
        try:
            self.write_files()
            if not self.args.no_build:
                await self.build()
            await self.contents()
            await self.cold_start()
            await self.doctor()
            await self.piped_chat()
            await self.single_bot()
            await self.cluster()
        finally:
            await self.telegram.stop()
            await self.llm.stop()

    def write_files(self) -> None:
        """What an operator writes beside the compose files: config.toml and the env files."""
        config = self.folder / "config.toml"
        config.write_text(
            f'[llm]\nbase_url = "{self.llm.base_url}"\nmodel = "fake-model"\n'
            "context_window_tokens = 50000\n"
            f'[telegram]\nenabled = true\nallow_from = ["*"]\napi_base = '
            f'"{self.telegram.api_base}"\npoll_timeout_s = 5\n'
        )
        (self.folder / "lightgrep.env").write_text(
            f"TELEGRAM_BOT_TOKEN={TOKEN}\nLIGHTGREP_CLUSTER_SIGNING_KEY={secrets.token_hex(32)}\n"
        )
        for path in (config, self.folder / "lightgrep.env"):
            path.chmod(0o644)  # read by the containers' own user (10001)
        # nats.env, ingress.env, worker.env: as docs/cluster.md makes them (read by compose)
        subprocess.run([str(ROOT / "deploy" / "nats-passwords"), str(self.folder)],
                       check=True, capture_output=True)  # fmt: skip


def env_file(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


async def violation(url: str, user: str, password: str, subject: str) -> str:
    """What NATS says when this user publishes to `subject` ("" if it says nothing)."""
    import nats

    said: asyncio.Queue[str] = asyncio.Queue()

    async def error(exc: Exception) -> None:
        said.put_nowait(str(exc).lower())

    client = await nats.connect(url, user=user, password=password, error_cb=error)
    try:
        await client.publish(subject, b"{}")
        await client.flush()
        return await asyncio.wait_for(said.get(), 5)
    except TimeoutError:
        return ""
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="lightgrep:check")
    parser.add_argument("--base", default="local/python:3.11-bookworm")
    parser.add_argument("--no-build", action="store_true", help="check the image as it is")
    parser.add_argument("--users", type=int, default=20, help="talking in the cluster")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory(prefix="lightgrep-check-image-") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)
        try:
            asyncio.run(Check(args, folder).run())
        except CheckFailed as exc:
            say("FAIL", str(exc))
            return 1
    mine = ["docker", "ps", "-aq", "--filter", f"ancestor={args.image}"]
    left = subprocess.run(mine, capture_output=True, text=True).stdout.split()
    if left:
        say("FAIL", f"containers of the check left behind: {' '.join(left)}")
        return 1
    say("OK", "all checks passed; no container of the check is left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
