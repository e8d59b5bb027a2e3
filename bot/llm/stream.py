"""The model's answer as it is written: the chunks of a chat completion with `stream=True`.

A person sees the first words of an answer after the model's first token instead of after its
last. The text arrives in deltas, handed on as they come (`LLMClient.stream`); tool calls
arrive in pieces too (by index: id and name first, the arguments in fragments) and are
assembled here. The assembled answer has the shape of a whole completion, so it is read by the
same code as one (`LLMClient._to_result`): a streamed ChatResult, usage totals included, is
what `chat` would have returned.

`stream_options.include_usage` asks for the token counts as a last chunk (they feed the token
estimate and the per-user usage accounting).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from memory.llm import ChatLLM, ChatResult
from memory.text import valid_text


async def stream_or_chat(
    llm: ChatLLM,
    messages: list[dict[str, Any]],
    *,
    on_text: Callable[[str], Awaitable[None]],
    tools: list[dict[str, Any]] | None = None,
    **options: Any,
) -> ChatResult:
    """`llm.stream` where the client can stream; else its `chat`, the answer's text handed on
    as one piece (what a wrapper of any ChatLLM calls)."""
    stream = getattr(llm, "stream", None)
    if stream is not None:
        result: ChatResult = await stream(messages, on_text=on_text, tools=tools, **options)
        return result
    result = await llm.chat(messages, tools=tools, **options)
    if result.content and not result.tool_calls:
        await on_text(result.content)
    return result


class Assembled:
    """A streamed completion put back together from its chunks (JSON, bot/llm/sse.py). A
    chunk of the wrong shape raises TypeError: the answer is not a completion."""

    def __init__(self) -> None:
        self.chunks = 0
        self.choices = 0  # chunks that carried the first choice
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}  # index → id, name, argument fragments
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: Any) -> str:
        """Take one chunk; the text it adds to the answer ("" if none). Called for every word
        of every answer, so its checks are written out here rather than in helpers."""
        self.chunks += 1
        if not isinstance(chunk, dict):
            raise _wrong(chunk, "object")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = chunk.get("choices")
        if choices is None:
            return ""
        if not isinstance(choices, list):
            raise _wrong(choices, "list")
        piece = ""
        for choice in choices:
            if not isinstance(choice, dict):
                raise _wrong(choice, "object")
            if choice.get("index"):
                continue  # only the first choice (index 0, or none given) is ever asked for
            self.choices += 1
            finish_reason = choice.get("finish_reason")
            if finish_reason is not None:
                self.finish_reason = finish_reason
            delta = choice.get("delta")
            if delta is None:
                continue
            if not isinstance(delta, dict):
                raise _wrong(delta, "object")
            content = delta.get("content")
            if content:
                piece += valid_text(str(content))
            calls = delta.get("tool_calls")
            if calls is not None:
                for call in _list(calls):
                    self._add_call(call)
        if piece:
            self.text.append(piece)
        return piece

    def _add_call(self, call: Any) -> None:
        """A piece of a tool call. Where a server leaves out the index, a piece with an id
        other than the last call's starts the next call; any other piece continues it."""
        _object(call)
        index = call.get("index")
        if not isinstance(index, int):
            last = max(self.calls, default=-1)
            fresh = last < 0 or (call.get("id") and call["id"] != self.calls[last]["id"])
            index = last + 1 if fresh else last
        entry = self.calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        if call.get("id"):
            entry["id"] = call["id"]
        function = call.get("function")
        if function is not None:
            _object(function)
            if function.get("name"):
                entry["name"] += str(function["name"])
            if function.get("arguments"):
                entry["arguments"].append(str(function["arguments"]))

    def as_completion(self) -> dict[str, Any]:
        """The JSON of the whole completion it was, read as one (LLMClient._to_result)."""
        calls = [
            {
                "id": entry["id"],
                "type": "function",
                "function": {"name": entry["name"], "arguments": "".join(entry["arguments"])},
            }
            for _, entry in sorted(self.calls.items())
            if entry["name"]
        ]
        content = "".join(self.text) if self.text else None
        message = {"role": "assistant", "content": content, "tool_calls": calls}
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        return {"choices": [choice], "usage": self.usage}


def _wrong(value: Any, expected: str) -> TypeError:
    return TypeError(f"expected a JSON {expected}, got {type(value).__name__}")


def _object(value: Any) -> None:
    if not isinstance(value, dict):
        raise _wrong(value, "object")


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong(value, "list")
    return value
