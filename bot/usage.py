"""Who spent which tokens: every model call is charged to the person it was made for.

The agent's calls and the consolidator's (which folds a person's conversation into their own
memory) go through one `ChargedLLM`, which books the provider's reported tokens to the user whose
turn is running: `charged_to(user_key)` marks it for the current task and every task it starts
(asyncio copies the context), so a consolidation in the background is charged to its owner too.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from bot.llm.stream import stream_or_chat
from memory.llm import ChatLLM, ChatResult
from memory.usage import USAGE_FILE, UsageLog
from memory.workspace import Workspaces

log = logging.getLogger(__name__)

GLOBAL_USAGE_FILE = ".usage.jsonl"  # in the workspaces folder: the whole bot's spending
_charged: contextvars.ContextVar[str | None] = contextvars.ContextVar("charged", default=None)


@contextlib.contextmanager
def charged_to(user_key: str) -> Iterator[None]:
    """Charge the model calls made from here (and from tasks started here) to `user_key`."""
    token = _charged.set(user_key)
    try:
        yield
    finally:
        _charged.reset(token)


class UsageBook:
    """Each user's usage file (in their workspace) and the whole bot's, read once, then kept."""

    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces
        self.everyone = UsageLog(Path(workspaces.base_dir) / GLOBAL_USAGE_FILE)
        self._logs: dict[str, UsageLog] = {}

    def of(self, user_key: str) -> UsageLog:
        found = self._logs.get(user_key)
        if found is None:
            root = self.workspaces.get(user_key).root
            found = self._logs[user_key] = UsageLog(root / USAGE_FILE)
        return found

    def forget_user(self, user_key: str) -> None:
        """Drop the user's log from RAM (their workspace left it, or was wiped); read again when
        needed."""
        self._logs.pop(user_key, None)

    def record(self, user_key: str | None, prompt: int, completion: int) -> None:
        """Book one call's tokens. A failed write is logged, never fails the turn: the answer
        matters more than the tally."""
        if not prompt and not completion:
            return
        logs = [self.everyone] + ([self.of(user_key)] if user_key else [])
        for usage in logs:
            try:
                usage.record(prompt, completion)
            except OSError as exc:
                log.error("could not record token usage in %s: %s", usage.path, exc)


Estimate = Callable[[list[dict[str, Any]], ChatResult], tuple[int, int]]


class ChargedLLM:
    """A ChatLLM that books every call's tokens to the user it is charged to: the provider's
    count, or, for an answer that came without one (llama-cpp-python's streams never report
    usage), `estimate`'s, so [limits] tokens_per_day holds on such a server too."""

    def __init__(self, inner: ChatLLM, book: UsageBook, estimate: Estimate | None = None) -> None:
        self.inner = inner
        self.book = book
        self.estimate = estimate

    def _charge(self, messages: list[dict[str, Any]], result: ChatResult) -> None:
        prompt, completion = result.prompt_tokens, result.completion_tokens
        if prompt is None and completion is None and self.estimate is not None:
            prompt, completion = self.estimate(messages, result)
        self.book.record(_charged.get(), prompt or 0, completion or 0)

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        result = await self.inner.chat(
            messages, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens
        )
        self._charge(messages, result)
        return result

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        on_text: Callable[[str], Awaitable[None]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        """`chat`, its text handed to `on_text` as it is written (bot/llm/stream.py), booked the
        same way. A client that cannot stream answers whole: its text is then one piece."""
        result = await stream_or_chat(
            self.inner,
            messages,
            on_text=on_text,
            tools=tools,
            tool_choice=tool_choice,
            max_tokens=max_tokens,
        )
        self._charge(messages, result)
        return result

    @property
    def model(self) -> str:
        return self.inner.model

    async def aclose(self) -> None:
        await self.inner.aclose()
