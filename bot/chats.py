"""Settings that belong to a chat, not to a person: when the bot speaks in a group, and the
chat's persona. Bot data, never in anyone's workspace (a group's persona is no member's
memory), changed only by the chat's admins or, in a private chat, by its person (bot/commands/
conversation.py decides who may).

Kept in RAM and on disk in one append-only file beside the workspaces (`.chats.jsonl`): a line
per change (`{"chat": key, "settings": {...} | null}`, the last line of a chat winning). WHY not
one JSON object rewritten at each change: with 20,000 chats (48 MB of personas) every /persona
rewrote and fsynced the whole file on the event loop, 1.1-1.6 s during which nobody was
answered. A change is one line, appended (and fsynced) in a thread; the file is rewritten whole
(atomically, in a thread) only when it holds many more lines than chats, and when a /wipe must
take a person's lines off the disk. A crash tears at most the last line, which loading skips;
a rewrite leaves the old file or the new one. The process is the folder's only writer (its
lock): the book is read once and then lives in RAM. An older folder's `.chats.json` (one
object) is read and becomes the log at the first change.

The agent and the adapters of one process share one `ChatBook` per folder (`ChatBook.of`). In
cluster mode the book is the cluster's (bot/cluster/chats.py): the workers change it, the
ingresses (whose adapters decide whether a group message is for the bot) read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from memory.atomic import PRIVATE_FILE_MODE, atomic_write_text
from memory.safefs import append_all, json_records, make_private_dir, open_fd, read_bytes
from memory.threads import in_thread, polite

if TYPE_CHECKING:
    from bot.config import Config
    from bot.inbound import Inbound

log = logging.getLogger(__name__)

CHATS_FILE = ".chats.jsonl"
OLD_CHATS_FILE = ".chats.json"  # one JSON object, rewritten whole (before the log)
SLACK_LINES = 1024  # the log is rewritten once it holds this many lines more than twice the chats
RETRY_S = 1.0  # a write that failed (a full disk) is tried again after this long, then
RETRY_MAX_S = 60.0  # twice as long each time, up to this
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
    model: str | None = None  # the only model answered with here (/model only), None: any


class ChatBook:
    """Every chat's settings: in RAM, and in the log file of the workspaces folder (above).

    `set` and `forget_owner` change the RAM copy at once (every reader sees the change) and
    hand the disk work to a task that writes in a thread; `saved()` waits for it. Subclasses
    that keep the book elsewhere (bot/cluster/chats.py) override `_write` and `_refresh`."""

    _shared: ClassVar[dict[Path, ChatBook]] = {}

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / CHATS_FILE
        self._chats: dict[str, ChatSettings] = {}  # replaced, never changed in place
        self._loaded = False
        self._lines = 0  # lines in the log: when it is due a rewrite
        self._queue: list[bytes] = []  # changed chats' lines, not yet on disk
        self._rewrite_due = False  # the next write rewrites the log whole
        self._queued: asyncio.Future[OSError | None] | None = None  # when the queue is on disk
        self._flight: asyncio.Future[OSError | None] | None = None  # the write under way
        self._saver: asyncio.Task[None] | None = None
        # The people some line of the log names as a chat's owner (a persona reset leaves its
        # text in an earlier line): /wipe rewrites the log when it names them.
        self._owners: set[str] = set()

    @classmethod
    def install(cls, folder: Path, book: ChatBook) -> None:
        """Make `book` this folder's one book (cluster mode: the cluster's, bot/cluster/chats.py),
        before the agent and the adapters ask `of`."""
        cls._shared[Path(folder).absolute()] = book

    @classmethod
    def of(cls, folder: Path) -> ChatBook:
        """The one book of this folder in this process (the agent's and the adapters'), read
        when it is made (at start-up, before anyone is served)."""
        key = Path(folder).absolute()
        book = cls._shared.get(key)
        if book is None:
            book = cls._shared[key] = ChatBook(key)
            book._refresh()
        return book

    def get(self, chat_key: str) -> ChatSettings:
        self._refresh()
        return self._chats.get(chat_key, ChatSettings())

    def set(self, chat_key: str, settings: ChatSettings) -> None:
        """Replace a chat's settings (all defaults: the chat leaves the book)."""
        self._refresh()
        chats = dict(self._chats)
        if settings == ChatSettings(owner=settings.owner):
            chats.pop(chat_key, None)
        else:
            chats[chat_key] = settings
        self._write(chats)

    def forget_owner(self, user_key: str) -> int:
        """/wipe: the private chats' settings of this person go, from the disk too (the log is
        rewritten without their lines); how many."""
        self._refresh()
        kept = {k: v for k, v in self._chats.items() if v.owner != user_key}
        gone = len(self._chats) - len(kept)
        if user_key in self._owners:
            self._owners.discard(user_key)
            self._rewrite_due = True  # (it holds no line of theirs: their chats are gone)
        if gone or self._rewrite_due:
            self._write(kept)
        return gone

    async def saved(self) -> OSError | None:
        """Wait until every change made so far is on disk; the error if writing it failed (the
        change holds in RAM and is tried again, after RETRY_S, then longer)."""
        done = self._queued or self._flight
        return None if done is None else await asyncio.shield(done)

    def _write(self, chats: dict[str, ChatSettings]) -> None:
        old, self._chats = self._chats, chats
        # (by identity: what `set` and `forget_owner` did not touch is the same object)
        get = old.get
        changed = [key for key, value in chats.items() if get(key) is not value]
        changed.extend(old.keys() - chats.keys())
        self._queue.extend(_line(key, chats.get(key)) for key in changed)
        self._owners.update(owner for key in changed if (owner := _owner(chats.get(key))))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a command-line tool): write here and now
            self._save_now()
            return
        if self._queued is None:
            self._queued = loop.create_future()
        if self._saver is None or self._saver.done():
            self._saver = loop.create_task(self._save())

    async def _save(self) -> None:
        """Write what is queued, a batch at a time, in a thread; again after a failure."""
        pause = RETRY_S
        while self._queue or self._rewrite_due:
            lines, self._queue = self._queue, []
            done, self._queued = self._queued, None
            done = self._flight = done or asyncio.get_running_loop().create_future()
            whole = self._rewrite_due or self._lines + len(lines) > 2 * len(self._chats) + (
                SLACK_LINES
            )
            snapshot, self._rewrite_due = self._chats, False  # it holds every queued change
            error: OSError | None = None
            try:
                if whole:
                    await in_thread(partial(self._rewrite, snapshot))
                else:
                    await in_thread(partial(self._append, lines))
            except OSError as exc:
                error = exc
                self._queue[:0] = lines
                self._rewrite_due = self._rewrite_due or whole
            finally:  # (a cancel, at a loop's end, comes once the thread has written)
                self._flight = None
                if not done.done():
                    done.set_result(error)
            if error is not None:
                log.warning("the chats' settings could not be saved (%s); retrying", error)
                await asyncio.sleep(pause)
                pause = min(2 * pause, RETRY_MAX_S)

    def _save_now(self) -> None:
        lines, self._queue = self._queue, []
        if self._rewrite_due or self._lines + len(lines) > 2 * len(self._chats) + SLACK_LINES:
            self._rewrite(self._chats)
            self._rewrite_due = False
        else:
            self._append(lines)

    def _append(self, lines: list[bytes]) -> None:
        """Append the lines (in a thread): whole, or nothing; on a line of their own after a
        torn one; fsynced, as the answer says the change is made."""
        make_private_dir(self.path.parent)
        data = b"".join(lines)
        fd = open_fd(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            append_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._lines += len(lines)

    def _rewrite(self, chats: dict[str, ChatSettings]) -> None:
        """The log whole (in a thread): a line per chat, replaced atomically; an older folder's
        `.chats.json` goes once the log holds its chats."""
        make_private_dir(self.path.parent)
        data = b"".join(_line(key, chats[key]) for key in polite(sorted(chats)))
        atomic_write_text(self.path, data)
        self._lines = len(chats)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path.with_name(OLD_CHATS_FILE))

    def _refresh(self) -> None:
        """Read the book, once: this process is the folder's only writer."""
        if self._loaded:
            return
        self._loaded = True
        try:
            data = read_bytes(self.path)
        except FileNotFoundError:
            self._chats = _read_old(self.path.with_name(OLD_CHATS_FILE))
            self._owners = {owner for value in self._chats.values() if (owner := value.owner)}
            self._rewrite_due = bool(self._chats)  # becomes the log at the first change
            return
        except OSError as exc:
            log.warning(
                "%s cannot be read (%s); every chat has the default settings", self.path, exc
            )
            self._rewrite_due = True  # never appended to: the next change replaces it
            return
        self._chats, self._lines, self._owners = _read_log(data.split(b"\n"))
        if self.path.with_name(OLD_CHATS_FILE).exists():  # a crash after the log was written
            self._rewrite_due = True


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
    if settings.model:
        plain["model"] = settings.model
    return plain


