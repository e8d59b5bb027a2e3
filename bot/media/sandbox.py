"""PDFs read where the work can be bounded and stopped: in a child process, one at a time per
person, within a budget per person, never on the bot's threads.

WHY: pypdf on a hostile file of 51 KB (300 pages sharing one large content stream of empty
text) ran for ~40 minutes in a thread of the default executor, which /recall, /forget,
/export, /wipe, the tools and memory writes share: six such files filled it, another person's
/recall went unanswered, RSS grew by half a GB, and SIGTERM could not end it (a thread cannot
be stopped). Here:

- every PDF is read by a fresh child (bot/media/documents.py) that limits its own CPU time and
  address space before it reads the file, at low priority; it is killed `seconds` after it is
  ready, and what it read by then is used (the person is told it was cut);
- at most `parsers` children run at once, and each person's PDFs one after the other, so one
  person's files queue behind each other, not in front of everyone else's;
- each person's reading time is capped (`seconds_per_hour`); past it, their PDFs are refused
  with a word on when to send them again;
- `stop()` (the bot is stopping) kills the children and refuses what still waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.media import documents
from bot.media.documents import (
    DAMAGED,
    ENCRYPTED,
    END,
    ERROR,
    MEMORY,
    PAGE,
    PAGES,
    READY,
    DocumentError,
)

log = logging.getLogger(__name__)

CHILD = Path(documents.__file__)
PARSERS = 2  # children at once: the bot's two cores stay mostly its own (they run at nice 10)
STARTUP_S = 30.0  # a child not ready by then is not coming (the machine is in trouble)
HOUR_S = 3600.0

NO_TEXT = "it holds no text I can read (a scanned PDF is only pictures)"
SLOW = "it takes too long to read, so I stopped (some PDFs are made to be slow to read)"
STOPPING = "I'm restarting; please send it again in a minute"
_ERRORS = {
    ENCRYPTED: "it is protected by a password",
    DAMAGED: "it could not be read (it may be damaged)",
    MEMORY: "reading it would take more memory than I allow for one file",
}


@dataclass(frozen=True)
class PdfText:
    text: str
    pages_read: int
    pages: int
    cut: bool  # stopped at the character or page budget, or at the deadline
    slow: bool = False  # stopped at the deadline


@dataclass
class _Person:
    """One person's PDFs: read one at a time, and what reading them cost in the last hour."""

    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # reads waiting or running
    spent: deque[tuple[float, float]] = field(default_factory=deque)  # (loop time, seconds)


