"""The reply port: how the core answers, whatever carries the answer to the person.

The core calls, for every message it is handed:

    begin(private=...)            exactly once, before anything else
    add_text(piece) / attach_file(file)   any number of times, in order
    offer(buttons)                at most once, before finish: choices under the answer
    notice(what)                  any number of times, between begin and finish
    finish()                      exactly once, when the answer is complete

The text of an answer is the concatenation of its pieces (a streaming platform may show each
piece as it comes; others wait for finish). `private` comes first so that a platform can
decide where the answer goes before showing any of it: never in a group. An answer may have no
text at all (a redelivered message already answered together with a later one): then there is
nothing to send. If the core raises instead, finish is not called and the adapter says that
something went wrong.

A Button is a label and the command text it stands for: an adapter shows it as the platform's
button (Telegram inline keyboard, Discord button component) and, when it is pressed, hands the
command text to the core like a typed message from the person who pressed it. Where there are no
buttons (the terminal) the person types the command instead, so the answer's text always says
what to type.

A notice says what the core is doing besides answering, so a person is not left wondering
(today only CONSOLIDATING: older messages are being filed into memory, before the answer when
it must wait for that, or in the background). It is no part of the answer's text; an adapter
may show it or ignore it.

Every call carries plain data (a bool, a str, an OutFile of bytes or a path, Buttons of str),
so the same calls can be serialised onto a message broker and replayed by another process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

Notice = Literal["consolidating"]
CONSOLIDATING: Notice = "consolidating"


@dataclass(frozen=True)
class OutFile:
    """A file for the person: its bytes, or a path readable by whoever sends it."""

    name: str  # the file name the person sees
    mime: str  # e.g. "text/markdown"
    data: bytes | None = None
    path: Path | None = None
    # The answer read aloud (OGG/Opus): a platform sends it as a voice message where it has
    # them (Telegram), else as an audio file.
    voice: bool = False

    def __post_init__(self) -> None:
        if (self.data is None) == (self.path is None):
            raise ValueError("an OutFile has either data or a path")

    def size(self) -> int:
        """Its length in bytes (an adapter compares it with its platform's upload limit)."""
        if self.data is not None:
            return len(self.data)
        assert self.path is not None
        return self.path.stat().st_size

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        return self.path.read_bytes()


@dataclass(frozen=True)
class Button:
    """A choice under an answer; pressing it sends `command` as if the person had typed it."""

    label: str  # e.g. "Yes, forget it"
    command: str  # e.g. "/forget confirm 3f9a"; at most 64 bytes (Telegram's callback data)

    def __post_init__(self) -> None:
        if not self.command.startswith("/") or len(self.command.encode("utf-8")) > 64:
            raise ValueError("a button's command is a /command of at most 64 bytes")


def too_large_notice(file: OutFile, size: int, limit: int, platform: str) -> str:
    """What an adapter says instead of a file its platform will not take."""
    return (
        f"{file.name} is {size / 1e6:.1f} MB, more than {platform} lets me send "
        f"({limit / 1e6:.0f} MB). The operator of this bot can export it for you with "
        "`lightgrep export USER_KEY`."
    )


class Outbound(Protocol):
    """One answer on its way out; each adapter implements it (see the module docstring)."""

    async def begin(self, *, private: bool = False) -> None: ...

    async def add_text(self, text: str) -> None: ...

    async def attach_file(self, file: OutFile) -> None: ...

    async def offer(self, buttons: tuple[Button, ...]) -> None: ...
    async def notice(self, what: Notice) -> None: ...

    async def finish(self) -> None: ...


class PassingOutbound:
    """An Outbound that passes every call on to `out`: the base of one that changes a few (the
    streamed answer's tidying, the notices said under an answer) and passes the rest."""

    def __init__(self, out: Outbound) -> None:
        self._out = out

    async def begin(self, *, private: bool = False) -> None:
        await self._out.begin(private=private)

    async def add_text(self, text: str) -> None:
        await self._out.add_text(text)

    async def attach_file(self, file: OutFile) -> None:
        await self._out.attach_file(file)

    async def offer(self, buttons: tuple[Button, ...]) -> None:
        await self._out.offer(buttons)

    async def notice(self, what: Notice) -> None:
        await self._out.notice(what)

    async def finish(self) -> None:
        await self._out.finish()


@dataclass(frozen=True)
class Reply:
    """A whole answer, as BufferedOutbound collects it."""

    text: str
    private: bool = False
    files: tuple[OutFile, ...] = field(default=())
    buttons: tuple[Button, ...] = field(default=())


class BufferedOutbound:
    """The whole-answer path: collects the calls; `reply` is the answer once finished.

    Adapters that send an answer in one go (and the CLI, and tests) use it; a streaming adapter
    implements Outbound itself."""

    def __init__(self) -> None:
        self.private = False
        self.begun = False
        self._finished: Reply | None = None
        self._parts: list[str] = []
        self._files: list[OutFile] = []
        self._buttons: tuple[Button, ...] = ()
        self.notices: list[Notice] = []  # not sent: a whole answer arrives in one go anyway

    async def begin(self, *, private: bool = False) -> None:
        self.private = private
        self.begun = True

    async def add_text(self, text: str) -> None:
        self._parts.append(text)

    async def attach_file(self, file: OutFile) -> None:
        self._files.append(file)

    async def offer(self, buttons: tuple[Button, ...]) -> None:
        self._buttons = tuple(buttons)

    async def notice(self, what: Notice) -> None:
        self.notices.append(what)

    async def finish(self) -> None:
        self._finished = Reply(
            "".join(self._parts), self.private, tuple(self._files), self._buttons
        )

    @property
    def reply(self) -> Reply:
        if self._finished is None:
            raise RuntimeError("the answer is not finished")
        return self._finished
