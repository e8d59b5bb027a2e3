"""The model's answer as it is written: chat completions with `stream=True`.

A person sees the first words of an answer after the model's first token instead of after its
last. The text arrives in deltas, handed to `on_text` as they come; tool calls arrive in
pieces too (by index: id and name first, the arguments in fragments) and are assembled. The
assembled answer is read by the same code as a whole completion (`LLMClient._to_result`), so a
streamed ChatResult (usage totals included) is exactly what `chat` would have returned, and a
provider's failure becomes the same LLMError, also when the connection breaks mid-answer.

`stream_options.include_usage` asks for the token counts as a last chunk (they feed the token
estimate and the per-user usage accounting); a server that does not know the parameter refuses
the request (400), and is then asked without it from there on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import httpx2
import openai

from bot.llm import NOT_A_COMPLETION, LLMClient, _reason
from memory.llm import ChatResult, LLMBadRequest, LLMError
from memory.text import valid_text

log = logging.getLogger(__name__)

TextSink = Callable[[str], Awaitable[None]]


class StreamingLLMClient(LLMClient):
    """LLMClient that can also stream (`stream`); `chat` is unchanged."""

    _usage_refused = False  # the server refused stream_options once: never sent again

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        on_text: TextSink,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        """Like `chat`, handing each piece of the answer's text to `on_text` as it arrives."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        limit = max_tokens or self.max_output_tokens
        if limit:
            kwargs["max_tokens"] = limit
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if not self._usage_refused:
            kwargs["stream_options"] = {"include_usage": True}
        try:
            try:
                chunks = await self._create(kwargs)
            except openai.BadRequestError as exc:
                if "stream_options" not in kwargs or "stream_options" not in _reason(exc):
                    raise
                log.info("the model provider does not take stream_options; usage not reported")
                self._usage_refused = True
                del kwargs["stream_options"]
                chunks = await self._create(kwargs)
            answer = Assembled()
            async for chunk in _checked(chunks):
                piece = answer.add(chunk)
                if piece:
                    await on_text(piece)
        except openai.BadRequestError as exc:
            raise LLMBadRequest(f"the model provider rejected the request: {_reason(exc)}") from exc
        except (openai.APITimeoutError, httpx2.TimeoutException) as exc:
            raise LLMError("the model provider timed out") from exc
        except (openai.APIConnectionError, httpx2.TransportError) as exc:
            raise LLMError("the model provider could not be reached") from exc
        except openai.APIStatusError as exc:
            raise LLMError(f"the model provider answered HTTP {exc.status_code}") from exc
        except openai.OpenAIError as exc:  # an error event mid-stream, among others
            reason = type(exc).__name__
            raise LLMError(f"the model provider's answer was unusable: {reason}") from exc
        except json.JSONDecodeError as exc:
            raise LLMError(NOT_A_COMPLETION) from exc
        if not answer.chunks:  # a body that was not a stream of events at all
            raise LLMError(NOT_A_COMPLETION)
        if not answer.choices:
            raise LLMError("the model provider answered without any choice")
        try:
            return self._to_result(answer.as_completion())
        except (AttributeError, TypeError) as exc:
            raise LLMError(NOT_A_COMPLETION) from exc


async def _checked(chunks: Any) -> Any:
    """The stream's chunks; anything else (an HTML page answered with 200) is no completion."""
    if isinstance(chunks, str | bytes) or not hasattr(chunks, "__aiter__"):
        raise LLMError(NOT_A_COMPLETION)
    async for chunk in chunks:
        yield chunk


class Assembled:
    """A streamed completion put back together, chunk by chunk."""

    def __init__(self) -> None:
        self.chunks = 0
        self.choices = 0  # chunks that carried the first choice
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}  # index → id, name, argument fragments
        self.finish_reason: str | None = None
        self.usage: Any = None

    def add(self, chunk: Any) -> str:
        """Take one chunk; the text it adds to the answer ("" if none)."""
        self.chunks += 1
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        piece = ""
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue  # only the first choice is ever asked for
            self.choices += 1
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                piece += valid_text(str(delta.content))
            for call in delta.tool_calls or []:
                self._add_call(call)
        if piece:
            self.text.append(piece)
        return piece

    def _add_call(self, call: Any) -> None:
        entry = self.calls.setdefault(call.index, {"id": None, "name": "", "arguments": []})
        if call.id:
            entry["id"] = call.id
        function = call.function
        if function is not None:
            if function.name:
                entry["name"] += function.name
            if function.arguments:
                entry["arguments"].append(function.arguments)

    def as_completion(self) -> Any:
        """The shape of a whole completion, for LLMClient._to_result."""
        calls = [
            SimpleNamespace(
                id=entry["id"],
                function=SimpleNamespace(name=entry["name"], arguments="".join(entry["arguments"])),
            )
            for _, entry in sorted(self.calls.items())
            if entry["name"]
        ]
        message = SimpleNamespace(
            content="".join(self.text) if self.text else None, tool_calls=calls
        )
        choice = SimpleNamespace(message=message, finish_reason=self.finish_reason)
        return SimpleNamespace(choices=[choice], usage=self.usage)
