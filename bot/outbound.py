"""The reply port: how the core answers, whatever carries the answer to the person.

The core calls, for every message it is handed:

    begin(private=...)            exactly once, before anything else
    add_text(piece) / attach_file(file)   any number of times, in order
    finish()                      exactly once, when the answer is complete

The text of an answer is the concatenation of its pieces (a streaming platform may show each
piece as it comes; others wait for finish). `private` comes first so that a platform can
decide where the answer goes before showing any of it: never in a group. An answer may have no
text at all (a redelivered message already answered together with a later one): then there is
nothing to send. If the core raises instead, finish is not called and the adapter says that
something went wrong.

Every call carries plain data (a bool, a str, an OutFile of bytes or a path), so the same calls
can be serialised onto a message broker and replayed by another process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class OutFile:
    """A file for the person: its bytes, or a path readable by whoever sends it."""

    name: str  # the file name the person sees
    mime: str  # e.g. "text/markdown"
    data: bytes | None = None
    path: Path | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.path is None):
            raise ValueError("an OutFile has either data or a path")


class Outbound(Protocol):
    """One answer on its way out; each adapter implements it (see the module docstring)."""

    async def begin(self, *, private: bool = False) -> None: ...

    async def add_text(self, text: str) -> None: ...

    async def attach_file(self, file: OutFile) -> None: ...

    async def finish(self) -> None: ...


@dataclass(frozen=True)
class Reply:
    """A whole answer, as BufferedOutbound collects it."""

    text: str
    private: bool = False
    files: tuple[OutFile, ...] = field(default=())


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

    async def begin(self, *, private: bool = False) -> None:
        self.private = private
        self.begun = True

    async def add_text(self, text: str) -> None:
        self._parts.append(text)

    async def attach_file(self, file: OutFile) -> None:
        self._files.append(file)

    async def finish(self) -> None:
        self._finished = Reply("".join(self._parts), self.private, tuple(self._files))

    @property
    def reply(self) -> Reply:
        if self._finished is None:
            raise RuntimeError("the answer is not finished")
        return self._finished
