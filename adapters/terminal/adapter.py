"""The terminal: a REPL for `lightgrep chat` (one local user, a private chat).

In a terminal (stdin and stdout both TTYs) it is a line editor (prompt_toolkit): a paste of any
size is one message (bracketed paste), history across runs (a file per user in the data folder),
Esc then Enter for a new line; answers show a spinner until text arrives and are rendered as
Markdown (rich). Ctrl-C cancels the answer under way (the message stays saved, the unfinished
answer is not kept); at an empty prompt Ctrl-C or Ctrl-D leaves.

Anything else (a pipe, a file, a script) gets the plain line reader and plain text, exactly as
written: one line is one message, replies go to stdout, the prompt only when stdin is a terminal.
Either way input is read without blocking the event loop, so background consolidation keeps
running while the person types.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import getpass
import logging
import os
import signal
import sys
import threading
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from adapters.intake import pipeline
from adapters.intake.texts import failed_here
from bot.config import ConfigError, data_home
from bot.inbound import Inbound
from bot.keys import session_key, user_key
from bot.outbound import CONSOLIDATING, BufferedOutbound, Button, Notice, OutFile, Reply
from memory.keys import encode_key

if TYPE_CHECKING:
    from adapters.terminal.screen import Screen
    from bot.config import Config
    from bot.platform import Core

log = logging.getLogger(__name__)

PROMPT = "you> "
CONTINUATION = "...  "
QUIT_WORDS = frozenset({"/quit", "/exit"})
HELP_NOTES = (  # what /help adds in the terminal
    "/quit — Leave (Ctrl-D, or Ctrl-C at an empty prompt, too)",
    "Esc then Enter (or Alt+Enter) starts a new line; Ctrl-C stops an answer under way.",
)
HISTORY_FOLDER = "terminal-history"
CANCELLED = "(Stopped. Your message is saved; the unfinished answer was not kept.)"
NOTICES: dict[str, str] = {CONSOLIDATING: "(filing older messages into your memory…)"}


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
        core: Core,
        *,
        user: str | None = None,
        stdin_fd: int | None = None,
        stdout: TextIO | None = None,
        files_dir: Path | None = None,
        log_file: Path | None = None,
    ) -> None:
        self.config = config
        self.core = core
        # One spelling per name: "José" typed in NFD (macOS) is the same person as in NFC.
        self.user = unicodedata.normalize("NFC", user or login_name())
        self.stdin_fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
        self.out = stdout or sys.stdout
        self.files_dir = files_dir or Path.cwd()  # where a file the bot sends (/export) is saved
        self.interactive = os.isatty(self.stdin_fd)
        self.editor = self.interactive and _is_tty(self.out)
        self.log_file = log_file
        self.ready = asyncio.Event()
        self.user_key = user_key("cli", self.user)
        self.session_key = session_key("cli", "local", self.user)
        self._answering: asyncio.Task[None] | None = None
        self._intake = pipeline.Intake(core, ["*"])  # the person at the keyboard runs the bot
        self._printing = asyncio.Lock()  # an answer being printed, or a reminder

    async def run(self, stop: asyncio.Event) -> None:
        log.info("chatting as %s (session %s)", self.user_key, self.session_key)
        with self._interrupts(stop):
            if self.editor:
                await self._run_editor(stop)
            else:
                await self._run_lines(stop)

    def banner(self) -> str:
        keys = "Esc then Enter (or Alt+Enter) starts a new line; " if self.editor else ""
        return (
            f"{self.config.agent.bot_name} — you are {self.user_key}. /help lists commands; "
            f"{keys}/quit, Ctrl-D or Ctrl-C at an empty prompt leaves.\n"
        )

    # ---- the plain line reader (pipes, files, a terminal on one side only) ---------------

    async def _run_lines(self, stop: asyncio.Event) -> None:
        reader = LineReader(self.stdin_fd)
        reader.start()
        self.ready.set()
        if self.interactive:
            self._write(self.banner())
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
                await self._answer_cancellably(text)
        finally:
            reader.close()
            if self.interactive:
                self._write("\n")

    async def _next_line(self, reader: LineReader, stop: asyncio.Event) -> str | None:
        """The next line, or None at EOF or when asked to stop."""
        if self.interactive and reader.lines.empty():
            self._write(PROMPT)
        return await _first_or_none(reader.lines.get(), stop)

    # ---- the line editor (a terminal on both sides) ----------------------------------------

    async def _run_editor(self, stop: asyncio.Event) -> None:
        session = self._prompt_session()
        self.ready.set()
        self._write(self.banner())
        while not stop.is_set():
            text = await self._prompt(session, stop)
            if text is None:
                break
            text = text.strip()
            if not text:
                continue
            if text.lower() in QUIT_WORDS:
                break
            await self._answer_cancellably(text)
        self._write("\n")

    def _prompt_session(self) -> Any:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings

        bindings = KeyBindings()

        @bindings.add("enter")
        def _send(event: Any) -> None:
            event.current_buffer.validate_and_handle()

        @bindings.add("escape", "enter")  # Alt+Enter sends the same keys in most terminals
        def _new_line(event: Any) -> None:
            event.current_buffer.insert_text("\n")

        @bindings.add("c-c")
        def _interrupt(event: Any) -> None:
            """Like a shell: Ctrl-C drops what is typed; at an empty prompt it leaves."""
            if event.current_buffer.text:
                event.current_buffer.reset()
            else:
                event.app.exit(result=None)

        history = self._history() or InMemoryHistory()
        return PromptSession(
            PROMPT,
            multiline=False,  # Enter sends; a pasted or an Esc-Enter newline stays in
            reserve_space_for_menu=0,  # nothing to complete: don't push the screen up
            prompt_continuation=CONTINUATION,
            key_bindings=bindings,
            history=history,
            enable_open_in_editor=False,
        )

    def _history(self) -> Any:
        """The user's input history, a private file in the data folder; None if it cannot be."""
        from prompt_toolkit.history import FileHistory

        try:
            folder = data_home() / HISTORY_FOLDER
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = folder / f"{encode_key(self.user_key)}.txt"
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        except (OSError, ConfigError) as exc:
            log.warning("no input history across runs: %s", exc)
            return None
        return FileHistory(str(path))

    async def _prompt(self, session: Any, stop: asyncio.Event) -> str | None:
        """What the person sends; None when they leave (Ctrl-D, Ctrl-C) or on stop."""
        try:
            # handle_sigint=False: the prompt's own Ctrl-C key binding decides, and a SIGINT
            # from outside reaches _interrupts (which stops the chat).
            prompt = session.prompt_async(handle_sigint=False)
            return await _first_or_none(prompt, stop)
        except EOFError:
            return None

    # ---- one answer ----------------------------------------------------------------------

    async def _answer_cancellably(self, text: str) -> None:
        """Answer `text`; a Ctrl-C meanwhile (see _interrupts) cancels just this answer."""
        self._answering = asyncio.ensure_future(self._answer(text))
        try:
            await asyncio.shield(self._answering)
        except asyncio.CancelledError:
            if not self._answering.cancelled():
                raise  # the chat itself is being cancelled
            self._say_cancelled()
        finally:
            self._answering = None

    async def _answer(self, text: str) -> None:
        async with self._printing:
            await self._answer_now(text)

    async def _answer_now(self, text: str) -> None:
        """Through the shared intake (adapters/intake): the terminal has one person, the
        operator (no allow list), no groups, and no message ids (no receipt)."""
        inbound = Inbound(
            platform="cli",
            session_key=self.session_key,
            user_key=self.user_key,
            text=text,
            is_private=True,
            help_notes=HELP_NOTES,
            has_groups=False,
            place={"user": self.user},
        )
        chat = TerminalChat(self._write, self._printer, editor=self.editor, log=self.log_file)
        await self._intake.take(pipeline.Arrival(inbound, self.user), chat)

    def _printer(self) -> PrintedOutbound:
        """The reply port of one answer: printed as it comes (rendered in a real terminal)."""
        return PrintedOutbound(
            self._write, self.files_dir, _screen(self.out) if self.editor else None
        )

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        """A reminder while the chat runs (bot.platform.Resender): printed between answers,
        above the prompt. Only this terminal's person's (another's raises: not sent)."""
        if destination.get("user") != self.user:
            raise LookupError("a reminder of someone else than this terminal's person")
        await self.ready.wait()
        text = reply.text if reply is not None else "(Something went wrong on my side.)"
        async with self._printing:
            if self.editor:
                from prompt_toolkit.application import run_in_terminal

                await run_in_terminal(lambda: self._write(f"{text}\n"))
            else:
                self._write(f"{text}\n\n")

    def _say_cancelled(self) -> None:
        self._write(f"\n{CANCELLED}\n\n")

    @contextlib.contextmanager
    def _interrupts(self, stop: asyncio.Event) -> Any:
        """In a terminal, Ctrl-C (SIGINT) cancels the answer under way, and only that; with no
        answer under way it stops the chat. Piped, SIGINT stays the CLI's: stop."""
        loop = asyncio.get_running_loop()
        if not self.interactive:
            yield
            return

        def interrupted() -> None:
            if self._answering is not None and not self._answering.done():
                self._answering.cancel()
            else:
                stop.set()

        try:
            loop.add_signal_handler(signal.SIGINT, interrupted)
        except (NotImplementedError, RuntimeError, ValueError):
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    def _write(self, text: str) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.out.write(text)
            self.out.flush()


