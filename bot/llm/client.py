"""The one LLM client, over the `openai` SDK: any OpenAI-compatible endpoint.

It serves both the agent and the consolidator (it satisfies memory.llm.ChatLLM). Provider
failures, after the SDK's own retries, become memory.llm.LLMError (LLMBadRequest for a 400),
so callers handle one exception type. Token usage is totalled in `LLMClient.usage`. `stream`
asks for the answer as it is written (bot/llm/stream.py) and returns what `chat` would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import operator
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpx2
import openai
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from openai._models import FinalRequestOptions

from bot import logsafe
from bot.llm.body import encode_body
from bot.llm.habits import habits_of, refuses_streamed_tools
from bot.llm.http import AiohttpTransport
from bot.llm.overflow import context_overflow, overflow_window
from bot.llm.sse import ErrorEvent, events
from bot.llm.stream import Assembled
from memory.llm import ChatResult, LLMBadRequest, LLMContextOverflow, LLMError, ToolCall
from memory.text import valid_text

if TYPE_CHECKING:
    from bot.config import LLMConfig

log = logging.getLogger(__name__)
_T = TypeVar("_T")

NOT_A_COMPLETION = "the model provider answered with something that is not a completion"
# What the SDK would tell every provider about this machine is not sent (each header was also
# work on every request: 8% of a chat call's CPU). Omit is the SDK's way to drop a header.
TELEMETRY_HEADERS = (
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
)
CHAT_OPTIONS: openai.RequestOptions = {"headers": dict.fromkeys(TELEMETRY_HEADERS, openai.omit)}
# What `post` would build for every chat call (pydantic fills each of its defaults anew, 5% of a
# call's CPU); each call copies it with its own body (`_request_of`), as the SDK copies it again
# per attempt.
CHAT_REQUEST = FinalRequestOptions.construct(method="post", url="/chat/completions", **CHAT_OPTIONS)


# A provider's refusal of the pictures in a request (the model cannot see), lower-cased:
# llama.cpp "image input is not supported - hint: … provide the mmproj" (HTTP 500), vLLM
# "<model> is not a multimodal model", Ollama "this model is missing data required for image
# input", OpenAI "image_url is only supported by certain models".
IMAGE_WORDS = ("image", "vision", "multimodal", "mmproj")


class LLMImagesRefused(LLMBadRequest):
    """The provider refused the request because of its pictures (a model that cannot see)."""


@dataclass
class Usage:
    """Totals since start, and the last request's prompt size as the provider counted it."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    last_prompt_tokens: int | None = None


