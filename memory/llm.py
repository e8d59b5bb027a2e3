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
    # Of prompt_tokens, those the server read from its cache (priced lower), where it says so.
    cached_prompt_tokens: int | None = None
    # The model that answered, as configured (a chain's fallback names its own): prices key on it.
    model: str | None = None


class LLMError(Exception):
    """The provider failed after the client's own retries (outage, timeout, bad answer)."""


class LLMBadRequest(LLMError):
    """The provider rejected the request itself (HTTP 400), e.g. a forced tool_choice."""


class ChatLLM(Protocol):
    """A model client: the bot's own, or one wrapping it (usage, metrics). `model` names the
    model for /status; `aclose` lets go of its connections."""

    @property
    def model(self) -> str: ...

    async def aclose(self) -> None: ...

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult: ...


class LLMContextOverflow(LLMBadRequest):
    """The provider refused the request as longer than the model's context window.

    `prompt_tokens` is the prompt size the provider counted and `window` its context window,
    when its message says so."""

    def __init__(
        self, message: str, prompt_tokens: int | None = None, window: int | None = None
    ) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.window = window