class TerminalChat:
    """The terminal as the shared intake drives it (adapters/intake/pipeline.py `Chat`): its
    answers are printed as they come, so there is no "typing…" and nothing left to send."""

    typing_every_s = 3600.0  # the spinner is the answer's own (PrintedOutbound)

    def __init__(
        self,
        write: Callable[[str], None],
        printer: Callable[[], PrintedOutbound],
        *,
        editor: bool,
        log: Path | None,
    ) -> None:
        """`printer` makes an answer's reply port; `editor`: a real terminal on both sides;
        `log`: the log file, if the chat has its own."""
        self._write = write
        self._printer = printer
        self._editor = editor
        self._log = log
        self._answer: PrintedOutbound | None = None

    def answer(self) -> PrintedOutbound:
        self._answer = self._printer()
        return self._answer

    async def show_typing(self) -> None:
        """Nothing: the spinner shows until text arrives."""

    async def say(self, text: str) -> None:
        self._write(f"{text}\n\n")

    async def refuse(self, text: str) -> None:
        await self.say(text)

    async def fail(self, text: str) -> None:
        """The person is the operator: the note says where the details are."""
        wrote = self._answer is not None and self._answer.wrote
        self._write("\n" if wrote and not self._editor else "")
        self._write(f"{failed_here(text, str(self._log) if self._log else 'the log')}\n\n")

    async def conclude(self) -> list[str]:
        return []  # printed as it came; terminal lines have no ids to reply to

    async def send_privately(self, reply: Reply) -> bool:
        return False  # never asked: the terminal is a private chat

    def how_to_open_private(self) -> str:
        return ""


