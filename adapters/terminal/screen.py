"""How an answer looks in a terminal: a spinner until text arrives, then Markdown rendered by rich.

Text may arrive in pieces (a streaming core). Markdown cannot be rendered piece by piece, and
re-rendering the whole answer on every piece garbles a terminal once the answer is taller than
the screen. So finished blocks are rendered once each, as they complete: a block ends at a blank
line outside a code fence that is followed by a line that does not continue it (not indented,
not another list item). The unfinished rest waits for the next piece or for the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from typing import TextIO

from rich.console import Console
from rich.markdown import Markdown

SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
SPINNER_INTERVAL_S = 0.1
THINKING = "thinking…"
ERASE_LINE = "\r\x1b[2K"
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+[^`]*`+)")
_CONTINUES = re.compile(r"^(\s|[-*+] |\d{1,9}[.)] )")


def split_blocks(text: str) -> tuple[list[str], str]:
    """(finished Markdown blocks, the rest that may still grow)."""
    lines = text.split("\n")
    blocks: list[str] = []
    start = 0
    fence: str | None = None
    for i, line in enumerate(lines[:-1]):  # the last line may be incomplete
        marker = _FENCE.match(line)
        if marker:
            fence = None if fence == marker.group(1) else fence or marker.group(1)
            continue
        if fence or line.strip() or i == start:
            continue
        following = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
        if following is None or following == len(lines) - 1:
            continue  # the next line is not complete yet: it may still continue this block
        if _CONTINUES.match(lines[following]):
            continue
        block = "\n".join(lines[start:i]).strip("\n")
        if block.strip():
            blocks.append(block)
        start = following
    return blocks, "\n".join(lines[start:])


def as_chat_markdown(block: str) -> str:
    """Markdown as chat platforms read it: each line break is kept (Markdown would join the
    lines of a paragraph, and /help, /status and most answers are laid out line by line), and
    `<word>` is text, not an HTML tag to drop ("/recall <keywords>")."""
    lines = block.split("\n")
    fence: str | None = None
    for i, line in enumerate(lines):
        marker = _FENCE.match(line)
        if marker:
            fence = None if fence == marker.group(1) else fence or marker.group(1)
            continue
        if fence:
            continue
        line = "".join(
            part if part.startswith("`") else part.replace("<", "\\<")
            for part in _CODE_SPAN.split(line)
        )
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and following.strip() and not line.endswith("  "):
            line += "  "
        lines[i] = line
    return "\n".join(lines)


class Screen:
    """The answer area of a terminal: a spinner with a label, then rendered Markdown."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.console = Console(file=stream, highlight=False, soft_wrap=False)
        self._label = THINKING
        self._spinner: asyncio.Task[None] | None = None
        self._pending = ""

    # ---- the spinner ---------------------------------------------------------------------

    def spin(self, label: str = THINKING) -> None:
        """Show (or relabel) the spinner until text is shown."""
        self._label = label
        if self._spinner is None:
            self._spinner = asyncio.ensure_future(self._spin())

    def stop_spinning(self) -> None:
        if self._spinner is not None:
            self._spinner.cancel()
            self._spinner = None
            self._raw(ERASE_LINE)

    async def _spin(self) -> None:
        for frame in itertools.cycle(SPINNER_FRAMES):
            self._raw(f"{ERASE_LINE}\x1b[2m{frame} {self._label}\x1b[0m")
            await asyncio.sleep(SPINNER_INTERVAL_S)

    # ---- text ----------------------------------------------------------------------------

    def add_markdown(self, piece: str) -> None:
        self.stop_spinning()
        blocks, self._pending = split_blocks(self._pending + piece)
        for block in blocks:
            self._render(block)

    def end_markdown(self) -> None:
        """Render what is left of the answer."""
        self.stop_spinning()
        rest, self._pending = self._pending, ""
        if rest.strip():
            self._render(rest.strip("\n"))

    def note(self, text: str) -> None:
        """A dim line of its own, beside the answer (what the bot is doing, a failure)."""
        self.stop_spinning()
        self.console.print(text, style="dim", markup=False, highlight=False)

    def _render(self, block: str) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.console.print(Markdown(as_chat_markdown(block), justify="default"))

    def _raw(self, text: str) -> None:
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.stream.write(text)
            self.stream.flush()
