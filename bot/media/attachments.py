"""A message's attachments, made into what the model reads and what the person is told.

Pictures are kept in the workspace (memory/media.py) and referenced from the message; voice
messages and audio are kept and transcribed, the transcript becoming the user's words, marked
as spoken; text files and PDFs are kept and read as text with their file name (PDFs in a child
process: bot/media/sandbox.py). Whatever cannot be used gets one plain sentence (a note, said
after the answer): too large, not supported, not transcribed. Nothing the person sent and the
bot received is dropped: kept audio that could not be transcribed is saved with a message
saying so, and can be transcribed by hand later.

`prepare` reads; `keep` writes the files, once the message is accepted: a message refused as
too long leaves nothing in media/. A file's name reaches the prompt and the notes only as
`plain_name` makes it (one line, no control or direction characters, no brackets), so it cannot
fake the `[file: …]` markers around the file's text; nor can the text itself: a line of it that
would read as a marker (`[end of file: …]`, then words "outside" the file) has its bracket made a
parenthesis (`_inert`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from bot import logsafe
from bot.inbound import Attachment, Inbound
from bot.media.documents import DocumentError, read_text
from bot.media.rules import (
    AUDIO,
    AUDIO_SUFFIXES,
    IMAGE,
    PDF,
    SUPPORTED,
    TEXT,
    TOO_LARGE,
    TOO_MANY,
    UNAVAILABLE,
    MediaRules,
    extension,
    sniff_image,
)
from bot.media.sandbox import PdfSandbox
from bot.media.threads import off_loop
from bot.media.transcribe import Transcriber, TranscriptionError
from memory.media import AUDIO_REF, FILE_REF, IMAGE_REF, MediaStore, content_hash, media_ref
from memory.text import plain_name

log = logging.getLogger(__name__)

CANNOT_SEE = "(I can't see pictures, so I only read the text of your message.)"
CANNOT_SEE_ALONE = (
    "I can't see pictures, sorry. Your picture is saved; tell me in words what it shows and "
    "I'll gladly help."
)
NOT_SET_UP = (
    "I can't listen to voice messages here: transcription is not set up. Your {what} is saved; "
    "could you type what it says?"
)
NOT_TRANSCRIBED = (
    "I couldn't transcribe your {what} just now. It is saved; please try again in a moment, "
    "or type what it says."
)
NO_WORDS = "I couldn't make out any words in your {what}. It is saved; could you type it?"
TOO_LONG = (
    "Your {what} is {length} long; I can transcribe up to {limit}. It is saved; could you send "
    "a shorter one, or type it?"
)


@dataclass
class Prepared:
    """The user message's parts, and what to tell the person besides the answer."""

    text: str  # what the model reads: the text or caption, transcripts, files' text
    parts: list[dict[str, Any]] = field(default_factory=list)  # media references
    notes: list[str] = field(default_factory=list)
    for_model: bool = False  # there is something the model can answer
    files: list[tuple[bytes, str, str]] = field(default_factory=list)  # to keep: data, ext, sha