class PrintedOutbound:
    """The terminal's Outbound: text is printed as it comes, a blank line ends the answer. The
    terminal is a private chat, so a private answer is printed like any other. A file is saved
    in `files_dir` and its path printed; buttons are printed as the commands to type.

    With a `screen` (a real terminal) a spinner runs until text arrives and the text is rendered
    as Markdown; without one, the text is written exactly as the core gave it."""

    def __init__(
        self, write: Callable[[str], None], files_dir: Path, screen: Screen | None = None
    ) -> None:
        self._write = write
        self._files_dir = files_dir
        self._screen = screen
        self.wrote = False
        self.shown = asyncio.Event()  # some of the answer is printed
        self._whole = BufferedOutbound()  # the answer as the intake reads it (`reply`)
        self._notes: dict[str, None] = {}  # in order, each once

    @property
    def reply(self) -> Reply:
        return self._whole.reply

    async def begin(self, *, private: bool = False) -> None:
        await self._whole.begin(private=private)
        if self._screen is not None:
            self._screen.spin()

    async def notice(self, what: Notice) -> None:
        """Before any text it labels the spinner (the wait may be the consolidation's); either
        way it is said once more under the answer, where it is not gone in a flash."""
        text = NOTICES.get(what)
        if self._screen is not None and text:
            if not self.wrote:
                self._screen.spin(text.strip("()"))
            self._notes[text] = None

    async def add_text(self, text: str) -> None:
        await self._whole.add_text(text)
        self.wrote = self.wrote or bool(text)
        if text:
            self.shown.set()
        if self._screen is not None:
            self._screen.add_markdown(text)
        else:
            self._write(text)

    async def attach_file(self, file: OutFile) -> None:
        await self._whole.attach_file(file)
        self.wrote = True
        try:
            path = save_file(file, self._files_dir)
        except OSError as exc:
            self._say(f"(I could not save {file.name} in {self._files_dir}: {exc.strerror})")
            return
        self._say(f"Saved {file.name}: {path}")

    async def offer(self, buttons: tuple[Button, ...]) -> None:
        await self._whole.offer(buttons)
        self._say("\n".join(f"  {b.command}   ({b.label})" for b in buttons))

    def _say(self, note: str) -> None:
        """A line of its own after the answer's text so far."""
        if self._screen is not None:
            self._screen.end_markdown()
            self._screen.note(note)
        else:
            self._write(f"\n{note}\n")

    async def finish(self) -> None:
        await self._whole.finish()
        if self._screen is not None:
            self._screen.end_markdown()
            for note in self._notes:
                self._screen.note(note)
            self._write("\n")
        else:
            self._write("\n\n")

    async def close(self) -> None:
        """The answer ended without finish (cancelled, failed): stop the spinner."""
        if self._screen is not None:
            self._screen.stop_spinning()


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


async def _first_or_none(awaitable: Any, stop: asyncio.Event) -> Any:
    """The awaitable's result, or None if `stop` is set first (the awaitable is then cancelled)."""
    task = asyncio.ensure_future(awaitable)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, EOFError):
                await task
    if not task.done() or task.cancelled():
        return None
    return task.result()


def _screen(stream: TextIO) -> Screen:
    # Imported when a terminal needs it: the plugin registry imports this module for every
    # command, and `lightgrep memory` has no use for rich.
    from adapters.terminal.screen import Screen

    return Screen(stream)


def _is_tty(stream: TextIO) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return False
