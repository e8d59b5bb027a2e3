"""Small, valid media for tests: pictures, a PDF with real text, audio bytes, and readers of what
the bot kept (media/ files, the transcript's references)."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path
from typing import Any


def jpeg(seed: int = 0) -> bytes:
    """Bytes that start and end like a JPEG (what the bot and the fake check), `seed` makes them
    differ."""
    return b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes([seed % 256]) * 64 + b"\xff\xd9"


def png(seed: int = 0, width: int = 2, height: int = 2) -> bytes:
    """A real PNG of one colour."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes([seed % 256, 0, 0]) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def pdf(*pages: str) -> bytes:
    """A real PDF, one page per string, its text in Helvetica (pypdf extracts it)."""
    count = len(pages)
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(count))
        + b"] /Count %d >>" % count,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for number, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        content = b"BT /F1 12 Tf 72 720 Td (" + escaped.encode("latin-1") + b") Tj ET"
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % (5 + 2 * number)
        )
        objects.append(
            b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream"
        )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for index, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % index + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def ogg(seed: int = 0) -> bytes:
    """Bytes that start like an OGG file (the fake transcriber does not decode audio)."""
    return b"OggS\x00\x02" + bytes([seed % 256]) * 200


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def media_files(home: Path) -> list[Path]:
    """The files kept in a workspace's media/ folder."""
    folder = home / "media"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def refs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every media reference part in a session's records."""
    return [
        part
        for record in records
        if isinstance(record.get("content"), list)
        for part in record["content"]
        if isinstance(part, dict) and str(part.get("type", "")).endswith("_ref")
    ]


def session_file_text(home: Path) -> str:
    return "".join(p.read_text("utf-8") for p in (home / "sessions").glob("*.jsonl"))


def user_texts(request: dict[str, Any]) -> list[str]:
    """The text of every user message of a chat request (parts joined)."""
    texts = []
    for message in request["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if p.get("type") == "text")
        texts.append(content)
    return texts


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _pdf_of(contents: list[bytes]) -> bytes:
    """A PDF with one page per content stream (Helvetica as /F1); equal streams are one object
    that the pages share, as a hostile file does to stay small."""
    import io

    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    resources = DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
    streams: dict[bytes, Any] = {}
    for content in contents:
        if content not in streams:
            stream = DecodedStreamObject()
            stream.set_data(content)
            streams[content] = writer._add_object(stream.flate_encode())
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Contents")] = streams[content]
        page[NameObject("/Resources")] = resources
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def slow_pdf(pages: int = 60, runs: int = 20_000, *, first: tuple[str, ...] = ()) -> bytes:
    """A hostile PDF of a few KB: after the pages of text `first`, `pages` pages share one
    content stream of `runs` empty text runs (`[( )] TJ`), so pypdf spends about half a second
    a page (here) and finds only whitespace: no budget of characters ever stops it."""
    texts = [b"BT /F1 12 Tf 72 720 Td (" + text.encode("latin-1") + b") Tj ET" for text in first]
    slow = b"BT /F1 12 Tf " + b"[( )] TJ " * runs + b"ET"
    return _pdf_of(texts + [slow] * pages)


def bulky_pdf(megabytes: int = 60) -> bytes:
    """A PDF of some 60 KB whose one page's content inflates to `megabytes` MB of spaces."""
    return _pdf_of([b"BT /F1 12 Tf " + b" " * (megabytes * 1_000_000) + b"ET"])
