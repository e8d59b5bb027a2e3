"""A small OpenAI-compatible server on 127.0.0.1 for tests: the far end, never our code.

Answers are scripted: push items with `queue(...)`; when the queue is empty `default` answers.
An item is a completion body (HTTP 200), `Status(code, body)`, `Delay(seconds, item)`, or a
callable taking the request JSON and returning an item. Every request body is recorded.

Like OpenAI, a chat request is refused (400) when a message's content part is of a type the API
does not know (our own `image_ref` must never reach a provider) or an `image_url` is not a URL or
a base64 data URL of a PNG, JPEG, GIF or WebP picture. `/v1/audio/transcriptions` takes the
multipart upload the SDK sends (recorded in `transcriptions`), refuses a file format or size
OpenAI refuses, and answers from `transcripts` (text, or a Status) in order, else `transcript`.

A request with `"stream": true` is answered as OpenAI streams (server-sent events of
`chat.completion.chunk`s, then `data: [DONE]`): a completion body is cut into chunks of about a
word (tool calls by index: name first, arguments in pieces), with the usage as a last chunk when
`stream_options.include_usage` asks for it, all in one write (a fast server: the bot reads the
answer whole, so a test of something else never sees a preview of it); a `Streamed` item sets the
pieces, their pace and a connection cut mid-answer. Like OpenAI, `stream_options` without
`stream` is refused (400), and `refuse_stream_options` plays a server that does not know the
parameter. Something that is not a completion (a string, a body of the wrong shape) is sent as it
is, not as events.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.rigs.fakes.local_server import serve_locally


@dataclass
class Status:
    code: int
    body: Any = None
    content_type: str = "application/json"
    headers: dict[str, str] | None = None  # e.g. a 429's Retry-After


@dataclass
class BrokenStream:
    """An event stream begun (a comment, the role) and then broken off (the connection closed
    mid-body): llama-cpp-python's answer to a streamed prompt over its window, when its error
    comes after the stream's head is sent (the other time it ends the stream cleanly, empty)."""


@dataclass
class Reset:
    """The connection reset before the answer's head: what llama-cpp-python 0.3.36's server
    (uvicorn, sse-starlette) did when its event stream's producer raised at once (a streamed
    "auto" tool choice): its log says 200 OK, the client never gets the head."""


@dataclass
class Transcription:
    """One upload to /v1/audio/transcriptions."""

    model: str
    filename: str
    data: bytes
    fields: dict[str, str]


@dataclass
class Delay:
    seconds: float
    item: Any


@dataclass
class Held:
    """`item`, answered once `until` is set: the model finishes when the test says, where a
    Delay's fixed time is one a loaded machine can overrun before the test has looked."""

    until: asyncio.Event
    item: Any


@dataclass
class Streamed:
    """A streamed answer: `pieces` of text, one chunk each, `every_s` apart (a model writing
    at 20 tokens/s: every_s=0.05), then `tool_calls` (tool_call dicts); `cut_after`: the
    connection drops after that many pieces, without [DONE] (the far end crashed)."""

    # str; {"error": {...}} is sent as an error event; anything else as a (broken) content
    pieces: list[Any]
    tool_calls: list[dict[str, Any]] | None = None
    every_s: float = 0.0
    cut_after: int | None = None
    first_after_s: float = 0.0  # before the first piece: the model reading the prompt
    prompt_tokens: int | None = 10  # None: no usage reported, even when asked for
    completion_tokens: int | None = None  # None: one per piece
    cached_tokens: int | None = None  # of prompt_tokens, read from the cache (OpenAI's details)
    no_choice: bool = False  # every chunk's choices empty (a broken server)
    # all events in one write, as a fast server's whole answer arrives: a completion body queued
    # for a streamed request is sent so, and its reader sees it whole, never a part of it first
    burst: bool = False


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    finish_reason: str | None = None,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """A chat.completion body as providers send it; `cached_tokens`: of the prompt's, those
    read from the server's cache, as OpenAI reports them (usage.prompt_tokens_details)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": _usage(prompt_tokens, completion_tokens, cached_tokens),
    }


def _usage(prompt: int, written: int, cached: int | None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": written,
        "total_tokens": prompt + written,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def tool_call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    """One entry of `message.tool_calls`; dict arguments are JSON-encoded as providers do."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def save_memory_call(history_entry: str, memory_update: str) -> dict[str, Any]:
    """A completion that calls `save_memory` the way a good model does."""
    args = {"history_entry": history_entry, "memory_update": memory_update}
    return completion(None, [tool_call("save_memory", args)])