class _OpenAI(AsyncOpenAI):
    """The SDK's client, with what is the same on every chat request worked out once: the
    request is built by the SDK once per attempt number (its headers say which attempt it is)
    and after that only its body changes. Built anew each time, the URL was parsed three times
    and the headers merged and checked four times: ~130 µs of CPU per request. The SDK's way is
    kept for anything else, and for a chat request once the provider has set a cookie (httpx2
    sends it back)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # by attempt number: method, URL, headers but the length, extensions (not the body)
        self._built: dict[int, tuple[str, httpx2.URL, httpx2.Headers, dict[str, Any]]] = {}
        self._built_for: tuple[Any, ...] = ()

    @property
    def user_agent(self) -> str:
        return f"{AsyncOpenAI.__name__}/Python {self._version}"  # the SDK names its class

    def _build_request(
        self, options: FinalRequestOptions, *, retries_taken: int = 0
    ) -> httpx2.Request:
        body = options.content
        if (
            options.headers is not CHAT_REQUEST.headers  # not a chat request (`_request_of`)
            or not isinstance(body, bytes)
            or self._client.cookies
        ):
            return super()._build_request(options, retries_taken=retries_taken)
        basis = (self.api_key, self.base_url, self.timeout, options.url)
        if len(basis) != len(self._built_for) or any(map(operator.is_not, basis, self._built_for)):
            self._built, self._built_for = {}, basis  # the client was changed: built anew
        found = self._built.get(retries_taken)
        if found is None:
            built = super()._build_request(options, retries_taken=retries_taken)
            length = b"content-length"
            headers = httpx2.Headers([h for h in built.headers.raw if h[0].lower() != length])
            found = (built.method, built.url, headers, dict(built.extensions))
            self._built[retries_taken] = found
        method, url, headers, extensions = found  # a new request each time: hooks may change it
        return httpx2.Request(method, url, headers=headers, content=body, extensions=extensions)


def sdk_client(
    *, base_url: str | None, api_key: str | None, timeout_s: float, max_retries: int
) -> AsyncOpenAI:
    """The openai SDK's client for an OpenAI-compatible endpoint, as every part of the bot that
    talks to one needs it (the chat client here, voice transcription in bot/media): a key always
    set (local servers such as Ollama and vLLM take any; the SDK insists on one) and masked in
    logs from now on, HTTP on aiohttp (bot/llm/http.py: the SDK's default transport cost more
    CPU than the rest of a turn), and a chat request's parts built once (_OpenAI; any other
    request, a transcription's, goes the SDK's way)."""
    logsafe.hide(api_key)
    return _OpenAI(
        base_url=base_url,
        api_key=api_key or "not-needed",
        timeout=timeout_s,
        max_retries=max_retries,
        http_client=DefaultAsyncHttpxClient(transport=AiohttpTransport()),
    )


class LLMClient:
    _usage_refused = False  # the server refused stream_options once: never sent again

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        max_output_tokens: int | None = None,
        temperature: float | None = None,
    ) -> None:
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.usage = Usage()
        self.habits = habits_of(base_url, model)  # what this server was seen to do with tools
        self._client = sdk_client(
            base_url=base_url, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries
        )

    @classmethod
    def from_config(cls, llm: LLMConfig, **overrides: Any) -> LLMClient:
        """The client the [llm] section describes; `overrides` replace single arguments (the
        doctor's probe wants no retries and a short timeout). Its API key is masked in logs
        (sdk_client)."""
        settings: dict[str, Any] = {
            "model": llm.model,
            "base_url": llm.base_url,
            "api_key": llm.api_key,
            "timeout_s": llm.timeout_s,
            "max_retries": llm.max_retries,
            "max_output_tokens": llm.max_output_tokens,
            "temperature": llm.temperature,
        }
        return cls(**{**settings, **overrides})

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        kwargs = self._request(messages, tools, tool_choice, max_tokens)
        with _provider_errors():
            response = await self._create(kwargs, self._post)
        try:
            return self._to_result(response)
        except (AttributeError, TypeError, IndexError) as exc:  # JSON of another shape
            raise LLMError(NOT_A_COMPLETION) from exc

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        on_text: Callable[[str], Awaitable[None]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        """`chat` with stream=True: each piece of the answer's text goes to `on_text` as it is
        written (bot/llm/stream.py); the result, usage and failures are chat's. With tools, to
        a server that cannot stream them (bot/llm/habits.py), it is `chat`, its text handed on
        as one piece."""
        if tools and not self.habits.streams_tools:
            return await self._whole(messages, on_text, tools, tool_choice, max_tokens)
        kwargs = {**self._request(messages, tools, tool_choice, max_tokens), "stream": True}
        if not self._usage_refused:
            kwargs["stream_options"] = {"include_usage": True}
        answer = Assembled()
        with _provider_errors():
            try:
                response = await self._open_stream(kwargs)
            except openai.APIStatusError as exc:
                if not tools or not refuses_streamed_tools(_reason(exc)):
                    raise
                self.habits.no_tool_streams()  # said so: asked whole, now and from now on
                return await self._whole(messages, on_text, tools, tool_choice, max_tokens)
            except openai.APITimeoutError:
                raise
            except (openai.APIConnectionError, httpx2.TransportError):
                if not tools:
                    raise
                # llama-cpp-python refuses tools with "auto" in a stream by raising after the
                # stream's head, and its server resets the connection before that head is
                # out: asked whole, it answers (or the outage is real, and says so again).
                return await self._refused_stream(messages, on_text, tools, tool_choice, max_tokens)
            try:
                await _read_events(response, answer, on_text)
            except (openai.APIConnectionError, httpx2.TransportError):
                if answer.text or answer.calls or not _is_event_stream(response):
                    raise  # broken off mid-answer: a failure
                # Before anything of the answer (llama-cpp-python sends the role, then breaks
                # the connection when its error comes after the stream's head): as an empty
                # stream, below.
                answer = Assembled()
            finally:
                await response.aclose()
        if not answer.chunks:
            if _is_event_stream(response):
                # llama-cpp-python starts its event stream before it reads the prompt and ends
                # it without an event (or breaks it off) when that fails (a prompt longer than
                # its window, or tools with "auto"); asked whole, it answers, or says why not.
                return await self._refused_stream(messages, on_text, tools, tool_choice, max_tokens)
            raise LLMError(NOT_A_COMPLETION)  # a body that was not a stream of events at all
        if not answer.choices:
            raise LLMError("the model provider answered without any choice")
        try:
            return self._to_result(answer.as_completion())
        except (AttributeError, TypeError) as exc:
            raise LLMError(NOT_A_COMPLETION) from exc

    async def _refused_stream(
        self,
        messages: list[dict[str, Any]],
        on_text: Callable[[str], Awaitable[None]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | dict[str, Any] | None,
        max_tokens: int | None,
    ) -> ChatResult:
        """A stream that ended, or dropped, before its first event, asked again whole. Answered
        whole with a tool call, the stream's refusal was llama-cpp-python's of tools with
        "auto" ("Automatic streaming tool choice is not supported": it streams a text answer
        to the same request): such requests are asked whole from now on."""
        result = await self._whole(messages, on_text, tools, tool_choice, max_tokens)
        if tools and result.tool_calls:
            self.habits.no_tool_streams()
        return result

    async def _whole(
        self,
        messages: list[dict[str, Any]],
        on_text: Callable[[str], Awaitable[None]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | dict[str, Any] | None,
        max_tokens: int | None,
    ) -> ChatResult:
        """A streamed request asked whole: the answer's text goes to `on_text` in one piece."""
        result = await self.chat(
            messages, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens
        )
        if result.content and not result.tool_calls:
            await on_text(result.content)
        return result

    async def _open_stream(self, kwargs: dict[str, Any]) -> httpx2.Response:
        """The stream; a server that does not know stream_options (400) is asked without them,
        now and from then on (its usage is then not reported)."""
        try:
            return await self._create(kwargs, self._post_streamed)
        except openai.BadRequestError as exc:
            if "stream_options" not in kwargs or "stream_options" not in _reason(exc):
                raise
            log.info("the model provider does not take stream_options; usage not reported")
            self._usage_refused = True
            without = {k: v for k, v in kwargs.items() if k != "stream_options"}
            return await self._create(without, self._post_streamed)

    async def _post_streamed(self, kwargs: dict[str, Any]) -> httpx2.Response:
        """POST /chat/completions through the SDK's request path, as `_post`; the response
        comes back once its head is in (its status checked, failures retried by the SDK), its
        body unread: the events are read from it here (bot/llm/sse.py), without the SDK's
        pydantic model per chunk."""
        response: httpx2.Response = await self._client.request(
            httpx2.Response, _request_of(kwargs), stream=True
        )
        return response

    def _request(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | dict[str, Any] | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        limit = max_tokens or self.max_output_tokens
        if limit:
            kwargs["max_tokens"] = limit
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        return kwargs

    async def _create(
        self, kwargs: dict[str, Any], send: Callable[[dict[str, Any]], Awaitable[_T]]
    ) -> _T:
        try:
            return await send(kwargs)
        except UnicodeEncodeError:
            # A lone surrogate somewhere in the conversation cannot be sent as UTF-8; send U+FFFD
            # in its place rather than fail this turn and every later one of the session.
            valid = json.loads(valid_text(json.dumps(kwargs["messages"], ensure_ascii=False)))
            return await send({**kwargs, "messages": valid})

    async def _post(self, kwargs: dict[str, Any]) -> Any:
        """A whole completion: POST /chat/completions through the SDK's request path (its
        retries, timeouts and errors) with our JSON as the body, the answer's JSON read here.
        create() would first copy every message against its TypedDicts and build response
        models, a no-op for plain JSON that cost more CPU than the rest of a turn."""
        response = await self._client.request(httpx2.Response, _request_of(kwargs))
        data = json.loads(response.content)
        if not isinstance(data, dict):  # e.g. a JSON string or list
            raise LLMError(NOT_A_COMPLETION)
        return data

    def _to_result(self, response: Any) -> ChatResult:
        """A completion's JSON (a whole answer, or a streamed one put back together) made a
        ChatResult. Every shape the SDK's models took is taken: missing or null fields, a
        tool call without an id, its arguments already parsed (an object), content as parts."""
        if not isinstance(response, dict):
            raise LLMError(NOT_A_COMPLETION)  # e.g. an HTML error page with status 200
        choices = _field(response, "choices")
        if not choices:
            raise LLMError("the model provider answered without any choice")
        if not isinstance(choices, list):
            raise LLMError(NOT_A_COMPLETION)
        message = _field(choices[0], "message")
        if message is None:
            raise LLMError(NOT_A_COMPLETION)
        calls = []
        for i, call in enumerate(_field(message, "tool_calls") or []):
            function = _field(call, "function")
            if function is None:
                continue
            arguments = _field(function, "arguments")
            calls.append(
                ToolCall(
                    id=str(_field(call, "id") or f"call_{i}"),
                    name=str(_field(function, "name") or ""),
                    arguments=valid_text("" if arguments is None else arguments),
                )
            )
        content = _text_of(_field(message, "content"))
        result = ChatResult(
            content=None if content is None else valid_text(content),
            tool_calls=calls,
            finish_reason=_field(choices[0], "finish_reason"),
            model=self.model,
        )
        usage = _field(response, "usage")
        if usage is not None:
            result.prompt_tokens = _count(_field(usage, "prompt_tokens"))
            result.completion_tokens = _count(_field(usage, "completion_tokens"))
            details = _field(usage, "prompt_tokens_details")
            if details is not None:
                result.cached_prompt_tokens = _count(_field(details, "cached_tokens"))
            self.usage.requests += 1
            self.usage.prompt_tokens += result.prompt_tokens or 0
            self.usage.completion_tokens += result.completion_tokens or 0
            self.usage.last_prompt_tokens = result.prompt_tokens
        return result

    async def aclose(self) -> None:
        await self._client.close()


def _request_of(kwargs: dict[str, Any]) -> FinalRequestOptions:
    """The chat request with `kwargs` as its body, encoded here as the SDK encodes it (UTF-8
    JSON, compact, no NaN; pictures spliced in: bot/llm/body.py), so a request the SDK built
    once can take it as it is (`_OpenAI._build_request`). A lone surrogate raises
    UnicodeEncodeError here, as it did in the SDK (`_create` mends it)."""
    return CHAT_REQUEST.model_copy(update={"content": encode_body(kwargs)})


def _is_event_stream(response: httpx2.Response) -> bool:
    """Whether the server answered a streamed request with an event stream (of no events)."""
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")


def _field(value: Any, name: str) -> Any:
    """`name` of a JSON object; None when it has none or is not an object."""
    return value.get(name) if isinstance(value, dict) else None


def _text_of(content: Any) -> str | None:
    """A message's content as text: a string, or the text of its parts (some servers answer
    with a list of parts, as the request may be written)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part if isinstance(part, str) else _field(part, "text") for part in content]
        return "".join(text for text in texts if isinstance(text, str))
    return str(content)


def _count(value: Any) -> int | None:
    """A token count as reported; None for anything that is not a count (null, a string)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def _read_events(
    response: httpx2.Response, answer: Assembled, on_text: Callable[[str], Awaitable[None]]
) -> None:
    """The stream's events into `answer`; what arrived at once goes to `on_text` at once. Only
    what the provider sent is judged here (a failure of `on_text` is the caller's own)."""
    async with contextlib.aclosing(events(response.aiter_bytes())) as batches:
        while True:
            try:
                batch = await anext(batches)
                piece = "".join([answer.add(chunk) for chunk in batch])
            except StopAsyncIteration:
                return
            except ErrorEvent as exc:
                reason = logsafe.mask(str(exc))[:200]
                raise LLMError(f"the model provider broke off its answer: {reason}") from exc
            except (TypeError, ValueError) as exc:  # not UTF-8, not JSON, not a chunk
                raise LLMError(NOT_A_COMPLETION) from exc
            if piece:
                await on_text(piece)


@contextlib.contextmanager
def _provider_errors() -> Iterator[None]:
    """A provider's failure, after the SDK's retries, as one LLMError with a reason; also one
    that breaks a stream mid-answer (the SDK does not wrap its transport's errors there)."""
    try:
        yield
    except openai.APIStatusError as exc:
        overflow, counted = context_overflow(exc.body, str(exc))
        if overflow:
            reason = f"the request is longer than the model's context: {_reason(exc)}"
            window = overflow_window(exc.body, str(exc))
            raise LLMContextOverflow(reason, counted, window) from exc
        reason = _reason(exc)
        refusal = isinstance(exc, openai.BadRequestError) or exc.status_code >= 500
        if refusal and any(word in reason.lower() for word in IMAGE_WORDS):
            raise LLMImagesRefused(f"the model provider refused pictures: {reason}") from exc
        if isinstance(exc, openai.BadRequestError):
            raise LLMBadRequest(f"the model provider rejected the request: {reason}") from exc
        raise LLMError(f"the model provider answered HTTP {exc.status_code}") from exc
    except (openai.APITimeoutError, httpx2.TimeoutException) as exc:
        raise LLMError("the model provider timed out") from exc
    except (openai.APIConnectionError, httpx2.TransportError) as exc:
        raise LLMError("the model provider could not be reached") from exc
    except openai.OpenAIError as exc:
        reason = type(exc).__name__
        raise LLMError(f"the model provider's answer was unusable: {reason}") from exc
    except json.JSONDecodeError as exc:  # a 200 whose body is not JSON: an error page as JSON
        raise LLMError(NOT_A_COMPLETION) from exc


def _reason(exc: openai.APIStatusError) -> str:
    """The provider's own error message, short; never the request (it may hold user text).
    Masked before it is cut, so a cut can never leave the unmasked head of a key."""
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or (body.get("error") or {}).get("message")
        if message:
            return logsafe.mask(str(message))[:200]
    return f"HTTP {exc.status_code}"
