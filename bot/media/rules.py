"""Which attachments the bot takes, and within which limits: decided here, once, for every platform.

An adapter lists what a message carries (a `Candidate`: type, name, the size the platform
reports, and how to download it) and hands the list to `collect`, which downloads only what will
be used, checking each size before downloading (Telegram's cloud Bot API serves at most 20 MB,
and a file the bot would refuse anyway is not worth fetching). A reported size may be missing or
a lie, so a download is also told the limit and stops once more bytes come (`read_within`):
the bot never holds more of a file than it would keep. The result is plain data
(bot.inbound.Attachment) for the core, which answers for what was skipped
(bot/media/attachments.py).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from bot.inbound import Attachment

if TYPE_CHECKING:
    from bot.config import Config

log = logging.getLogger(__name__)

IMAGE, AUDIO, TEXT, PDF, OTHER = "image", "audio", "text", "pdf", "other"
EXPORT = "export"  # a file sent with /import: another service's export, not read as a message
# Why an attachment was not downloaded (Attachment.skipped).
TOO_LARGE, TOO_MANY = "too_large", "too_many"
UNSUPPORTED, UNAVAILABLE = "unsupported", "unavailable"

# The picture formats OpenAI-compatible vision models take.
IMAGE_TYPES = {"image/jpeg": "jpg", "image/png": "png", "image/gif": "gif", "image/webp": "webp"}
AUDIO_TYPES = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mp4": "m4a",
    "audio/m4a": "m4a",
    "audio/x-m4a": "m4a",
    "audio/aac": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
    "audio/x-flac": "flac",
}
AUDIO_SUFFIXES = {"ogg", "oga", "opus", "mp3", "m4a", "wav", "webm", "flac", "mpga", "mpeg"}
TEXT_TYPES = {
    "application/json",
    "application/ld+json",
    "application/x-ndjson",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/javascript",
    "application/x-javascript",
    "application/typescript",
    "application/sql",
    "application/x-sh",
    "application/x-python",
    "application/x-python-code",
    "application/csv",
}
TEXT_SUFFIXES = {
    "txt", "md", "markdown", "rst", "org", "tex", "log", "csv", "tsv", "json", "jsonl", "ndjson",
    "xml", "yaml", "yml", "toml", "ini", "cfg", "conf", "env", "properties", "html", "htm", "css",
    "scss", "py", "pyi", "js", "mjs", "cjs", "ts", "tsx", "jsx", "go", "rs", "c", "h", "cc", "cpp",
    "hpp", "cs", "java", "kt", "kts", "scala", "swift", "m", "rb", "php", "pl", "lua", "r", "jl",
    "hs", "ml", "ex", "exs", "erl", "clj", "dart", "sh", "bash", "zsh", "fish", "ps1", "bat",
    "sql", "graphql", "proto", "gradle", "cmake", "mk", "dockerfile", "vue", "svelte", "srt",
    "vtt", "diff", "patch",
}  # fmt: skip
SUPPORTED = (
    "pictures (JPEG, PNG, WebP, GIF), voice messages and audio, text files (plain text, "
    "Markdown, CSV, JSON, source code) and PDFs"
)


def kind_of(mime: str, name: str) -> str:
    """IMAGE, AUDIO, TEXT, PDF or OTHER, from the type the platform reports and the file name
    (platforms often say application/octet-stream for a file they do not know)."""
    mime = (mime or "").split(";")[0].strip().lower()
    suffix = PurePosixPath(name or "").suffix.lower().lstrip(".")
    if mime in IMAGE_TYPES:
        return IMAGE
    if mime.startswith("audio/") or (
        mime in ("", "application/octet-stream", "video/ogg") and suffix in AUDIO_SUFFIXES
    ):
        return AUDIO
    if mime == "application/pdf" or suffix == "pdf":
        return PDF
    if mime.startswith("text/") or mime in TEXT_TYPES or suffix in TEXT_SUFFIXES:
        return TEXT
    if (name or "").lower() in ("dockerfile", "makefile", "readme", "license"):
        return TEXT
    return OTHER


def extension(mime: str, name: str) -> str:
    """The extension a stored file gets: from its type, else from its name, else "bin"."""
    mime = (mime or "").split(";")[0].strip().lower()
    known = IMAGE_TYPES.get(mime) or AUDIO_TYPES.get(mime)
    if known:
        return known
    if mime == "application/pdf":
        return "pdf"
    suffix = PurePosixPath(name or "").suffix.lower().lstrip(".")
    if suffix.isascii() and suffix.isalnum() and len(suffix) <= 8:
        return suffix
    return "txt" if mime.startswith("text/") else "bin"


def sniff_image(data: bytes) -> str | None:
    """The picture's real type from its first bytes (what the platform reports may be wrong,
    and the model is told the type in the data URL); None: not a picture the model takes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True)
