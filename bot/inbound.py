"""What an adapter hands the core (the answer goes back through bot.outbound).

Plain data only (strings, numbers, bytes), so an Inbound can cross a message broker: an
attachment arrives already downloaded by the adapter (within the limits of bot.media.rules), never
as a
platform object or a link to fetch later.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Attachment:
    """One picture, voice message, audio or file of a message (kinds: bot.media.rules)."""

    kind: str  # bot.media.rules: "image", "audio", "text", "pdf" or "other"
    mime: str  # as the platform reports it (the core checks pictures by their bytes)
    name: str  # the file name, or one made up from the kind ("photo.jpg", "voice.ogg")
    size: int | None  # bytes, as the platform reports it (None: not reported)
    data: bytes | None = None  # None: not downloaded; `skipped` says why
    skipped: str | None = None  # bot.media.rules: TOO_LARGE, TOO_MANY, UNSUPPORTED or UNAVAILABLE
    limit: int | None = None  # TOO_LARGE: the most that could be downloaded, in bytes
    voice: bool = False  # a voice message (recorded in the chat), not an audio file
    seconds: float | None = None  # length of audio, as the platform reports it


@dataclass(frozen=True)
class Inbound:
    """One user message, already translated out of its platform."""

    platform: str  # "telegram", "discord", "cli"
    session_key: str  # e.g. "telegram:dm:42"; see bot.keys
    user_key: str  # e.g. "telegram-42"; owns the workspace
    text: str  # the text, or the caption of the attachments
    is_private: bool = True
    # The platform's id of this message (e.g. "<chat>:<message>"), so a message redelivered
    # after a crash is recognised instead of persisted and answered twice.
    message_id: str | None = None
    attachments: tuple[Attachment, ...] = ()
    # Lines this client adds under /help about its own keys (the terminal's /quit, Ctrl-C).
    help_notes: tuple[str, ...] = ()
    # Where an answer can be sent without this message's own connection (platform ids as text:
    # channel, message replied to, interaction token), so an answer whose `lightgrep ingress`
    # died on its way is still sent, by the next. None: the platform delivers the message again
    # instead (Telegram). Not in repr: an interaction token may answer for 15 minutes.
    destination: dict[str, str] | None = field(default=None, repr=False, hash=False)
