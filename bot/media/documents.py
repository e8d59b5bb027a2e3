"""Reading a file a person sent as text: text-like files decoded, PDFs through pypdf.

Both run on bytes already within the [media] limits. PDF parsing is CPU work on untrusted input,
so the caller runs it in a thread, and it stops at a page and character budget.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_PDF_PAGES = 300
# pypdf warns about every odd byte of a PDF; one warning per file is what an operator needs.
logging.getLogger("pypdf").setLevel(logging.ERROR)


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


@dataclass(frozen=True)
class PdfText:
    text: str
    pages_read: int
    pages: int
    cut: bool  # stopped at the character or page budget


def read_pdf(data: bytes, max_chars: int) -> PdfText:
    """The text of a PDF, page by page up to `max_chars`; DocumentError when it cannot be read
    (damaged, encrypted) or holds no text (a scan)."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError("it is protected by a password")
        pages = len(reader.pages)
        pieces: list[str] = []
        total = read = 0
        cut = False
        for page in reader.pages:
            if total >= max_chars or read >= MAX_PDF_PAGES:
                cut = True
                break
            text = (page.extract_text() or "").strip()
            read += 1
            if text:
                pieces.append(text)
                total += len(text) + 2
    except DocumentError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        log.info("could not read a PDF: %s: %s", type(exc).__name__, exc)
        raise DocumentError("it could not be read (it may be damaged)") from None
    text = "\n\n".join(pieces)
    if not text.strip():
        raise DocumentError("it holds no text I can read (a scanned PDF is only pictures)")
    if len(text) > max_chars:
        text, cut = text[:max_chars], True
    return PdfText(text, read, pages, cut)
