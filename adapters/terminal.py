"""The terminal: a REPL on stdin/stdout, for `lightgrep chat` (one local user, a private chat).

Stdin is read without blocking the event loop, so background consolidation keeps running while
the person types. It works for a terminal and for a pipe: the prompt is shown only when stdin
is a terminal, and replies go to stdout so a script can read them.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import getpass
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.inbound import Inbound
from bot.keys import session_key, user_key
from bot.outbound import Button, OutFile
from bot.platform import PlatformPlugin

if TYPE_CHECKING:
    from bot.config import Config
    from bot.platform import Core

log = logging.getLogger(__name__)

PROMPT = "you> "
QUIT_WORDS = frozenset({"/quit", "/exit"})


def login_name() -> str:
    """The person at the keyboard; containers may have no passwd entry for the uid."""
    try:
        return getpass.getuser() or "local"
    except (OSError, KeyError):
        return "local"


class LineReader:
    """Lines from a file descriptor, delivered to the event loop as they arrive; None at EOF.

    A pipe or a terminal is watched with the loop's reader (no thread, no O_NONBLOCK on a tty that
    stdout may share). A regular file (`< file`) cannot be watched that way: a daemon thread
    reads it instead, with os.read so no Python-level lock is held at interpreter exit.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._loop = asyncio.get_running_loop()
        self._watching = False
        self._done = False

    def start(self) -> None:
        try:
            self._loop.add_reader(self.fd, self._readable)
            self._watching = True
        except (PermissionError, NotImplementedError, ValueError, OSError):
            threading.Thread(target=self._read_in_thread, name="stdin", daemon=True).start()

    def close(self) -> None:
        if self._watching:
            self._loop.remove_reader(self.fd)
            self._watching = False

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self._feed(chunk)
        if not chunk:
            self.close()

    def _read_in_thread(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                chunk = b""
            self._loop.call_soon_threadsafe(self._feed, chunk)
            if not chunk:
                return

    def _feed(self, chunk: bytes) -> None:
        """Split into lines; an empty chunk is EOF (a last line without newline still counts)."""
        if self._done:
            return
        self._pending += self._decoder.decode(chunk, final=not chunk)
        *complete, self._pending = self._pending.split("\n")
        for line in complete:
            self.lines.put_nowait(line.rstrip("\r"))
        if not chunk:
            if self._pending:
                self.lines.put_nowait(self._pending)
                self._pending = ""
            self.lines.put_nowait(None)
            self._done = True


class TerminalAdapter:
    """One person talking to the agent in a terminal until /quit, end of input, or stop."""

    name = "terminal"

    def __init__(
        self,
        config: Config,
        agent: Core,
        *,
        user: str | None = None,
        stdin_fd: int | None = None,
        stdout: TextIO | None = None,
        files_dir: Path | None = None,
    ) -> None:
        self.config = config
        self.agent = agent
        self.user = user or login_name()
        self.stdin_fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
        self.out = stdout or sys.stdout
        self.files_dir = files_dir or Path.cwd()  # where a file the bot sends (/export) is saved
        self.interactive = os.isatty(self.stdin_fd)
        self.ready = asyncio.Event()
        self.user_key = user_key("cli", self.user)
        self.session_key = session_key("cli", "local", self.user)

    async def run(self, stop: asyncio.Event) -> None:
        reader = LineReader(self.stdin_fd)
        reader.start()
        self.ready.set()
        log.info("chatting as %s (session %s)", self.user_key, self.session_key)
        if self.interactive:
            self._write(
                f"{self.config.agent.bot_name} — you are {self.user_key}. "
                "/help lists commands; /quit or Ctrl-D leaves.\n"
            )
        try:
            while not stop.is_set():
                line = await self._next_line(reader, stop)
                if line is None:
                    break
                text = line.strip()
                if not text:
                    continue
                if text.lower() in QUIT_WORDS:
                    break
                await self._answer(text)
        finally:
            reader.close()
            if self.interactive:
                self._write("\n")

    async def _next_line(self, reader: LineReader, stop: asyncio.Event) -> str | None:
        """The next line, or None at EOF or when asked to stop."""
        if self.interactive and reader.lines.empty():
            self._write(PROMPT)
        get = asyncio.ensure_future(reader.lines.get())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({get, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not get.done():
                get.cancel()
        if not get.done() or get.cancelled():
            return None
        return get.result()

    async def _answer(self, text: str) -> None:
        inbound = Inbound(
            platform="cli",
            session_key=self.session_key,
            user_key=self.user_key,
            text=text,
            is_private=True,
        )
        out = PrintedOutbound(self._write, self.files_dir)
        try:
            await self.agent.handle(inbound, out)
        except Exception:
            log.exception("the agent failed on a message")
            self._write("\n" if out.wrote else "")
            self._write("(Something went wrong on my side; the details are in the log.)\n\n")

    def _write(self, text: str) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.out.write(text)
            self.out.flush()


class PrintedOutbound:
    """The terminal's Outbound: text is printed as it comes, a blank line ends the answer. The
    terminal is a private chat, so a private answer is printed like any other. A file is saved
    in `files_dir` and its path printed; buttons are printed as the commands to type."""

    def __init__(self, write: Callable[[str], None], files_dir: Path) -> None:
        self._write = write
        self._files_dir = files_dir
        self.wrote = False

    async def begin(self, *, private: bool = False) -> None:
        pass

    async def add_text(self, text: str) -> None:
        self.wrote = self.wrote or bool(text)
        self._write(text)

    async def attach_file(self, file: OutFile) -> None:
        self.wrote = True
        try:
            path = save_file(file, self._files_dir)
        except OSError as exc:
            self._write(f"\n(I could not save {file.name} in {self._files_dir}: {exc.strerror})\n")
            return
        self._write(f"\nSaved {file.name}: {path}\n")

    async def offer(self, buttons: tuple[Button, ...]) -> None:
        self._write("\n" + "\n".join(f"  {b.command}   ({b.label})" for b in buttons) + "\n")

    async def finish(self) -> None:
        self._write("\n\n")


def save_file(file: OutFile, folder: Path) -> Path:
    """Write a file the bot sent into `folder` under its own name (never over an existing file:
    "name-2.zip" and so on), readable only by its owner: it may hold a person's memory."""
    stem, dot, suffix = Path(file.name).name.partition(".")
    data = file.read()
    for number in range(1, 1000):
        name = f"{stem}{'' if number == 1 else f'-{number}'}{dot}{suffix}"
        path = folder / name
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return path.resolve()
    raise FileExistsError(f"too many files named {file.name} in {folder}")


def create(config: Config, agent: Core, *, user: str | None = None) -> TerminalAdapter:
    """Entry point `lightgrep.platforms: terminal`."""
    return TerminalAdapter(config, agent, user=user)


# Entry point `lightgrep.platforms: terminal`; no settings section (`lightgrep chat` starts it).
PLUGIN = PlatformPlugin(name="terminal", create=create)