class MediaRules:
    """The [media] and [transcription] limits, in bytes (see config.example.toml)."""

    max_image_bytes: int = 10_000_000
    max_images_per_message: int = 4
    max_text_file_bytes: int = 100_000
    max_pdf_bytes: int = 10_000_000
    max_audio_bytes: int = 20_000_000
    max_import_bytes: int = 20_000_000  # a file sent with /import (bot/commands/importing.py)
    # Reading one PDF (bot/media/sandbox.py): seconds, address space, a person's seconds per hour.
    pdf_seconds: float = 15.0
    pdf_memory_bytes: int = 400_000_000
    pdf_seconds_per_hour: float = 120.0

    @classmethod
    def from_config(cls, config: Config) -> MediaRules:
        media = config.media
        return cls(
            max_image_bytes=media.max_image_bytes,
            max_images_per_message=media.max_images_per_message,
            max_text_file_bytes=media.max_text_file_bytes,
            max_pdf_bytes=media.max_pdf_bytes,
            max_audio_bytes=config.transcription.max_bytes,
            max_import_bytes=media.max_import_bytes,
            pdf_seconds=media.pdf_seconds,
            pdf_memory_bytes=media.pdf_memory_bytes,
            pdf_seconds_per_hour=media.pdf_seconds_per_hour,
        )

    def max_bytes(self, kind: str) -> int:
        """The largest attachment of a kind worth downloading (0: none at all)."""
        return {
            IMAGE: self.max_image_bytes,
            AUDIO: self.max_audio_bytes,
            TEXT: self.max_text_file_bytes,
            PDF: self.max_pdf_bytes,
        }.get(kind, 0)


class TooLarge(Exception):
    """A download brought more bytes than its limit, and was stopped there."""


async def read_within(
    chunks: AsyncIterable[bytes], limit: int, declared: int | None = None
) -> bytes:
    """The bytes of a download as they come, at most `limit` of them: TooLarge as soon as more
    come, or at once when the server declares more (`declared`: its Content-Length)."""
    if declared is not None and declared > limit:
        raise TooLarge
    body = bytearray()
    async for chunk in chunks:
        if len(body) + len(chunk) > limit:
            raise TooLarge
        body += chunk
    return bytes(body)


@dataclass(frozen=True)
class Candidate:
    """An attachment as an adapter finds it in a message, not downloaded yet."""

    mime: str
    name: str
    size: int | None  # as the platform reports it
    # Downloads at most `limit` bytes (read_within), raising TooLarge past them.
    download: Callable[[int], Awaitable[bytes]]
    voice: bool = False
    seconds: float | None = None


async def collect(
    candidates: Sequence[Candidate],
    rules: MediaRules,
    platform_limit: int | None = None,
    *,
    importing: bool = False,
) -> tuple[Attachment, ...]:
    """Download what will be used, within the limits (`platform_limit`: the most the platform
    lets a bot download); everything else comes back with the reason it was skipped.
    `importing`: the message is /import, and a file (a zip or JSON) is its export, taken up to
    [media] max_import_bytes."""
    attachments = []
    images = 0
    for candidate in candidates:
        kind = kind_of(candidate.mime, candidate.name)
        limit = rules.max_bytes(kind)
        if importing and kind in (TEXT, OTHER):
            kind, limit = EXPORT, rules.max_import_bytes
        if platform_limit is not None:
            limit = min(limit, platform_limit)
        skipped: str | None = None
        if kind == OTHER:
            skipped = UNSUPPORTED
        elif kind == IMAGE and images >= rules.max_images_per_message:
            skipped = TOO_MANY
        elif candidate.size is not None and candidate.size > limit:
            skipped = TOO_LARGE
        images += kind == IMAGE and skipped is None
        data = None
        size = candidate.size
        if skipped is None:
            try:
                data = await _download(candidate, limit)
            except TooLarge:  # the platform did not say, or said less: stopped at the limit
                size, skipped = None, TOO_LARGE
            else:
                skipped = UNAVAILABLE if data is None else None
                size = size if data is None else len(data)
        attachments.append(
            Attachment(
                kind=kind,
                mime=candidate.mime,
                name=candidate.name,
                size=size,
                data=data,
                skipped=skipped,
                limit=limit if skipped == TOO_LARGE else None,
                voice=candidate.voice,
                seconds=candidate.seconds,
            )
        )
    return tuple(attachments)


async def _download(candidate: Candidate, limit: int) -> bytes | None:
    """The bytes, or None when the download failed; TooLarge when more came than `limit`."""
    try:
        data = bytes(await candidate.download(limit))
    except TooLarge:
        log.info("stopped downloading an attachment (%s) at its limit", candidate.mime)
        raise
    except Exception as exc:  # the platform's own errors: one attachment lost, not the turn
        log.warning("could not download an attachment (%s): %s", candidate.mime, type(exc).__name__)
        return None
    if len(data) > limit:  # a download that did not keep to it
        raise TooLarge
    return data
