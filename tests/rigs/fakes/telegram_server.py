"""A small Telegram Bot API server on 127.0.0.1 for tests: the far end, never our code.

It speaks what python-telegram-bot uses (TESTING.md): `POST /bot<token>/<method>` with form fields,
answers `{"ok": true, "result": …}` or `{"ok": false, "error_code", "description"}`. Tests push
updates (`dm`, `group`, `edited`, `photo`); `getUpdates` works like Telegram's: it forgets every
update below `offset` (the bot's acknowledgement, recorded in `acked_offset`), hands out at most
`limit` of the rest, long-polling until one arrives; `redeliver` plays a lost acknowledgement.
`sendMessage` checks what Telegram checks and the tests care about: the HTML markup (allowed tags,
nesting, escaping), the 4096-character limit (UTF-16, after parsing), and that a private chat exists
(the user started the bot). `sendDocument` takes a multipart upload (recorded in `documents`) and
refuses one over the 50 MB a bot may upload; `sendVoice` alike (`voices`). Files people send
(`photo`, `document`, `voice`, `audio`) are served the way the cloud Bot API serves them: `getFile`
gives a `file_path` (and refuses a file over 20 MB: "file is too big"), then `GET
/file/bot<token>/<path>` returns the bytes; both are recorded (`file_requests`, `downloads`).
`press` plays a person pressing an inline-keyboard button of a sent message (a `callback_query`
update).
Answers being written: `sendMessageDraft` (private chats only, draft_id non-zero, the same markup
and length checks; recorded in `drafts`, never kept: a person sees a draft only until the final
message) and `editMessageText` (a message the bot sent in that chat; refused as Telegram refuses:
empty or over-long text, invalid markup, "message is not modified" when nothing changes, and 429
with retry_after when an edit in the same chat comes sooner than `edit_interval_s` after the
last, recorded in `too_fast`). A Sent message holds its current text; `edits` records each edit.
Failures can be scripted per method with `fail_next`. In webhook mode `setWebhook` records the
URL and secret token, and `deliver` POSTs a pushed update there the way Telegram does: again
after an answer other than 200. A message may reply to another (`reply_to`, built by `as_replied`
or `person_message`) and quote part of it (`quote`); in a forum topic it replies to the topic's
first message as Telegram's do. `getChatMember` answers from `admins` and `creators`.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from tests.rigs.fakes.local_server import serve_locally, stream_file

TOKEN = "123456:TEST-token_for-the-fake"
BOT = {"id": 999, "is_bot": True, "first_name": "LightGrep", "username": "lightgrep_bot"}
ALLOWED_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-spoiler",
    "span",
    "tg-emoji",
}
_TAG = re.compile(r"<(/?)([a-zA-Z][\w-]*)((?:\s+[^<>]*)?)>")
_ENTITY = re.compile(r"&(lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);")


class MarkupError(ValueError):
    pass


def visible_text(markup: str) -> str:
    """The text a user sees for an HTML message, or MarkupError as Telegram would reject it."""
    out: list[str] = []
    stack: list[str] = []
    pos = 0
    while pos < len(markup):
        char = markup[pos]
        if char == "<":
            m = _TAG.match(markup, pos)
            if not m:
                raise MarkupError(f"Unsupported start tag at byte offset {pos}")
            closing, name = m.group(1), m.group(2).lower()
            if name not in ALLOWED_TAGS:
                raise MarkupError(f'Unsupported start tag "{name}" at byte offset {pos}')
            if closing:
                if not stack or stack[-1] != name:
                    raise MarkupError(f"Unmatched end tag at byte offset {pos}")
                stack.pop()
            else:
                stack.append(name)
            pos = m.end()
        elif char == "&":
            m = _ENTITY.match(markup, pos)
            if not m:
                raise MarkupError(f"Character entity expected at byte offset {pos}")
            out.append(html.unescape(m.group(0)))
            pos = m.end()
        else:
            out.append(char)
            pos += 1
    if stack:
        raise MarkupError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass
class Sent:
    """One message the bot sent."""

    chat_id: int
    text: str  # what the user sees
    raw: str  # as sent
    parse_mode: str | None
    message_id: int
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    reply_markup: str | None = None  # as last set (sendMessage or an edit)

    def __post_init__(self) -> None:
        if self.reply_markup is None:
            self.reply_markup = self.params.get("reply_markup")


@dataclass
class Draft:
    """One sendMessageDraft: what the person saw, for a moment, as the answer was written."""

    chat_id: int
    draft_id: int
    text: str
    at: float = field(default_factory=time.monotonic)


@dataclass
class Edit:
    """One accepted editMessageText."""

    chat_id: int
    message_id: int
    text: str
    at: float = field(default_factory=time.monotonic)


@dataclass
class Document:
    """One file the bot sent with sendDocument (or sendVoice)."""

    chat_id: int
    filename: str
    data: bytes
    params: dict[str, Any]


@dataclass
class StoredFile:
    """A file a user sent, as the Bot API keeps it."""

    file_id: str
    unique_id: str
    data: bytes
    path: str
    hidden: int = 0  # bytes served after `data` that getFile does not own up to (a lying size)
    sized: bool = True  # False: no file_size in getFile, as for a size the server cannot tell


@dataclass
class Failure:
    status: int
    description: str
    retry_after: int | None = None


class FakeTelegram:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.bot = dict(BOT)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[Sent] = []
        self.documents: list[Document] = []
        self.voices: list[Document] = []  # sent with sendVoice
        self.max_upload = 50 * 1000 * 1000
        self.max_download = 20 * 1000 * 1000  # what getFile serves on the cloud Bot API
        self.files: dict[str, StoredFile] = {}
        self.file_requests: list[str] = []  # file_id of every getFile
        self.downloads: list[str] = []  # file_path of every download
        self.served: dict[str, int] = {}  # file_path → bytes the bot took of its download
        self.callback_answers: list[str] = []  # ids of the callback queries answered
        self.commands: list[dict[str, Any]] = []
        self.started_users: set[int] = set()  # users with a private chat with the bot
        self._updates: list[dict[str, Any]] = []  # pending: not acknowledged yet
        self._pushed: dict[int, dict[str, Any]] = {}  # every update ever pushed
        self.delivered: Counter[int] = Counter()  # update_id → times returned by getUpdates
        self.acked_offset = 0  # every update_id below this is acknowledged (forgotten)
        self._next_update = 1
        self._next_message = 100
        self._failures: dict[str, deque[Failure]] = defaultdict(deque)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.webhook: dict[str, Any] | None = None  # setWebhook's parameters
        self.webhook_answers: list[int] = []  # status of every webhook POST (0: no answer)
        self.drafts: list[Draft] = []
        self.refused: list[tuple[str, str]] = []  # (method, description) of every call refused
        self.edits: list[Edit] = []
        self.edit_interval_s = 1.0  # edits in one chat at most this often
        self.too_fast: list[tuple[int, float]] = []  # (chat, seconds since the last edit)
        self.drafts_supported = True  # False: an older Bot API without sendMessageDraft
        self.admins: dict[int, set[int]] = defaultdict(set)  # chat → its administrators
        self.creators: dict[int, int] = {}  # chat → its creator
        self._last_edit: dict[int, float] = {}

    @property
    def api_base(self) -> str:
        """What goes into `[telegram] api_base`."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeTelegram:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._dispatch)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner, self.port = await serve_locally(app)
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    # ---- scripting -------------------------------------------------------------------------

    def fail_next(
        self, method: str, status: int, description: str, retry_after: int | None = None
    ) -> None:
        """The next call of `method` fails like Telegram would (400, 403, 429 with retry_after…)."""
        self._failures[method].append(Failure(status, description, retry_after))

    def failures_pending(self, method: str) -> int:
        """How many of `method`'s failures set by fail_next have not been served yet."""
        return len(self._failures[method])

    def dm(
        self,
        user_id: int,
        text: str,
        *,
        username: str | None = None,
        reply_to: dict[str, Any] | None = None,
        quote: str | None = None,
        **extra: Any,
    ) -> int:
        """A private message from a user (who thereby has started the bot); its message_id. A
        reply to `reply_to` (`as_replied`), `quote` the part of it quoted."""
        self.started_users.add(user_id)
        chat = {"id": user_id, "type": "private", "first_name": f"User{user_id}"}
        message = self._message(chat, user_id, text, username, **extra)
        self._replying(message, reply_to, quote)
        self.push("message", message)
        return message["message_id"]

    def group(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        username: str | None = None,
        reply_to_bot: bool = False,
        topic: int | None = None,
        reply_to: dict[str, Any] | None = None,
        quote: str | None = None,
        **extra: Any,
    ) -> int:
        """A message in a supergroup (a forum topic if `topic` is given); a reply to the
        message `reply_to` (see `as_replied`), or to an earlier answer of the bot, with the
        part `quote` of it quoted (Telegram's TextQuote)."""
        chat: dict[str, Any] = {"id": chat_id, "type": "supergroup", "title": "Group"}
        message = self._message(chat, user_id, text, username, **extra)
        if reply_to_bot and reply_to is None:
            reply_to = {
                "message_id": 1,
                "date": int(time.time()),
                "chat": chat,
                "from": self.bot,
                "text": "an earlier answer",
            }
        self._replying(message, reply_to, quote)
        if topic is not None:
            chat["is_forum"] = True
            message["message_thread_id"] = topic
            message["is_topic_message"] = True
            if reply_to is None:  # as Telegram: a topic's message replies to its first one
                message["reply_to_message"] = {
                    "message_id": topic,
                    "date": int(time.time()),
                    "chat": chat,
                    "from": {"id": user_id, "is_bot": False, "first_name": "Someone"},
                    "forum_topic_created": {"name": "A topic", "icon_color": 7322096},
                }
        self.push("message", message)
        return message["message_id"]

    def as_replied(self, sent: Sent) -> dict[str, Any]:
        """A message the bot sent, as a reply to it carries it (`reply_to_message`): its text as
        the person sees it, and no reply of its own (Telegram never nests them)."""
        chat = {"id": sent.chat_id, "type": "private" if sent.chat_id > 0 else "supergroup"}
        return {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot,
            "text": sent.text,
        }

    def person_message(
        self, chat_id: int, user_id: int, message_id: int, text: str
    ) -> dict[str, Any]:
        """A person's message, as a reply to it carries it."""
        chat = {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"}
        sender = {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            "text": text,
        }

    @staticmethod
    def _replying(
        message: dict[str, Any], reply_to: dict[str, Any] | None, quote: str | None
    ) -> None:
        if reply_to is not None:
            message["reply_to_message"] = reply_to
        if quote is not None:
            whole = (reply_to or {}).get("text", "")
            message["quote"] = {"text": quote, "position": max(0, whole.find(quote))}

    def photo(
        self,
        user_id: int,
        data: bytes = b"",
        *,
        caption: str | None = None,
        chat: dict[str, Any] | None = None,
        size: int | None = None,
    ) -> int:
        """A photo (in the private chat unless `chat` is given), offered in three sizes as
        Telegram does; the largest holds `data` (`size`: what Telegram reports, if not that)."""
        sizes = []
        for scale in (90, 320, 1280):
            payload = data if scale == 1280 else data[: max(1, len(data) // 4)]
            stored = self.add_file(payload, "photos", "jpg")
            reported = size if (size is not None and scale == 1280) else len(payload)
            sizes.append(
                {
                    "file_id": stored.file_id,
                    "file_unique_id": stored.unique_id,
                    "width": scale,
                    "height": scale,
                    "file_size": reported,
                }
            )
        return self._media(user_id, chat, caption, photo=sizes)

    def document(
        self,
        user_id: int,
        data: bytes,
        name: str,
        mime: str | None,
        *,
        caption: str | None = None,
        size: int | None = None,
        chat: dict[str, Any] | None = None,
        hidden: int = 0,
        sized: bool = True,
    ) -> int:
        """A file sent as a document (`size`: what Telegram reports, if not len(data); `hidden`:
        bytes served after `data` that nothing reports; `sized` False: no size reported)."""
        stored = self.add_file(data, "documents", name.rpartition(".")[2] or "bin")
        stored.hidden, stored.sized = hidden, sized
        document: dict[str, Any] = {
            "file_id": stored.file_id,
            "file_unique_id": stored.unique_id,
            "file_name": name,
        }
        if sized:
            document["file_size"] = len(data) if size is None else size
        if mime:
            document["mime_type"] = mime
        return self._media(user_id, chat, caption, document=document)

    def voice(
        self, user_id: int, data: bytes, *, duration: int = 3, chat: dict[str, Any] | None = None
    ) -> int:
        """A voice message recorded in the chat (OGG/Opus, as Telegram clients send it)."""
        stored = self.add_file(data, "voice", "oga")
        voice = {
            "file_id": stored.file_id,
            "file_unique_id": stored.unique_id,
            "duration": duration,
            "mime_type": "audio/ogg",
            "file_size": len(data),
        }
        return self._media(user_id, chat, None, voice=voice)

    def audio(self, user_id: int, data: bytes, name: str, mime: str, *, duration: int = 60) -> int:
        """A music or audio file."""
        stored = self.add_file(data, "music", name.rpartition(".")[2] or "mp3")
        audio = {
            "file_id": stored.file_id,
            "file_unique_id": stored.unique_id,
            "duration": duration,
            "file_name": name,
            "mime_type": mime,
            "file_size": len(data),
        }
        return self._media(user_id, None, None, audio=audio)

    def sticker(self, user_id: int) -> int:
        """A sticker: neither text nor a file the bot reads."""
        stored = self.add_file(b"RIFF....WEBP", "stickers", "webp")
        sticker = {
            "file_id": stored.file_id,
            "file_unique_id": stored.unique_id,
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "type": "regular",
        }
        return self._media(user_id, None, None, sticker=sticker)

    def add_file(self, data: bytes, folder: str, ext: str) -> StoredFile:
        number = len(self.files) + 1
        stored = StoredFile(
            f"file-id-{number}", f"unique-{number}", data, f"{folder}/file_{number}.{ext}"
        )
        self.files[stored.file_id] = stored
        return stored

    def _media(
        self, user_id: int, chat: dict[str, Any] | None, caption: str | None, **media: Any
    ) -> int:
        if chat is None:
            self.started_users.add(user_id)
            chat = {"id": user_id, "type": "private", "first_name": f"User{user_id}"}
        message = self._message(chat, user_id, None, None)
        message.update(media)
        if caption is not None:
            message["caption"] = caption
            entities = _entities(caption)
            if entities:
                message["caption_entities"] = entities
        self.push("message", message)
        return message["message_id"]

    def edited(self, user_id: int, text: str) -> int:
        """An edit of an earlier private message."""
        chat = {"id": user_id, "type": "private", "first_name": f"User{user_id}"}
        message = self._message(chat, user_id, text, None)
        message["edit_date"] = int(time.time())
        self.push("edited_message", message)
        return message["message_id"]

    def press(self, user_id: int, sent: Sent, command: str) -> int:
        """The user presses the button of `sent` whose callback data is `command`."""
        markup = json.loads(sent.params.get("reply_markup") or "{}")
        offered = [b.get("callback_data") for row in markup.get("inline_keyboard", []) for b in row]
        if command not in offered:
            raise AssertionError(f"{command!r} is not a button of that message: {offered}")
        sender: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}
        chat = {"id": sent.chat_id, "type": "private" if sent.chat_id > 0 else "supergroup"}
        message = {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot,
            "text": sent.text,
        }
        self._next_message += 1
        query = {
            "id": f"cq{self._next_message}",
            "from": sender,
            "chat_instance": "1",
            "message": message,
            "data": command,
        }
        return self.push("callback_query", query)

    def buttons(self, sent: Sent) -> list[tuple[str, str]]:
        """(label, callback data) of the inline keyboard under a sent message."""
        markup = json.loads(sent.params.get("reply_markup") or "{}")
        return [
            (b["text"], b["callback_data"])
            for row in markup.get("inline_keyboard", [])
            for b in row
        ]

    def push(self, kind: str, payload: dict[str, Any]) -> int:
        update_id = self._next_update
        self._next_update += 1
        update = {"update_id": update_id, kind: payload}
        self._pushed[update_id] = update
        self._updates.append(update)
        asyncio.get_running_loop().create_task(self._notify())
        return update_id

    @property
    def last_update_id(self) -> int:
        """The update_id of the newest pushed update."""
        return self._next_update - 1

    def redeliver(self, update_id: int) -> None:
        """As if the acknowledgements from `update_id` on never reached Telegram (the bot died
        first): that update and every later one are pending again."""
        self.acked_offset = min(self.acked_offset, update_id)
        self._updates = [u for i, u in sorted(self._pushed.items()) if i >= update_id]
        asyncio.get_running_loop().create_task(self._notify())

    def acked(self, update_id: int) -> bool:
        """Forgotten: a getUpdates asked for a higher offset, so it is never delivered again."""
        return update_id < self.acked_offset

    def _message(
        self,
        chat: dict[str, Any],
        user_id: int,
        text: str | None,
        username: str | None,
        **extra: Any,
    ) -> dict[str, Any]:
        self._next_message += 1
        sender: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}
        if username:
            sender["username"] = username
        message: dict[str, Any] = {
            "message_id": self._next_message,
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            **extra,
        }
        if text is not None:
            message["text"] = text
            entities = _entities(text)
            if entities:
                message["entities"] = entities
        return message

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def deliver(
        self,
        update_id: int,
        *,
        attempts: int = 5,
        retry_s: float = 0.2,
        secret: str | None = None,
    ) -> list[int]:
        """POST a pushed update to the webhook until it is answered 200 (as Telegram retries);
        the status of each attempt (0: the connection failed). `secret` overrides the token."""
        assert self.webhook is not None, "no webhook is set"
        token = self.webhook.get("secret_token", "") if secret is None else secret
        statuses: list[int] = []
        async with ClientSession(timeout=ClientTimeout(total=10)) as http:
            for _ in range(attempts):
                try:
                    async with http.post(
                        self.webhook["url"],
                        json=self._pushed[update_id],
                        headers={"X-Telegram-Bot-Api-Secret-Token": token},
                    ) as response:
                        statuses.append(response.status)
                except ClientError:
                    statuses.append(0)
                self.webhook_answers.append(statuses[-1])
                if statuses[-1] == 200:
                    break
                await asyncio.sleep(retry_s)
        return statuses

    async def deliver_body(self, body: bytes) -> int:
        """POST `body` as it is, with the webhook's secret (as if Telegram sent such an
        update); the answer's status."""
        assert self.webhook is not None, "no webhook is set"
        headers = {
            "X-Telegram-Bot-Api-Secret-Token": self.webhook.get("secret_token", ""),
            "Content-Type": "application/json",
        }
        async with (
            ClientSession(timeout=ClientTimeout(total=10)) as http,
            http.post(self.webhook["url"], data=body, headers=headers) as response,
        ):
            self.webhook_answers.append(response.status)
            return response.status

    # ---- queries for tests -----------------------------------------------------------------

    def sent_to(self, chat_id: int) -> list[Sent]:
        return [s for s in self.sent if s.chat_id == chat_id]

    def method_calls(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    async def wait_until(self, predicate: Callable[[], bool], wait_s: float = 5.0) -> None:
        """Wait for the bot to have done something (checked whenever a call arrives)."""

        async def wait() -> None:
            async with self._changed:
                await self._changed.wait_for(predicate)

        await asyncio.wait_for(wait(), wait_s)

    async def wait_sent(self, chat_id: int, count: int = 1, wait_s: float = 5.0) -> list[Sent]:
        await self.wait_until(lambda: len(self.sent_to(chat_id)) >= count, wait_s)
        return self.sent_to(chat_id)

    # ---- the API ---------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params, files = await _params(request)
        self.calls.append((method, params))
        await self._notify()
        if self._failures[method]:
            failure = self._failures[method].popleft()
            extra = (
                {"retry_after": failure.retry_after} if failure.retry_after is not None else None
            )
            return _error(failure.status, failure.description, extra)
        if method.lower() == "senddocument":
            return await self._send_document(params, files)
        if method.lower() == "sendvoice":
            return await self._send_document(params, files, "voice")
        handler = getattr(self, f"_m_{method.lower()}", None)
        if handler is None:
            return _error(404, "Not Found")
        response = await handler(params)
        if response.status != 200:
            self.refused.append((method, json.loads(response.text or "{}").get("description", "")))
        return response

    async def _send_document(
        self, params: dict[str, Any], files: dict[str, tuple[str, bytes]], kind: str = "document"
    ) -> web.Response:
        chat_id = int(params["chat_id"])
        if chat_id > 0 and chat_id not in self.started_users:
            return _error(403, "Forbidden: bot can't initiate conversation with a user")
        if kind not in files:
            return _error(400, f"Bad Request: there is no {kind} in the request")
        filename, data = files[kind]
        if len(data) > self.max_upload:
            return _error(413, "Request Entity Too Large")
        self._next_message += 1
        (self.voices if kind == "voice" else self.documents).append(
            Document(chat_id, filename, data, params)
        )
        await self._notify()
        chat = {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"}
        sent: dict[str, Any] = {"file_id": f"doc{self._next_message}", "file_unique_id": "d"}
        if kind == "voice":
            sent.update(duration=1, mime_type="audio/ogg")
        else:
            sent["file_name"] = filename
        return _ok(
            {
                "message_id": self._next_message,
                "date": int(time.time()),
                "chat": chat,
                "from": self.bot,
                kind: sent,
            }
        )

    async def _m_getfile(self, params: dict[str, Any]) -> web.Response:
        file_id = params.get("file_id", "")
        self.file_requests.append(file_id)
        stored = self.files.get(file_id)
        if stored is None:
            return _error(400, "Bad Request: invalid file_id")
        if len(stored.data) > self.max_download:
            return _error(400, "Bad Request: file is too big")
        found = {"file_id": stored.file_id, "file_unique_id": stored.unique_id}
        if stored.sized:
            found["file_size"] = len(stored.data)
        return _ok({**found, "file_path": stored.path})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        path = request.match_info["path"]
        self.downloads.append(path)
        await self._notify()
        stored = next((f for f in self.files.values() if f.path == path), None)
        if stored is None or len(stored.data) > self.max_download:
            return _error(404, "Not Found")
        if stored.hidden or not stored.sized:
            return await stream_file(request, stored.data, stored.hidden, self.served, path)
        self.served[path] = len(stored.data)
        return web.Response(body=stored.data, content_type="application/octet-stream")

    async def _m_answercallbackquery(self, params: dict[str, Any]) -> web.Response:
        self.callback_answers.append(params["callback_query_id"])
        return _ok(True)

    async def _m_editmessagereplymarkup(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _m_getme(self, params: dict[str, Any]) -> web.Response:
        return _ok(self.bot)

    async def _m_deletewebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhook = None
        return _ok(True)

    async def _m_setwebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhook = params
        return _ok(True)

    async def _m_setmycommands(self, params: dict[str, Any]) -> web.Response:
        self.commands = json.loads(params["commands"])
        return _ok(True)

    async def _m_getchatmember(self, params: dict[str, Any]) -> web.Response:
        chat, user = int(params["chat_id"]), int(params["user_id"])
        status = (
            "creator"
            if self.creators.get(chat) == user
            else "administrator"
            if user in self.admins[chat]
            else "member"
        )
        member = {"id": user, "is_bot": False, "first_name": f"User{user}"}
        return _ok({"status": status, "user": member})

    async def _m_sendchataction(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _m_getupdates(self, params: dict[str, Any]) -> web.Response:
        offset = int(params.get("offset") or 0)
        self.acked_offset = max(self.acked_offset, offset)
        self._updates = [u for u in self._updates if u["update_id"] >= self.acked_offset]
        timeout = float(params.get("timeout") or 0)
        if not self._updates and timeout > 0:
            with contextlib.suppress(TimeoutError):
                await self.wait_until(lambda: bool(self._updates), timeout)
        limit = min(100, max(1, int(params.get("limit") or 100)))
        batch = [u for u in self._updates if u["update_id"] >= self.acked_offset][:limit]
        for update in batch:
            self.delivered[update["update_id"]] += 1
        return _ok(batch)

    def seen_in(self, chat_id: int) -> str:
        """What a person reads in the chat now: the bot's kept messages in order, each as it
        was last edited (drafts are gone once the answer is sent), one blank line apart."""
        return "\n\n".join(sent.text for sent in self.sent_to(chat_id))

    async def _m_sendmessagedraft(self, params: dict[str, Any]) -> web.Response:
        if not self.drafts_supported:
            return _error(404, "Not Found")
        chat_id = int(params["chat_id"])
        if chat_id < 0:
            return _error(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        if chat_id not in self.started_users:
            return _error(403, "Forbidden: bot can't initiate conversation with a user")
        if int(params.get("draft_id") or 0) == 0:
            return _error(400, "Bad Request: draft_id must be non-zero")
        text, problem = _checked_text(params, empty_ok=True)
        if problem is not None:
            return problem
        self.drafts.append(Draft(chat_id, int(params["draft_id"]), text))
        await self._notify()
        return _ok(True)

    async def _m_editmessagetext(self, params: dict[str, Any]) -> web.Response:
        chat_id, message_id = int(params["chat_id"]), int(params["message_id"])
        target = next((m for m in self.sent_to(chat_id) if m.message_id == message_id), None)
        if target is None:
            return _error(400, "Bad Request: message to edit not found")
        now = time.monotonic()
        last = self._last_edit.get(chat_id)
        if last is not None and now - last < self.edit_interval_s:
            self.too_fast.append((chat_id, now - last))
            wait = max(1, round(self.edit_interval_s - (now - last)))
            return _error(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait})
        text, problem = _checked_text(params)
        if problem is not None:
            return problem
        markup = params.get("reply_markup")
        if (
            text == target.text
            and params.get("text") == target.raw
            and (markup == target.reply_markup)
        ):
            return _error(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        self._last_edit[chat_id] = now
        target.text, target.raw, target.parse_mode = (
            text,
            params.get("text", ""),
            params.get("parse_mode"),
        )
        target.reply_markup = markup
        self.edits.append(Edit(chat_id, message_id, text))
        await self._notify()
        chat = {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"}
        return _ok(
            {
                "message_id": message_id,
                "date": int(time.time()),
                "edit_date": int(time.time()),
                "chat": chat,
                "from": self.bot,
                "text": text,
            }
        )

    async def _m_sendmessage(self, params: dict[str, Any]) -> web.Response:
        chat_id = int(params["chat_id"])
        if chat_id > 0 and chat_id not in self.started_users:
            return _error(403, "Forbidden: bot can't initiate conversation with a user")
        raw = params.get("text", "")
        mode = params.get("parse_mode")
        text, problem = _checked_text(params)
        if problem is not None:
            return problem
        self._next_message += 1
        self.sent.append(Sent(chat_id, text, raw, mode, self._next_message, params))
        await self._notify()
        chat = {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"}
        return _ok(
            {
                "message_id": self._next_message,
                "date": int(time.time()),
                "chat": chat,
                "from": self.bot,
                "text": text,
            }
        )


def _checked_text(
    params: dict[str, Any], *, empty_ok: bool = False
) -> tuple[str, web.Response | None]:
    """The visible text of a message's `text`, or the error Telegram answers for it."""
    raw = params.get("text", "")
    try:
        text = visible_text(raw) if params.get("parse_mode") == "HTML" else raw
    except MarkupError as exc:
        return "", _error(400, f"Bad Request: can't parse entities: {exc}")
    if not text.strip() and not empty_ok:
        return "", _error(400, "Bad Request: message text is empty")
    if _utf16_len(text) > 4096:
        return "", _error(400, "Bad Request: message is too long")
    return text, None


def _entities(text: str) -> list[dict[str, Any]]:
    """Entities as Telegram computes them: a leading /command, @mentions (UTF-16 offsets)."""
    entities = []
    command = re.match(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?", text)
    if command:
        entities.append({"type": "bot_command", "offset": 0, "length": command.end()})
    for m in re.finditer(r"(?<![\w@/])@[A-Za-z0-9_]{5,32}", text):
        offset = _utf16_len(text[: m.start()])
        entities.append({"type": "mention", "offset": offset, "length": _utf16_len(m.group(0))})
    return entities


async def _params(request: web.Request) -> tuple[dict[str, Any], dict[str, tuple[str, bytes]]]:
    """(form fields, uploaded files as name → (file name, bytes))."""
    if request.content_type == "application/json":
        body = await request.json()
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in body.items()}, {}
    form = await request.post()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    files = {
        k: (v.filename, v.file.read()) for k, v in form.items() if isinstance(v, web.FileField)
    }
    return fields, files


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=status)
