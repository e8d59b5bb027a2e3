"""What the tests of the `lightgrep` command share: configs, a pseudo-terminal's far side, and
a child process for which file permissions bind (the tests run as root)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import ctypes
import fcntl
import os
import pty
import re
import socket
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
)
from tests.rigs.fakes.telegram_server import FakeTelegram

# One step of a child `lightgrep` process, which may include its cold start: ~2.6 s of CPU
# (importing the client libraries, start-up) plus discord.py's 2 s wait for guilds. Where the
# child gets a fifth of a core (2 cores, the suite's workers, their children and other work)
# that is ~15 s, which 15 s steps overran; bench/harness.py gives a child 30 s to be ready too.
# Only a hang ever waits this long.
STEP_TIMEOUT = 30.0
ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])")
CURSOR_POSITION_REQUEST = b"\x1b[6n"


def write_config(folder: Path, llm: FakeOpenAI | str, extra: str = "") -> Path:
    """A config whose memory is in `folder`/workspaces (the default is the data folder)."""
    base_url = llm if isinstance(llm, str) else llm.base_url
    path = folder / "config.toml"
    path.write_text(
        '[memory]\nworkspaces_dir = "workspaces"\n'
        f'[llm]\nbase_url = "{base_url}"\nmodel = "fake-model"\n{extra}'
    )
    return path


async def run_chat(
    config: Path, env: dict[str, str], stdin: bytes, *args: str
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", "--config", str(config), *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=config.parent,
        env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), STEP_TIMEOUT)
    return proc.returncode or 0, out.decode(), err.decode()


class Terminal:
    """The far side of a pseudo-terminal: what a person sees (escape sequences removed) and
    types. Like a real terminal it answers a program's cursor position requests."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.seen = ""
        self.raw = b""  # everything, escape sequences included
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._data: asyncio.Queue[bytes] = asyncio.Queue()
        asyncio.get_running_loop().add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO once the child has closed the terminal
            chunk = b""
        if not chunk:
            asyncio.get_running_loop().remove_reader(self.fd)
        elif CURSOR_POSITION_REQUEST in chunk:
            with contextlib.suppress(OSError):
                os.write(self.fd, b"\x1b[1;1R")
        self.raw += chunk
        self._data.put_nowait(chunk)

    async def expect(self, text: str) -> str:
        """Everything shown up to and including `text`."""
        try:
            async with asyncio.timeout(STEP_TIMEOUT):
                while text not in self.seen:
                    chunk = await self._data.get()
                    if not chunk:
                        raise AssertionError(f"terminal closed before {text!r}; saw {self.seen!r}")
                    self.seen = ANSI.sub("", self.seen + self._decoder.decode(chunk))
        except TimeoutError:
            raise AssertionError(f"no {text!r} on the terminal; saw {self.seen!r}") from None
        shown, _, self.seen = self.seen.partition(text)
        return shown + text

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.fd)
        os.close(self.fd)




def open_terminal(rows: int = 24, columns: int = 80) -> tuple[int, int]:
    """(our side, the child's side) of a new pseudo-terminal of that size."""
    ours, theirs = pty.openpty()
    fcntl.ioctl(theirs, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    return ours, theirs


def terminal_session() -> None:
    """In the child before exec: lead a new session whose controlling terminal is stdin, as a
    shell's job is, so that Ctrl-C typed there is a SIGINT to it."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def start_chat(
    config: Path, env: dict[str, str], *args: str
) -> tuple[asyncio.subprocess.Process, Terminal]:
    """`lightgrep chat` in a pseudo-terminal, as a person starts it from a shell."""
    ours, theirs = open_terminal()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", "--config", str(config), *args,
        stdin=theirs, stdout=theirs, stderr=theirs,
        cwd=config.parent, env=env, preexec_fn=terminal_session,
    )  # fmt: skip
    os.close(theirs)
    return proc, Terminal(ours)


async def end_chat(proc: asyncio.subprocess.Process, terminal: Terminal) -> int:
    """Wait for the chat to end (killing it if it does not); its exit code."""
    try:
        await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
    finally:
        terminal.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode


CAP_DAC_OVERRIDE = 1  # linux/capability.h: root's licence to write where permissions say no
PR_CAPBSET_DROP = 24  # linux/prctl.h


def without_write_override() -> None:
    """In the child before exec: as root, give up CAP_DAC_OVERRIDE so file permissions bind it
    as they bind anyone (a no-op for an ordinary user, whom they bind already)."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def run_cli(env: dict[str, str], *args: str, read_only: bool = False) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        capture_output=True,
        env=env,
        timeout=STEP_TIMEOUT,
        preexec_fn=without_write_override if read_only else None,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def telegram_config(folder: Path, llm: FakeOpenAI, telegram: FakeTelegram, token: str) -> Path:
    return write_config(
        folder,
        llm,
        f'[telegram]\nenabled = true\ntoken = "{token}"\nallow_from = ["*"]\n'
        f'api_base = "{telegram.api_base}"\npoll_timeout_s = 1\n',
    )


async def start_run(config: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "run", "--config", str(config),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=config.parent,
        env=env,
    )  # fmt: skip


async def read_until(stream: asyncio.StreamReader, text: str) -> str:
    seen = ""
    async with asyncio.timeout(STEP_TIMEOUT):
        while text not in seen:
            line = await stream.readline()
            if not line:
                raise AssertionError(f"stream ended before {text!r}; saw {seen!r}")
            seen += line.decode()
    return seen


async def stopped(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
