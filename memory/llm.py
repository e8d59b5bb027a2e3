"""The narrow LLM interface that memory/ needs, so it never depends on a concrete client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ToolCall:
    """One tool call as the provider returned it; `arguments` is usually a JSON string."""

    id: str
    name: str
    arguments: Any


@dataclass
class ChatResult:
    """What one chat completion produced."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class LLMError(Exception):
    """The provider failed after the client's own retries (outage, timeout, bad answer)."""


class LLMBadRequest(LLMError):
    """The provider rejected the request itself (HTTP 400), e.g. a forced tool_choice."""


def valid_text(value: Any) -> Any:
    """A string with each lone UTF-16 surrogate replaced by U+FFFD; anything else unchanged.

    UTF-8 cannot hold a lone surrogate, yet JSON can carry one ("\\ud83d" from a model, a
    platform, or a terminal in a broken locale): left in, it fails every later file write and
    request. Call it where text enters from outside.
    """
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


class ChatLLM(Protocol):
    """Anything with one async chat method: the bot's client, or a test double of the far end."""

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult: ...
