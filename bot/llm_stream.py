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
from types import SimpleNamespace
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
        content = "".join(self.text) if self.text else None
        message = SimpleNamespace(content=content, tool_calls=calls)
        choice = SimpleNamespace(message=message, finish_reason=self.finish_reason)
        return SimpleNamespace(choices=[choice], usage=self.usage)