def is_condense(request: dict[str, Any]) -> bool:
    """True for the consolidator's request to shorten a MEMORY.md over its budget."""
    messages = request.get("messages") or [{}]
    return str(messages[0].get("content") or "").startswith("You shorten a user's MEMORY.md")


def is_consolidation(request: dict[str, Any]) -> bool:
    """True for the consolidator's requests: the one that offers the save_memory tool, and the
    one in plain text (is_plain_consolidation) asked when that tool's answer was refused."""
    tools = request.get("tools") or []
    if any(t.get("function", {}).get("name") == "save_memory" for t in tools):
        return True
    return is_plain_consolidation(request)


def is_plain_consolidation(request: dict[str, Any]) -> bool:
    """The consolidator's request in plain text (memory/consolidation/plain.py)."""
    messages = request.get("messages") or [{}]
    system = str(messages[0].get("content") or "")
    return not request.get("tools") and system.startswith("You summarise conversations")


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: deque[Any] = deque()
        self.default: Callable[[dict[str, Any]], Any] = lambda req: completion("ok")
        self.transcriptions: list[Transcription] = []
        self.transcripts: deque[Any] = deque()
        self.transcript = "this is what was said"
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._arrived = asyncio.Condition()
        # What the server says about its window, if it is one that can: llama.cpp's /props,
        # vLLM's max_model_len in /v1/models, Ollama's /api/show. None: not that server.
        self.props: dict[str, Any] | None = None
        self.max_model_len: int | None = None
        self.ollama_show: dict[str, Any] | None = None
        self.refuse_stream_options = False
        # A server whose model cannot see: a request with an image_url part is refused in the
        # words of that server (BLIND_ANSWERS); None: pictures are taken.
        self.blind: str | None = None
        self.refused_pictures = 0
        self.streamed = 0  # requests answered as a stream
        # The Authorization header of each GET /v1/models and POST /v1/chat/completions.
        self.authorizations: list[str | None] = []
        self.model_ids = ["fake-model"]  # what GET /v1/models lists
        self.models_key: str | None = None  # set: GET /v1/models refuses any other key (401)
        # > 0: GET /v1/models streams a list this many bytes long (a hostile or broken server),
        # counting in models_bytes_sent what the client took before it hung up.
        self.models_bytes = 0
        self.models_bytes_sent = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *items: Any) -> None:
        self.script.extend(items)

    async def wait_requests(self, count: int, within: float = 15.0) -> None:
        """Until `count` requests have arrived (a request may be answered much later)."""
        async with asyncio.timeout(within), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)

    async def start(self) -> FakeOpenAI:
        app = web.Application(client_max_size=1024**3)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_get("/props", self._props)
        app.router.add_post("/api/show", self._show)
        self._runner, self.port = await serve_locally(app)
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.StreamResponse:
        self.authorizations.append(request.headers.get("Authorization"))
        if self.models_key and request.headers.get("Authorization") != f"Bearer {self.models_key}":
            return web.json_response({"error": {"message": "Incorrect API key"}}, status=401)
        if self.models_bytes:
            return await self._huge_models(request)
        models: list[dict[str, Any]] = []
        for name in self.model_ids:
            model: dict[str, Any] = {"id": name, "object": "model"}
            if self.max_model_len is not None:
                model["max_model_len"] = self.max_model_len
            models.append(model)
        return web.json_response({"object": "list", "data": models})

    async def _huge_models(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)  # no Content-Length: the client learns as it reads
        entry = b'{"id": "model-%08d", "object": "model", "owned_by": "' + b"x" * 900 + b'"},'
        try:
            await response.write(b'{"object": "list", "data": [')
            number = 0
            while self.models_bytes_sent < self.models_bytes:
                await response.write(entry.replace(b"%08d", b"%08d" % number))
                self.models_bytes_sent += len(entry)
                number += 1
            await response.write(b'{"id": "last"}]}')
        except (ConnectionResetError, ConnectionError):
            pass  # the client stopped reading
        return response

    async def _props(self, request: web.Request) -> web.Response:
        if self.props is None:
            raise web.HTTPNotFound()
        return web.json_response(self.props)

    async def _show(self, request: web.Request) -> web.Response:
        if self.ollama_show is None:
            raise web.HTTPNotFound()
        return web.json_response(self.ollama_show)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.authorizations.append(request.headers.get("Authorization"))
        body = await request.json()
        self.requests.append(body)
        async with self._arrived:
            self._arrived.notify_all()
        problem = _invalid_content(body.get("messages") or []) or self._invalid_stream(body)
        if problem:
            error = {"message": problem, "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        if self.blind is not None and image_urls(body):
            self.refused_pictures += 1
            status, refusal = BLIND_ANSWERS[self.blind]
            return web.json_response(refusal, status=status)
        item: Any = self.script.popleft() if self.script else self.default
        while True:
            if callable(item):
                item = item(body)
            elif isinstance(item, Delay):
                await asyncio.sleep(item.seconds)
                item = item.item
            elif isinstance(item, Held):
                await item.until.wait()
                item = item.item
            else:
                break
        if isinstance(item, Reset):
            assert request.transport is not None
            request.transport.abort()  # a reset, nothing of the answer sent
            return web.Response()
        if isinstance(item, BrokenStream):
            broken = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await broken.prepare(request)
            await broken.write(b": ping\n\n")  # a comment, then the role, then nothing
            role = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 0,
                    "model": "fake-model", "choices": [{"index": 0, "delta": {"role": "assistant"},
                    "finish_reason": None}]}  # fmt: skip
            await broken.write(f"data: {json.dumps(role)}\n\n".encode())
            assert request.transport is not None
            request.transport.close()  # no terminating chunk: the body is incomplete
            return broken
        if body.get("stream") is True and isinstance(item, Status) and item.code == 200:
            item = _streamable(item)  # a raw completion body is streamed like any other
        if isinstance(item, Status):
            text = item.body if isinstance(item.body, str) else json.dumps(item.body or {})
            return web.Response(
                status=item.code, text=text, content_type=item.content_type, headers=item.headers
            )
        if body.get("stream") is True:
            streamed = item if isinstance(item, Streamed) else _as_streamed(item)
            if streamed is not None:
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return await self._stream(request, streamed, usage)
        if isinstance(item, Streamed):  # asked whole: answered once it is all written
            await asyncio.sleep(item.first_after_s + item.every_s * max(0, len(item.pieces) - 1))
            item = completion("".join(map(str, item.pieces)), item.tool_calls)
        return web.json_response(item)

    def _invalid_stream(self, body: dict[str, Any]) -> str | None:
        if "stream_options" not in body:
            return None
        if self.refuse_stream_options:
            return "Unrecognized request argument supplied: stream_options"
        if body.get("stream") is not True:
            return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
        return None

    async def _stream(
        self, request: web.Request, item: Streamed, usage: bool
    ) -> web.StreamResponse:
        """Server-sent events, each written and flushed when due."""
        self.streamed += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        created = int(time.time())
        held: list[bytes] = []

        async def write(data: bytes) -> None:
            if item.burst:
                held.append(data)
            else:
                await response.write(data)

        async def event(delta: dict[str, Any] | None, **extra: Any) -> None:
            chunk: dict[str, Any] = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": created,
                "model": "fake-model",
                "choices": [] if delta is None else [{"index": 0, "delta": delta, **extra}],
            }
            if delta is None:
                chunk["usage"] = extra
            await write(f"data: {json.dumps(chunk)}\n\n".encode())

        if item.no_choice:
            await response.write(
                b'data: {"id": "x", "object": "chat.completion.chunk", '
                b'"created": 0, "model": "fake-model", "choices": []}\n\n'
            )
            await response.write(b"data: [DONE]\n\n")
            return response
        await event({"role": "assistant", "content": ""}, finish_reason=None)
        if not item.burst:
            await asyncio.sleep(item.first_after_s)
        for number, piece in enumerate(item.pieces):
            if item.cut_after is not None and number >= item.cut_after:
                assert request.transport is not None
                request.transport.close()  # mid-answer, as a crashed server does
                return response
            if number and item.every_s:
                await asyncio.sleep(item.every_s)
            if isinstance(piece, dict) and "error" in piece:  # an error event, as OpenAI sends
                await write(f"data: {json.dumps(piece)}\n\n".encode())
                continue
            await event({"content": piece}, finish_reason=None)
        for index, call in enumerate(item.tool_calls or []):
            function = call["function"]
            head = {"index": index, "id": call["id"], "type": "function"}
            await event(
                {"tool_calls": [{**head, "function": {"name": function["name"], "arguments": ""}}]}
            )
            arguments = function["arguments"]
            for part in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                await event({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        await event({}, finish_reason="tool_calls" if item.tool_calls else "stop")
        if usage and item.prompt_tokens is not None:
            pieces = len(item.pieces) if item.completion_tokens is None else item.completion_tokens
            await event(None, **_usage(item.prompt_tokens, pieces, item.cached_tokens))
        await write(b"data: [DONE]\n\n")
        if held:
            await response.write(b"".join(held))
        await response.write_eof()
        return response

    async def _transcribe(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not isinstance(upload, web.FileField):
            return _refusal(400, "Missing required parameter: 'file'.")
        data = upload.file.read()
        model = fields.get("model", "")
        self.transcriptions.append(Transcription(model, upload.filename, data, fields))
        async with self._arrived:
            self._arrived.notify_all()
        if upload.filename.rpartition(".")[2].lower() not in AUDIO_FORMATS:
            formats = ", ".join(f"'{f}'" for f in sorted(AUDIO_FORMATS))
            return _refusal(400, f"Invalid file format. Supported formats: [{formats}]")
        if len(data) > 25 * 1024 * 1024:
            return _refusal(413, "Maximum content size limit (26214400) exceeded.")
        item: Any = self.transcripts.popleft() if self.transcripts else self.transcript
        if isinstance(item, Status):
            text = item.body if isinstance(item.body, str) else json.dumps(item.body or {})
            return web.Response(status=item.code, text=text, content_type=item.content_type)
        return web.json_response({"text": item})

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Requests of the agent (not the consolidator's)."""
        return [r for r in self.requests if not is_consolidation(r) and not is_condense(r)]

    @property
    def consolidation_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if is_consolidation(r)]

    @property
    def condense_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if is_condense(r)]


AUDIO_FORMATS = {"flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm"}
PART_TYPES = {"text", "image_url", "input_audio", "file", "refusal"}
_DATA_URL = "data:image/{};base64,"
_MAGIC = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "gif": (b"GIF87a", b"GIF89a"),
    "webp": (b"RIFF",),
}


def pieces_of(text: str) -> list[str]:
    """Text cut the way a model streams it: about a word per chunk, spaces kept."""
    return re.findall(r"\s*\S+|\s+", text)


def _streamable(item: Status) -> Any:
    """A 200 whose raw body is a completion, as that completion; anything else as it is."""
    try:
        parsed = json.loads(item.body) if isinstance(item.body, str) else item.body
    except ValueError:
        return item
    return parsed if isinstance(parsed, dict) and "choices" in parsed else item


def _as_streamed(item: Any) -> Streamed | None:
    """A completion body as the stream that would have carried it; None if it is not one."""
    if isinstance(item, dict) and item.get("choices") == []:
        return Streamed([], no_choice=True)
    try:
        choice = item["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        calls = message.get("tool_calls")
        usage = item.get("usage") or {}
        prompt, answer = usage.get("prompt_tokens"), usage.get("completion_tokens")
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    pieces = pieces_of(content) if isinstance(content, str) else [content]  # as the provider had it
    return Streamed(
        pieces, calls, prompt_tokens=prompt, completion_tokens=answer, cached_tokens=cached,
        burst=True,
    )  # fmt: skip


def image_urls(request: dict[str, Any]) -> list[str]:
    """The image_url URLs of a chat request, oldest first."""
    return [
        part["image_url"]["url"]
        for message in request.get("messages", [])
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def _invalid_content(messages: list[dict[str, Any]]) -> str | None:
    """What OpenAI would say about the content parts of these messages (None: fine)."""
    for number, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for index, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            where = f"messages[{number}].content[{index}]"
            if kind not in PART_TYPES:
                supported = "Supported values are: 'text' and 'image_url'"
                return f"Invalid value: '{kind}'. {supported}. ({where})"
            if kind == "image_url" and not _valid_image_url(part.get("image_url")):
                return f"Invalid image in {where}: not a URL or a base64 data URL of an image."
    return None


def _valid_image_url(value: Any) -> bool:
    url = value.get("url") if isinstance(value, dict) else None
    if not isinstance(url, str):
        return False
    if url.startswith(("http://", "https://")):
        return True
    for name, magic in _MAGIC.items():
        prefix = _DATA_URL.format(name)
        if url.startswith(prefix):
            try:
                data = base64.b64decode(url[len(prefix) :], validate=True)
            except (binascii.Error, ValueError):
                return False
            return data.startswith(magic)
    return False


def _refusal(status: int, message: str) -> web.Response:
    error = {"message": message, "type": "invalid_request_error"}
    return web.json_response({"error": error}, status=status)


# -- servers that behave like real ones at their limits -------------------------------------------

CONTEXT_ERRORS: dict[str, Callable[[int, int, int], tuple[int, Any]]] = {
    # (window, prompt tokens, max_tokens) → (HTTP status, body), as each server words it.
    "openai": lambda n, p, m: (400, {"error": {
        "message": f"This model's maximum context length is {n} tokens. However, your messages "
        f"resulted in {p} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
    }}),
    "vllm": lambda n, p, m: (400, {
        "object": "error",
        "message": f"This model's maximum context length is {n} tokens. However, you requested "
        f"{p + m} tokens ({p} in the messages, {m} in the completion). Please reduce the length "
        "of the messages or completion.",
        "type": "BadRequestError", "param": None, "code": 400,
    }),
    "llama.cpp": lambda n, p, m: (400, {"error": {
        "code": 400, "message": "the request exceeds the available context size, try "
        "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": p, "n_ctx": n,
    }}),
    "llama-cpp-python": lambda n, p, m: (400, {"error": {
        "message": f"This model's maximum context length is {n} tokens. However, you requested "
        f"{p + m} tokens ({p} in the messages, {m} in the completion). Please reduce the length "
        "of the messages or completion.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
    }}),
    "ollama": lambda n, p, m: (400, {"error": {
        "message": f"prompt too long; exceeded max context length by {p + m - n} tokens",
        "type": "api_error", "param": None, "code": None,
    }}),
}  # fmt: skip


BLIND_ANSWERS: dict[str, tuple[int, Any]] = {
    # A request with pictures to a model that cannot see, as each server answers it.
    "llama.cpp": (500, {"error": {
        "code": 500, "message": "image input is not supported - hint: if this is unexpected, "
        "you may need to provide the mmproj", "type": "server_error",
    }}),
    "vllm": (400, {
        "object": "error", "message": "fake-model is not a multimodal model None",
        "type": "BadRequestError", "param": None, "code": 400,
    }),
    "ollama": (500, {"error": {
        "message": "this model is missing data required for image input",
        "type": "api_error", "param": None, "code": None,
    }}),
    "openai": (400, {"error": {
        "message": "Invalid content type. image_url is only supported by certain models.",
        "type": "invalid_request_error", "param": "messages.[1].content.[1].type", "code": None,
    }}),
}  # fmt: skip


def _server_tokens(text: str) -> int:
    """The server's own tokenizer: not ours (tiktoken), so estimates must learn it."""
    return len(re.findall(r"\w+|[^\w\s]", text))


class ContextLimited:
    """A default answer for FakeOpenAI that enforces a context length as servers do: a request
    whose prompt + max_tokens exceeds `length` is rejected in the wording of `server`; others
    are answered by `answer`, with usage.prompt_tokens as this server counts them. Servers that
    do not render the tool schemas (llama-cpp-python without a tool chat format) count them not
    at all: `render_tools=False`. `scale`: this server's tokens per token of the count below
    (SmolLM2's tokenizer counts about 1.2–1.4 of cl100k's).

    llama-cpp-python (0.3.x) streams as it was seen to: its answer has no usage chunk, even with
    stream_options.include_usage, and a streamed request over its window gets an event stream
    that ends without an event (HTTP 200: the stream has begun before the prompt is read);
    the same request not streamed gets the 400. `real_streams=False` streams like the others."""

    def __init__(
        self,
        length: int,
        answer: Callable[[dict[str, Any]], Any],
        *,
        server: str = "llama-cpp-python",
        render_tools: bool = True,
        default_max_tokens: int = 0,
        scale: float = 1.0,
        real_streams: bool = True,
        tool_template: int = 0,
        broken_streams: bool = False,
    ) -> None:
        self.length = length
        self.answer = answer
        self.server = server
        self.render_tools = render_tools
        self.default_max_tokens = default_max_tokens
        self.scale = scale
        self.real_streams = real_streams and server == "llama-cpp-python"
        # Tokens a chat format adds to a request that carries tools (llama-cpp-python's
        # chatml-function-calling writes ~400 of instructions around them).
        self.tool_template = tool_template
        self.broken_streams = broken_streams  # its over-long streams broken off, not ended
        self.rejected: list[dict[str, Any]] = []
        self.largest = 0  # the largest prompt + max_tokens it was asked for

    def prompt_tokens(self, request: dict[str, Any]) -> int:
        parts = []
        for message in request.get("messages") or []:
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            calls = json.dumps(message.get("tool_calls")) if message.get("tool_calls") else ""
            parts.append(f"<|im_start|>{message.get('role')}\n{text}{calls}<|im_end|>")
        if self.render_tools and request.get("tools"):
            parts.append(json.dumps(request["tools"]))
        template = self.tool_template if request.get("tools") else 0
        return math.ceil(_server_tokens("\n".join(parts)) * self.scale) + 3 + template

    def __call__(self, request: dict[str, Any]) -> Any:
        prompt = self.prompt_tokens(request)
        wanted = request.get("max_tokens") or self.default_max_tokens
        self.largest = max(self.largest, prompt + wanted)
        streamed = self.real_streams and request.get("stream") is True
        if prompt + wanted > self.length:
            self.rejected.append(request)
            if streamed:
                if self.broken_streams:
                    return BrokenStream()
                return Status(200, "", content_type="text/event-stream")
            status, body = CONTEXT_ERRORS[self.server](self.length, prompt, wanted)
            return Status(status, body)
        item = self.answer(request)
        if isinstance(item, dict) and "usage" in item:
            item = {**item, "usage": {**item["usage"], "prompt_tokens": prompt}}
            if streamed:
                item = _as_streamed(item)
                if item is not None:
                    item.prompt_tokens = None
        return item


def schema_echo(request: dict[str, Any]) -> dict[str, Any]:
    """A confused model: save_memory called with the tool's own parameter descriptions."""
    tool = next(t for t in request["tools"] if t["function"]["name"] == "save_memory")
    props = tool["function"]["parameters"]["properties"]
    return save_memory_call(
        props["history_entry"]["description"], props["memory_update"]["description"]
    )


def garbage_save(request: dict[str, Any]) -> dict[str, Any]:
    """What SmolLM2-135M wrote once: no sections, a history entry of punctuation."""
    return save_memory_call("][", "${MEMORY.md}</mmar-delete-function|$[MEMORAGE_UPDATE_FILE]")


def raw_newline_call(name: str, fields: dict[str, str], call_id: str = "call_1") -> dict[str, Any]:
    """A tool call whose JSON arguments hold raw newlines inside strings (llama.cpp grammars
    allow them; strict JSON does not)."""
    body = ", ".join(f'"{key}": "{value}"' for key, value in fields.items())
    return completion(None, [tool_call(name, "{" + body + "}", call_id)])


# What llama-cpp-python (0.3.x, llama_chat_format.chatml_function_calling) raises for a streamed
# request whose tool_choice is "auto". Its server raises it after the event stream has begun
# (HTTP 200): the client sees the stream end without an event, or broken off. A server that
# raised it before the stream began would answer as its RouteErrorHandler words any error
# (HTTP 500, internal_server_error).
AUTO_STREAM_REFUSAL = "Automatic streaming tool choice is not supported"


class ForcedToolCalls:
    """A default answer for FakeOpenAI: llama-cpp-python with `--chat_format
    chatml-function-calling` and a small model, as it was seen to answer (issue 33):

    - streamed, with tools and tool_choice "auto": refused (AUTO_STREAM_REFUSAL), as `refusal`
      says: "reset" (the connection reset before the head: seen with 0.3.36, 2026-12-02),
      "empty" (the stream ends without an event), "broken" (the connection closes mid-body),
      "error" (an HTTP 500 naming it);
    - whole, with tools and "auto" (or a tool named): a call, every time (its grammar makes the
      model pick a function; SmolLM2 always did): of `tool` with `arguments`;
    - with tool_choice "none", or no tools: its template shows no tool message at all, and the
      model's own calls as `functions.NAME:` and their arguments; a prompt that shows one gets
      the last copied back as text, its quotes HTML-escaped as the template wrote them (what
      SmolLM2 answered, seen 2026-12-02); any other gets `answer`.

    Streams report no usage (llama-cpp-python's never do)."""

    def __init__(
        self,
        answer: str = "Rotterdam, you said.",
        *,
        tool: str = "search_history",
        arguments: dict[str, Any] | None = None,
        refusal: str = "reset",
    ) -> None:
        self.answer = answer
        self.tool = tool
        self.arguments = arguments if arguments is not None else {"query": "Rotterdam"}
        self.refusal = refusal
        self.refused = 0  # streamed "auto" requests refused
        self.copied = 0  # plain answers that were the model's call copied as text

    def __call__(self, request: dict[str, Any]) -> Any:
        tools = request.get("tools") or []
        choice = request.get("tool_choice")
        offered = bool(tools) and choice not in (None, "none")
        if offered and request.get("stream") is True and choice == "auto":
            self.refused += 1
            if self.refusal == "reset":
                return Reset()
            if self.refusal == "broken":
                return BrokenStream()
            if self.refusal == "error":
                error = {"message": AUTO_STREAM_REFUSAL, "type": "internal_server_error",
                         "param": None, "code": None}  # fmt: skip
                return Status(500, {"error": error})
            return Status(200, "", content_type="text/event-stream")
        if offered:
            name = choice["function"]["name"] if isinstance(choice, dict) else self.tool
            call = tool_call(name, self.arguments, f"call__0_{name}_cmpl-{len(str(request))}")
            return completion(None, [call])
        shown = [m for m in request.get("messages") or [] if m.get("tool_calls")]
        if shown:
            self.copied += 1
            function = shown[-1]["tool_calls"][0]["function"]
            escaped = str(function["arguments"]).replace('"', "&#34;")
            return self._plain(f"functions.{function['name']}:\n{escaped}", request)
        return self._plain(self.answer, request)

    @staticmethod
    def _plain(text: str, request: dict[str, Any]) -> Any:
        if request.get("stream") is True:
            return Streamed(pieces_of(text), prompt_tokens=None, burst=True)
        return completion(text)