class PdfSandbox:
    """Reads PDFs in limited child processes (see the module's docstring)."""

    def __init__(
        self,
        *,
        seconds: float,
        memory_bytes: int,
        seconds_per_hour: float,
        parsers: int = PARSERS,
    ) -> None:
        self.seconds = seconds
        self.memory_bytes = memory_bytes
        self.seconds_per_hour = seconds_per_hour
        self._slots = asyncio.Semaphore(parsers)
        self._people: dict[str, _Person] = {}
        self._running: set[asyncio.subprocess.Process] = set()
        self._stopping = False

    async def read(self, data: bytes, max_chars: int, person: str) -> PdfText:
        """The text of a PDF sent by `person`, up to `max_chars`; DocumentError (worded for the
        person) when it cannot be read, or not now."""
        with self._person(person) as who:
            async with who.turn:
                self._check_budget(who)
                async with self._slots:
                    if self._stopping:
                        raise DocumentError(STOPPING)
                    loop = asyncio.get_running_loop()
                    spent = [0.0]
                    try:
                        return await self._run(data, max_chars, spent)
                    finally:
                        if spent[0]:
                            who.spent.append((loop.time(), spent[0]))

    def stop(self) -> None:
        """The bot is stopping: the children are killed, and every read waiting or running
        ends with a DocumentError that says so."""
        self._stopping = True
        for process in list(self._running):
            with contextlib.suppress(ProcessLookupError):
                process.kill()

    # ---- one person ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _person(self, key: str) -> Iterator[_Person]:
        """The person's record, kept while a read of theirs waits or runs or the last hour's
        cost matters (so RAM holds only people who sent PDFs lately)."""
        who = self._people.get(key)
        if who is None:
            who = self._people[key] = _Person()
        who.users += 1
        try:
            yield who
        finally:
            who.users -= 1
            self._forget_idle()

    def _forget_idle(self) -> None:
        now = asyncio.get_running_loop().time()
        for key, who in list(self._people.items()):
            _expire(who, now)
            if not who.users and not who.spent:
                del self._people[key]

    def _check_budget(self, who: _Person) -> None:
        now = asyncio.get_running_loop().time()
        _expire(who, now)
        total = sum(seconds for _, seconds in who.spent)
        if total < self.seconds_per_hour:
            return
        free_at = now
        for when, seconds in who.spent:  # the oldest go first: when is enough of it back?
            total -= seconds
            free_at = when + HOUR_S
            if total < self.seconds_per_hour:
                break
        minutes = max(1, math.ceil((free_at - now) / 60))
        raise DocumentError(
            "I have already spent a lot of time reading your PDFs in the last hour; please "
            f"send it again in about {minutes} minute{'s' * (minutes != 1)}"
        )

    # ---- one child ----------------------------------------------------------------------

    async def _run(self, data: bytes, max_chars: int, spent: list[float]) -> PdfText:
        """One child reads the file; `spent` gets the seconds it took from being ready."""
        loop = asyncio.get_running_loop()
        cpu_seconds = math.ceil(self.seconds) + 1  # the backstop; the deadline comes first
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                str(CHILD),
                str(max_chars),
                str(documents.MAX_PDF_PAGES),
                str(cpu_seconds),
                str(self.memory_bytes),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=_child_env(),  # nothing of the bot's environment (its tokens)
                start_new_session=True,  # a Ctrl-C in the terminal is the bot's to handle
                limit=8 * max_chars + 65536,  # the longest line a page can make
            )
        except OSError as exc:
            log.error("could not start the PDF reader: %s", exc)
            raise DocumentError("I can't read PDFs just now") from None
        self._running.add(process)
        if self._stopping:  # stopped while it was being started
            process.kill()
        feeding: asyncio.Task[None] | None = None
        reading = _Reading()
        try:
            assert process.stdout is not None
            async with asyncio.timeout(STARTUP_S):
                first = await process.stdout.readline()
            if _parse(first).get(READY) is not True:
                raise DocumentError(STOPPING if self._stopping else _ERRORS[DAMAGED])
            started = loop.time()
            feeding = asyncio.create_task(_feed(process, data))
            try:
                async with asyncio.timeout(self.seconds):
                    while not reading.over:
                        line = await process.stdout.readline()
                        if not line:
                            break
                        reading.take(_parse(line))
            except TimeoutError:
                reading.slow = True
            except ValueError:  # a line longer than any page can make
                reading.error = DAMAGED
            spent[0] = min(loop.time() - started, self.seconds)
        except TimeoutError:
            log.error("the PDF reader did not start within %.0f s", STARTUP_S)
            raise DocumentError("I can't read PDFs just now") from None
        finally:
            self._running.discard(process)
            await _end(process, feeding)
        if self._stopping:
            raise DocumentError(STOPPING)
        if process.returncode == -signal.SIGXCPU:
            reading.slow = True
        return reading.result()


class _Reading:
    """What a child's lines said so far."""

    def __init__(self) -> None:
        self.pages = 0
        self.texts: list[str] = []
        self.read = 0
        self.end: str | None = None
        self.error: str | None = None
        self.slow = False

    @property
    def over(self) -> bool:
        return self.end is not None or self.error is not None

    def take(self, line: dict[str, Any]) -> None:
        if isinstance(line.get(PAGES), int):
            self.pages = line[PAGES]
        elif isinstance(line.get(PAGE), str):
            self.read += 1
            if line[PAGE]:
                self.texts.append(line[PAGE])
        elif isinstance(line.get(END), str):
            self.end = line[END]
        else:
            self.error = line.get(ERROR) if line.get(ERROR) in _ERRORS else DAMAGED

    def result(self) -> PdfText:
        text = "\n\n".join(self.texts)
        if self.error is not None and not (self.error == MEMORY and text.strip()):
            raise DocumentError(_ERRORS[self.error])
        if not text.strip():
            raise DocumentError(SLOW if self.slow else NO_TEXT if self.end else _ERRORS[DAMAGED])
        cut = self.end != "all"
        return PdfText(text, self.read, max(self.pages, self.read), cut, slow=cut and self.slow)


def _child_env() -> dict[str, str]:
    """Only what a Python may need to start (a shared libpython found by LD_LIBRARY_PATH)."""
    return {key: os.environ[key] for key in ("LD_LIBRARY_PATH",) if key in os.environ}


def _parse(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {ERROR: DAMAGED}
    return value if isinstance(value, dict) else {ERROR: DAMAGED}


async def _feed(process: asyncio.subprocess.Process, data: bytes) -> None:
    """The file on the child's stdin; a child that ends first just does not take the rest."""
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.write(data)
        await process.stdin.drain()
        process.stdin.close()


async def _end(process: asyncio.subprocess.Process, feeding: asyncio.Task[None] | None) -> None:
    """The child gone for sure (killed if it still runs), its pipes closed."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    if feeding is not None:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError, BrokenPipeError, ConnectionResetError):
            await feeding
    if process.stdin is not None:
        process.stdin.close()
    await process.wait()


def _expire(who: _Person, now: float) -> None:
    while who.spent and who.spent[0][0] <= now - HOUR_S:
        who.spent.popleft()