class AttachmentReader:
    """Turns an Inbound's attachments into a Prepared message, within the configured limits."""

    def __init__(
        self,
        rules: MediaRules,
        transcriber: Transcriber | None,
        *,
        vision: bool,
        max_seconds: float,
    ) -> None:
        self.rules = rules
        self.transcriber = transcriber
        self.vision = vision  # until stop_pictures()
        self.max_seconds = max_seconds
        self.pdfs = PdfSandbox(
            seconds=rules.pdf_seconds,
            memory_bytes=rules.pdf_memory_bytes,
            seconds_per_hour=rules.pdf_seconds_per_hour,
        )

    def stop_pictures(self) -> None:
        """The model turned out not to see: pictures go to it as text from now on, and people
        are told so with each new picture, as with [llm] vision = false."""
        self.vision = False

    def stop(self) -> None:
        """The bot is stopping: PDFs being read are given up (their turns are told so)."""
        self.pdfs.stop()

    async def keep(self, prepared: Prepared, store: MediaStore) -> None:
        """Write the message's files to media/, off the loop (OSError: one could not be kept;
        LinkRefusedError: a planted link)."""
        files, prepared.files = prepared.files, []
        if files:
            await off_loop(lambda: [store.put(data, ext, digest) for data, ext, digest in files])

    async def prepare(self, inbound: Inbound) -> Prepared:
        """Read every attachment; what is to be kept waits in `files` for `keep`."""
        texts = [inbound.text.strip()] if inbound.text.strip() else []
        prepared = Prepared("", for_model=bool(texts))
        caption = inbound.text.strip()[:500]
        left_out = 0
        images = 0
        for attachment in inbound.attachments:
            if attachment.skipped == TOO_MANY:
                left_out += 1
            elif attachment.skipped is not None or attachment.data is None:
                prepared.notes.append(_skipped(attachment, self.rules))
            elif attachment.kind == IMAGE:
                images += await self._image(attachment, attachment.data, caption, prepared)
            elif attachment.kind == AUDIO:
                texts.append(await self._audio(attachment, attachment.data, prepared))
            elif attachment.kind in (TEXT, PDF):
                text = await self._document(inbound, attachment, attachment.data, prepared)
                if text:
                    texts.append(text)
        if left_out:
            prepared.notes.append(
                f"I take at most {self.rules.max_images_per_message} pictures per message, so I "
                f"left out {left_out}."
            )
        if images and not self.vision:
            prepared.notes.append(CANNOT_SEE if prepared.for_model else CANNOT_SEE_ALONE)
        prepared.text = "\n\n".join(texts)
        return prepared

    async def _image(
        self, attachment: Attachment, data: bytes, caption: str, into: Prepared
    ) -> int:
        mime = sniff_image(data)
        if mime is None:
            into.notes.append(
                f"{plain_name(attachment.name)} doesn't look like a picture I can read "
                "(JPEG, PNG, WebP or GIF)."
            )
            return 0
        ext = extension(mime, attachment.name)
        digest = await _to_keep(data, ext, into)
        into.parts.append(media_ref(IMAGE_REF, digest, ext, mime, attachment.name, caption=caption))
        into.for_model = into.for_model or self.vision
        return 1

    async def _audio(self, attachment: Attachment, data: bytes, into: Prepared) -> str:
        """The message's line for the audio: its transcript, or why there is none."""
        ext = extension(attachment.mime, attachment.name)
        digest = await _to_keep(data, ext, into)
        into.parts.append(
            media_ref(
                AUDIO_REF,
                digest,
                ext,
                attachment.mime,
                attachment.name,
                seconds=attachment.seconds,
                voice=attachment.voice or None,
            )
        )
        what = "voice message" if attachment.voice else "audio"
        label = what if attachment.voice else f"audio {plain_name(attachment.name)}"
        if attachment.seconds:
            label += f", {_duration(attachment.seconds)}"
        transcript, note = await self._transcript(attachment, data, ext, what)
        if transcript is None:
            into.notes.append(note)
            return f"[{label}: not transcribed]"
        into.for_model = True
        return f"[{label}] {transcript}"

    async def _transcript(
        self, attachment: Attachment, data: bytes, ext: str, what: str
    ) -> tuple[str | None, str]:
        if self.transcriber is None:
            return None, NOT_SET_UP.format(what=what)
        if attachment.seconds and attachment.seconds > self.max_seconds:
            return None, TOO_LONG.format(
                what=what,
                length=_duration(attachment.seconds),
                limit=_duration(self.max_seconds),
            )
        name = attachment.name
        if PurePosixPath(name).suffix.lower().lstrip(".") not in AUDIO_SUFFIXES:
            name = f"audio.{ext}"
        try:
            text = await self.transcriber.transcribe(data, name, attachment.mime)
        except TranscriptionError as exc:
            log.warning("transcription failed: %s", logsafe.mask(str(exc)))
            return None, NOT_TRANSCRIBED.format(what=what)
        if not text:
            return None, NO_WORDS.format(what=what)
        return text, ""

    async def _document(
        self, inbound: Inbound, attachment: Attachment, data: bytes, into: Prepared
    ) -> str | None:
        """The file's text with its name around it; None (and a note) if it has none."""
        name = plain_name(attachment.name)
        header = f"[file: {name}]"
        try:
            if attachment.kind == PDF:
                max_chars = self.rules.max_text_file_bytes
                pdf = await self.pdfs.read(data, max_chars, inbound.user_key)
                text = pdf.text
                header = f"[file: {name}, PDF, {pdf.pages} page{'s' * (pdf.pages != 1)}]"
                if pdf.slow:
                    into.notes.append(
                        f"(Reading {name} took too long, so I read only the first "
                        f"{pdf.pages_read} of its {pdf.pages} pages.)"
                    )
                elif pdf.cut:
                    into.notes.append(
                        f"({name} is long: I read only the first {pdf.pages_read} of its "
                        f"{pdf.pages} pages.)"
                    )
            else:
                text = read_text(data)
        except DocumentError as exc:
            into.notes.append(f"I couldn't read {name}: {exc}.")
            return None
        ext = extension(attachment.mime, attachment.name)
        digest = await _to_keep(data, ext, into)
        into.parts.append(media_ref(FILE_REF, digest, ext, attachment.mime, attachment.name))
        into.for_model = True
        return f"{header}\n{_inert(text)}\n[end of file: {name}]"


# A line that a model would take for one of the markers around a file's text: "[file: …",
# "[end of file: …", whatever the case and spacing. Line starts as str.splitlines sees them.
_MARKER_LINE = re.compile(
    r"(\A|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029])([^\S\n]*)\[(?=\s*(?:end\s+of\s+)?file\b)",
    re.IGNORECASE,
)


def _inert(text: str) -> str:
    """A file's text that cannot end its own `[file: …]` block early: see the module docstring."""
    return _MARKER_LINE.sub(r"\1\2(", text)


async def _to_keep(data: bytes, ext: str, into: Prepared) -> str:
    """The file's sha256 (hashed off the loop), the file waiting in `into` for `keep`."""
    digest = await off_loop(lambda: content_hash(data))
    into.files.append((data, ext, digest))
    return digest


def _skipped(attachment: Attachment, rules: MediaRules) -> str:
    """Why an attachment was not downloaded, in one sentence."""
    name = plain_name(attachment.name)
    if attachment.skipped == TOO_LARGE:
        limit = attachment.limit or rules.max_bytes(attachment.kind)
        what = _NOUNS.get(attachment.kind, "files")
        limit_text = _megabytes(limit)
        if not attachment.size:  # its size was not said, or said wrong: stopped at the limit
            return (
                f"{name} is larger than {limit_text}, the most I take for {what}, so I stopped "
                "downloading it."
            )
        size = _megabytes(attachment.size)
        return f"{name} is {size}; I can take {what} up to {limit_text}, so I didn't download it."
    if attachment.skipped == UNAVAILABLE:
        return f"I couldn't download {name}; could you send it again?"
    return f"I can't read {name}: I understand {SUPPORTED}."


_NOUNS = {IMAGE: "pictures", AUDIO: "audio", TEXT: "text files", PDF: "PDFs"}


def _megabytes(size: int | None) -> str:
    size = size or 0
    if size < 1_000_000:
        return f"{max(1, round(size / 1000))} KB"
    return f"{size / 1_000_000:.1f} MB".replace(".0 MB", " MB")


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60}:{seconds % 60:02d} min"
