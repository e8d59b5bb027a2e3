"""Settings that belong to a chat, not to a person: when the bot speaks in a group, and the
chat's persona. Bot data, never in anyone's workspace (a group's persona is no member's
memory), changed only by the chat's admins or, in a private chat, by its person (bot/commands/
conversation.py decides who may).

One JSON object beside the workspaces (`.chats.json`), chat key → its settings, replaced
atomically: a crash leaves the old settings or the new ones. The agent and the adapters of one
process share one `ChatBook` per folder (`ChatBook.of`); a change made by another process on the
same folder is read when the file's stamp changes, so no reader is ever stale for long. In
cluster mode the book is the cluster's (bot/cluster/chats.py): the workers change it, the
ingresses (whose adapters decide whether a group message is for the bot) read it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from memory.atomic import atomic_write_text
from memory.safefs import make_private_dir, read_bytes

if TYPE_CHECKING:
    from bot.config import Config
    from bot.inbound import Inbound

log = logging.getLogger(__name__)

CHATS_FILE = ".chats.json"
TRIGGERS = ("mention", "always", "keyword")
MAX_WORDS = 20
MAX_WORD_CHARS = 40
MAX_PERSONA_CHARS = 2000


@dataclass(frozen=True)
class ChatSettings:
    """One chat's choices; None or empty: the bot's defaults ([agent])."""

    trigger: str | None = None  # one of TRIGGERS
    words: tuple[str, ...] = ()  # the keyword trigger's words
    persona: str | None = None  # extra instructions for the model in this chat
    owner: str | None = None  # a private chat's person (user key): /wipe removes it with them


class ChatBook:
    """Every chat's settings, kept in one file of the workspaces folder."""

    _shared: ClassVar[dict[Path, ChatBook]] = {}

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / CHATS_FILE
        self._chats: dict[str, ChatSettings] = {}
        self._stamp: tuple[int, int, int] | None = None

    @classmethod
    def install(cls, folder: Path, book: ChatBook) -> None:
        """Make `book` this folder's one book (cluster mode: the cluster's, bot/cluster/chats.py),
        before the agent and the adapters ask `of`."""
        cls._shared[Path(folder).absolute()] = book

    @classmethod
    def of(cls, folder: Path) -> ChatBook:
        """The one book of this folder in this process (the agent's and the adapters')."""
        key = Path(folder).absolute()
        book = cls._shared.get(key)
        if book is None:
            book = cls._shared[key] = ChatBook(key)
        return book

    def get(self, chat_key: str) -> ChatSettings:
        self._refresh()
        return self._chats.get(chat_key, ChatSettings())

    def set(self, chat_key: str, settings: ChatSettings) -> None:
        """Replace a chat's settings (all defaults: the chat leaves the file)."""
        self._refresh()
        chats = dict(self._chats)
        if settings == ChatSettings(owner=settings.owner):
            chats.pop(chat_key, None)
        else:
            chats[chat_key] = settings
        self._write(chats)

    def forget_owner(self, user_key: str) -> int:
        """/wipe: the private chats' settings of this person go; how many."""
        self._refresh()
        kept = {k: v for k, v in self._chats.items() if v.owner != user_key}
        gone = len(self._chats) - len(kept)
        if gone:
            self._write(kept)
        return gone

    def _write(self, chats: dict[str, ChatSettings]) -> None:
        body = {key: plain(value) for key, value in sorted(chats.items())}
        make_private_dir(self.path.parent)
        atomic_write_text(self.path, json.dumps(body, indent=1, ensure_ascii=False) + "\n")
        self._chats = chats
        self._stamp = _stamp(self.path)

    def _refresh(self) -> None:
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        self._chats = {} if stamp is None else _read(self.path)


def wanted(
    settings: ChatSettings,
    default_trigger: str,
    default_words: list[str] | tuple[str, ...],
    *,
    addressed: bool,
    text: str,
) -> bool:
    """Whether the bot answers a group message: `addressed` is today's rule (an @mention, a
    reply to the bot, a command), which every mode answers."""
    trigger = settings.trigger or default_trigger
    if addressed or trigger == "always":
        return True
    if trigger != "keyword":
        return False
    words = settings.words if settings.trigger == "keyword" else tuple(default_words)
    return any(_holds(text, word) for word in words)


def _holds(text: str, word: str) -> bool:
    """The word (or phrase) in the text, any case, as a whole word."""
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) is not None


def clean_words(words: list[str]) -> tuple[str, ...] | str:
    """A keyword trigger's words, checked; or what is wrong with them, for the person."""
    kept: list[str] = []
    for word in words:
        word = word.strip().strip('"').strip()
        if not word:
            continue
        if len(word) > MAX_WORD_CHARS:
            return f"A keyword may have at most {MAX_WORD_CHARS} characters."
        if word.lower() not in (k.lower() for k in kept):
            kept.append(word)
    if not kept:
        return "Name at least one word, e.g. /group trigger keyword lightgrep bot."
    if len(kept) > MAX_WORDS:
        return f"At most {MAX_WORDS} keywords."
    return tuple(kept)


def plain(settings: ChatSettings) -> dict[str, Any]:
    plain: dict[str, Any] = {}
    if settings.trigger:
        plain["trigger"] = settings.trigger
    if settings.words:
        plain["words"] = list(settings.words)
    if settings.persona:
        plain["persona"] = settings.persona
    if settings.owner:
        plain["owner"] = settings.owner
    return plain


def _read(path: Path) -> dict[str, ChatSettings]:
    """The file's chats; what is not as this module writes it is left out (the defaults)."""
    try:
        data = json.loads(read_bytes(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s cannot be read (%s); every chat has the default settings", path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(key): settings_of(value) for key, value in data.items() if isinstance(value, dict)}


def settings_of(value: dict[str, Any]) -> ChatSettings:
    """One chat's settings as this module writes them (`plain`); anything else: the default."""
    trigger = value.get("trigger")
    words = value.get("words")
    persona, owner = value.get("persona"), value.get("owner")
    return ChatSettings(
        trigger=trigger if trigger in TRIGGERS else None,
        words=tuple(str(w) for w in words) if isinstance(words, list) else (),
        persona=persona if isinstance(persona, str) and persona else None,
        owner=owner if isinstance(owner, str) else None,
    )


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is replaced (inode, size, mtime), None when it is absent."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def chat_of(inbound: Inbound) -> str:
    """The key of the chat a message was written in (a chat of one: its session key)."""
    return inbound.chat_key or inbound.session_key


class Speaking:
    """When the bot speaks in a group chat: the chat's own choice (/group trigger), else the
    operator's ([agent] group_trigger, group_keywords). Adapters ask it before anything shows
    in the chat, so a message not for the bot costs neither a turn nor a "typing…"."""

    def __init__(self, book: ChatBook, trigger: str = "mention", words: tuple[str, ...] = ()):
        self.book = book
        self.trigger = trigger
        self.words = words

    @classmethod
    def from_config(cls, config: Config) -> Speaking:
        agent = config.agent
        book = ChatBook.of(config.memory.workspaces_dir)
        return cls(book, agent.group_trigger, tuple(agent.group_keywords))

    def wanted(self, chat_key: str, *, addressed: bool, text: str) -> bool:
        return wanted(
            self.book.get(chat_key), self.trigger, self.words, addressed=addressed, text=text
        )
