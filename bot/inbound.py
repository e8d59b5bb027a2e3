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
class Quoted:
    """The message a person replied to, as the platform shows it."""

    # Its platform id, spelt as Inbound.message_id spells them ("<chat>:<message>"); the core
    # reads the bot's own answers from the transcript by it.
    message_id: str | None
    text: str  # the part the person quoted (`partial`), else the message's text ("" unknown)
    author: str = ""  # how its author is named ("" unknown)
    from_bot: bool = False  # the bot's own message
    from_sender: bool = False  # the person's own earlier message
    partial: bool = False  # a quote: the part the person picked, not the whole message


@dataclass(frozen=True)
class Delivered:
    """A receipt, not a message: the answer to the person's message `answered` (its platform
    id) was sent as the messages `ids` (platform ids, spelt alike), so that a later reply to
    one of them finds the answer's text in the transcript."""

    answered: str
    ids: tuple[str, ...]


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
    # False from a client without group chats (the terminal): /help leaves out their commands.
    has_groups: bool = True
    # Where an answer can be sent without this message's own connection (platform ids as text:
    # channel, message replied to, interaction token), so an answer whose `lightgrep ingress`
    # died on its way is still sent, by the next. None: the platform delivers the message again
    # instead (Telegram). Not in repr: an interaction token may answer for 15 minutes.
    destination: dict[str, str] | None = field(default=None, repr=False, hash=False)
    # The message this one replies to (Telegram reply_to_message and its quote, a Discord
    # message reference), None for none: its text goes to the model with this message.
    reply_to: Quoted | None = None
    # Not a message but a receipt (see Delivered): the core notes it and answers nothing.
    delivered: Delivered | None = None
    # The chat, whoever writes in it (bot.keys.chat_key): its settings (bot.chats) are keyed
    # by it. None: the session key (a chat of one person, like the terminal).
    chat_key: str | None = None
    # The platform says the sender may manage this chat (a Telegram administrator, Discord's
    # Manage Server or Manage Channels); always so in a private chat, which is theirs.
    chat_admin: bool = False
    # The chat itself, for a message nobody asks for later (a reminder set here): platform ids
    # as text (Telegram: chat and topic; Discord: channel and guild; the terminal: its user),
    # read back only by that platform's `send_to` (bot.platform.Resender). None: not known.
    place: dict[str, str] | None = field(default=None, hash=False)
    # How the person is named where others read (a reminder sent to a group names them).
    sender_name: str | None = None
