"""Reading a file a person sent as text: text-like files decoded, PDFs through pypdf.

A PDF is untrusted input whose parsing can cost minutes of CPU and hundreds of MB from a file of
a few KB (pages that share one large content stream of empty text). So a PDF is never parsed in
the bot's process: bot/media/sandbox.py runs this file as a child process (`python -I
documents.py …`, see `main`), which limits itself (CPU time, address space, no files, no
children, low priority) before it reads the PDF from stdin, and writes one JSON line per page
as it goes, so that what was read before a kill at the deadline is still used. This module
imports nothing of the project: the child starts with the standard library and pypdf only.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

MAX_PDF_PAGES = 300
# What the child writes on its stdout, one JSON object a line:
READY = "ready"  # {"ready": true}: limits set, reading stdin (the deadline starts)
PAGES = "pages"  # {"pages": N}: the file opened, N pages
PAGE = "page"  # {"page": text}: the next page's text (cut to what the budget leaves)
END = "end"  # {"end": "all" | "budget"}: every page read, or the budget of characters or pages
ERROR = "error"  # {"error": ENCRYPTED | DAMAGED | MEMORY}
ENCRYPTED, DAMAGED, MEMORY = "encrypted", "damaged", "memory"


class DocumentError(Exception):
    """A file that cannot be read as text; the message is meant for the person."""


def read_text(data: bytes) -> str:
    """The text of a text-like file (UTF-8, UTF-16 with a byte-order mark, else Latin-1), or
    DocumentError when it is not text at all (binary data under a text name)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise DocumentError("it is not readable text") from None
    if b"\x00" in data:
        raise DocumentError("it is not text (it holds binary data)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def pdf_lines(
    data: bytes, max_chars: int, max_pages: int = MAX_PDF_PAGES
) -> Iterator[dict[str, Any]]:
    """The child's lines for a PDF after READY: PAGES, a PAGE per page read, then END; or an
    ERROR (damaged, encrypted, out of memory) in their place."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            yield {ERROR: ENCRYPTED}
            return
        yield {PAGES: len(reader.pages)}
        total = 0
        for read, page in enumerate(reader.pages):
            if total >= max_chars or read >= max_pages:
                yield {END: "budget"}
                return
            text = (page.extract_text() or "").strip()[: max_chars - total]
            total += len(text) + 2 if text else 0
            yield {PAGE: text}
    except MemoryError:
        yield {ERROR: MEMORY}
        return
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        log.info("could not read a PDF: %s: %s", type(exc).__name__, exc)
        yield {ERROR: DAMAGED}
        return
    yield {END: "all"}


def _limit_self(cpu_seconds: int, memory_bytes: int) -> None:
    """What the child may use: CPU seconds (then SIGXCPU ends it), address space (then
    MemoryError), no file written, no process started, no core dump; and it yields the CPU to
    the bot (nice 10), whose event loop must not wait for it."""
    import os
    import resource

    limits = [
        (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1),
        (resource.RLIMIT_AS, memory_bytes, memory_bytes),
        (resource.RLIMIT_FSIZE, 0, 0),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NPROC, 0, 0),
    ]
    for which, soft, hard in limits:
        # A system without one (macOS and RLIMIT_AS): the parent's deadline still holds.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (soft, hard))
    os.nice(10)


def main(argv: list[str]) -> int:
    """The child: `documents.py MAX_CHARS MAX_PAGES CPU_SECONDS MEMORY_BYTES`, the PDF on stdin."""
    max_chars, max_pages, cpu_seconds, memory_bytes = (int(value) for value in argv)
    logging.getLogger("pypdf").setLevel(logging.CRITICAL)  # one line per odd byte otherwise
    import pypdf  # noqa: F401  (imported before the limits: starting up is not the file's work)

    _limit_self(cpu_seconds, memory_bytes)
    out = sys.stdout.buffer
    out.write(json.dumps({READY: True}).encode() + b"\n")
    out.flush()
    data = sys.stdin.buffer.read()
    try:
        for line in pdf_lines(data, max_chars, max_pages):
            out.write(json.dumps(line, ensure_ascii=False).encode("utf-8", "replace") + b"\n")
            out.flush()
    except MemoryError:  # while writing a line: the parent takes what it has
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