def _line(chat_key: str, settings: ChatSettings | None) -> bytes:
    """One change of the log. ASCII (\\u escapes), so any text, lone surrogates too, reads back."""
    record = {"chat": chat_key, "settings": None if settings is None else plain(settings)}
    return json.dumps(record).encode("ascii") + b"\n"


def _owner(settings: ChatSettings | None) -> str | None:
    return None if settings is None else settings.owner


def _read_log(lines: Iterable[bytes]) -> tuple[dict[str, ChatSettings], int, set[str]]:
    """The chats the log's lines leave (a torn or foreign line is skipped), how many lines,
    and the owners they name."""
    chats: dict[str, ChatSettings] = {}
    owners: set[str] = set()
    whole = [line for line in lines if line.strip()]
    for _, record in json_records(whole):
        key = record.get("chat")
        if not isinstance(key, str) or "settings" not in record:
            continue
        value = record["settings"]
        if isinstance(value, dict):
            chats[key] = settings = settings_of(value)
            if settings.owner:
                owners.add(settings.owner)
        else:
            chats.pop(key, None)
    return chats, len(whole), owners


def _read_old(path: Path) -> dict[str, ChatSettings]:
    """An older folder's `.chats.json`; what is not as it was written is left out (defaults)."""
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
    persona, owner, model = value.get("persona"), value.get("owner"), value.get("model")
    return ChatSettings(
        model=model if isinstance(model, str) and model else None,
        trigger=trigger if trigger in TRIGGERS else None,
        words=tuple(str(w) for w in words) if isinstance(words, list) else (),
        persona=persona if isinstance(persona, str) and persona else None,
        owner=owner if isinstance(owner, str) else None,
    )


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
