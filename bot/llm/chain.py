"""An ordered chain of OpenAI-compatible endpoints: `[llm]` first, then each `[[llm.fallback]]`.

WHY: a self-hosted model is sometimes busy or down; a hosted one behind it keeps the bot
answering. Each endpoint is an `LLMClient` (bot/llm/client.py), not a copy of it. A call goes to
the first endpoint whose breaker (bot/llm/breaker.py) lets it through and whose window holds the
request; when it fails before any of the answer was shown (refused connection, timeout, 5xx,
429, a context refusal), the next is asked. Once text was shown the failure is the caller's:
an answer is never silently begun again on another model (the turn says it was cut).

Sizing: the agent builds the prompt for `[llm]`'s window. A fallback with a window of its own
is given the request only if the request fits it (prompt as the estimate counts it, and an
answer of at least MIN_ANSWER tokens, the answer's limit lowered to what is left); otherwise it
is passed over, so a small local window never receives a prompt sized for a large hosted one.
A fallback's window is configured, or learnt from its first refusal (the window its server names).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from bot.llm.breaker import Breaker
from bot.llm.client import LLMClient
from bot.llm.stream import stream_or_chat
from memory.llm import ChatResult, LLMBadRequest, LLMContextOverflow, LLMError
from memory.tokens import TokenEstimator

if TYPE_CHECKING:
    from bot.config import Endpoint, LLMConfig

log = logging.getLogger(__name__)

MIN_ANSWER = 256  # tokens a fallback must have room to answer in, or it is passed over
MARGIN = 0.05  # of a fallback's window, kept free for the estimate's error
NONE_LEFT = "no model endpoint could take the request"

# (messages, tools) → the request's prompt tokens as the provider would count them
Measure = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], int]
# The model the person being answered chose (/model), asked first; None: the chain's order.
_preferred: ContextVar[str | None] = ContextVar("preferred_model", default=None)


@contextlib.contextmanager
def preferring(model: str | None) -> Iterator[None]:
    """Within it (a message's handling, the consolidation it starts), `model`'s endpoint is
    asked first, then the others in their order."""
    token = _preferred.set(model)
    try:
        yield
    finally:
        _preferred.reset(token)


# (endpoint, outcome, seconds): each call of an endpoint (bot/observe/metrics.py counts them)
OnCall = Callable[[str, str, float], None]


@dataclass
class Link:
    """One endpoint of the chain: its client, its own window, whether it sees pictures."""

    client: LLMClient
    name: str  # "model@host": the metrics' label, the log's
    window: int | None  # None: whatever the agent sized the prompt for
    vision: bool
    breaker: Breaker = field(default_factory=Breaker)


def failure_kind(exc: LLMError) -> str:
    """context_overflow, bad_request, timeout, connection, http_<status>, or other."""
    if isinstance(exc, LLMContextOverflow):
        return "context_overflow"
    if isinstance(exc, LLMBadRequest):
        return "bad_request"
    status = getattr(exc.__cause__, "status_code", None)
    if isinstance(status, int):
        return f"http_{status}"
    text = str(exc)
    if "timed out" in text:
        return "timeout"
    if "could not be reached" in text:
        return "connection"
    return "other"


class ChainLLM:
    """A ChatLLM over the endpoints in order (the first is the one the agent is sized for)."""

    def __init__(
        self,
        links: list[Link],
        measure: Measure | None = None,
        on_call: OnCall | None = None,
        *,
        first_sized: bool = True,
    ) -> None:
        """`first_sized`: the agent built the prompt for the first endpoint's window (the chat
        chain), so only the others are checked against theirs."""
        if not links:
            raise ValueError("a chain needs an endpoint")
        self.links = links
        self._measure = measure
        self.on_call = on_call
        self._first_sized = first_sized

    @property
    def model(self) -> str:
        return self.links[0].client.model

    @property
    def models(self) -> list[str]:
        """The endpoints' models, in order, each once: what /model offers."""
        return list(dict.fromkeys(link.client.model for link in self.links))

    def in_use(self) -> tuple[str, str | None]:
        """The model that answers now (for /status), and the one it stands in for when it is a
        fallback: the first endpoint in this context's order whose breaker is not open."""
        order = self._order()
        link = next((one for one in order if one.breaker.state != "open"), order[0])
        return link.client.model, None if link is order[0] else order[0].client.model

    def _order(self) -> list[Link]:
        """The endpoints in the order to ask them: the preferred model's first."""
        model = _preferred.get()
        if model is None or model == self.links[0].client.model:
            return self.links
        chosen = [link for link in self.links if link.client.model == model]
        return chosen + [link for link in self.links if link not in chosen]

    async def aclose(self) -> None:
        for link in self.links:
            await link.client.aclose()

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        async def ask(link: Link, limit: int | None) -> ChatResult:
            return await link.client.chat(
                messages, tools=tools, tool_choice=tool_choice, max_tokens=limit
            )

        return await self._first(messages, tools, max_tokens, ask, lambda: False)

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        on_text: Callable[[str], Awaitable[None]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        shown = False

        async def passed_on(text: str) -> None:
            nonlocal shown
            shown = True
            await on_text(text)

        async def ask(link: Link, limit: int | None) -> ChatResult:
            return await stream_or_chat(
                link.client,
                messages,
                on_text=passed_on,
                tools=tools,
                tool_choice=tool_choice,
                max_tokens=limit,
            )

        return await self._first(messages, tools, max_tokens, ask, lambda: shown)

    async def _first(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        max_tokens: int | None,
        ask: Callable[[Link, int | None], Awaitable[ChatResult]],
        shown: Callable[[], bool],
    ) -> ChatResult:
        """The first endpoint's answer that can be had; the last failure if none."""
        failure: LLMError | None = None
        order = self._order()
        for index, link in enumerate(order):
            limit = max_tokens
            if link is not self.links[0] or not self._first_sized:
                fits, limit = self._fits(link, messages, tools, max_tokens)
                if not fits:
                    self._count(link, "passed_over", 0.0)
                    continue
            if not link.breaker.allow():
                continue
            started = time.monotonic()
            try:
                result = await ask(link, limit)
            except LLMContextOverflow as exc:  # a working server, a window too small
                link.breaker.succeeded()
                self._count(link, "context_overflow", time.monotonic() - started)
                self._learn(link, exc, messages, tools, limit)
                if shown() or index == len(order) - 1:
                    raise
                failure = exc
                continue
            except LLMBadRequest as exc:  # the request, not the endpoint: the same elsewhere
                link.breaker.succeeded()
                self._count(link, failure_kind(exc), time.monotonic() - started)
                raise
            except LLMError as exc:
                link.breaker.failed(_retry_after(exc))
                self._count(link, failure_kind(exc), time.monotonic() - started)
                log.warning("model endpoint %s failed: %s", link.name, failure_kind(exc))
                if shown():
                    raise  # part of the answer is out: not begun again elsewhere
                failure = exc
                continue
            except BaseException:
                link.breaker.released()
                raise
            link.breaker.succeeded()
            self._count(link, "ok", time.monotonic() - started)
            return result
        raise failure or LLMError(NONE_LEFT)

    def _fits(
        self,
        link: Link,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        max_tokens: int | None,
    ) -> tuple[bool, int | None]:
        """Whether a fallback can take the request, and the answer's limit it is sent with."""
        if not link.vision and _has_pictures(messages):
            return False, max_tokens
        if link.window is None or self._measure is None:
            return True, max_tokens
        room = int(link.window * (1 - MARGIN)) - self._measure(messages, tools)
        wanted = max_tokens or link.client.max_output_tokens or room
        if room < min(MIN_ANSWER, wanted):
            return False, max_tokens
        return True, min(wanted, room)

    def _learn(
        self,
        link: Link,
        exc: LLMContextOverflow,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        limit: int | None,
    ) -> None:
        """A fallback's refusal sizes it: the window its server named, else at most what it
        refused, so a request as large is passed over from now on instead of asked and refused
        each time. (The first endpoint's window is the agent's to learn: bot/agent/sizing.py.)"""
        if link is self.links[0] and self._first_sized:
            return
        if exc.window:
            window = exc.window
        elif self._measure is not None:
            window = self._measure(messages, tools) + (limit or 0)
        else:
            return
        if link.window is None or window < link.window:
            log.warning("model endpoint %s: a window of %d tokens (its refusal)", link.name, window)
            link.window = window

    def _count(self, link: Link, outcome: str, seconds: float) -> None:
        if self.on_call is not None:
            self.on_call(link.name, outcome, seconds)


def _has_pictures(messages: list[dict[str, Any]]) -> bool:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") == "image_url" for part in content
        ):
            return True
    return False


def _retry_after(exc: LLMError) -> float | None:
    """The seconds a 429's Retry-After asked for (a date, or nothing: None)."""
    response = getattr(exc.__cause__, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def endpoint_name(model: str, base_url: str | None) -> str:
    """ "model@host:port", the endpoint's label ("api.openai.com" when no URL is set)."""
    host = urlsplit(base_url).netloc if base_url else "api.openai.com"
    return f"{model}@{host}"


def chain_of(
    llm: LLMConfig,
    fallbacks: list[Endpoint],
    measure: Measure | None = None,
    on_call: OnCall | None = None,
) -> LLMClient | ChainLLM:
    """[llm]'s client, alone when no fallback is configured (no breaker: one endpoint cannot
    be passed over), else the chain of it and the fallbacks."""
    first = LLMClient.from_config(llm)
    if not fallbacks:
        return first
    links = [Link(first, endpoint_name(llm.model, llm.base_url), None, llm.vision, _breaker(llm))]
    links += [link_of(one, llm, _breaker(llm)) for one in fallbacks]
    return ChainLLM(links, measure, on_call)


def _breaker(llm: LLMConfig) -> Breaker:
    return Breaker(llm.breaker_failures, llm.breaker_cooldown_s)


def link_of(endpoint: Endpoint, llm: LLMConfig, breaker: Breaker) -> Link:
    """An endpoint's client, with [llm]'s temperature."""
    client = LLMClient(
        model=endpoint.model,
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        timeout_s=endpoint.timeout_s,
        max_retries=endpoint.max_retries,
        max_output_tokens=endpoint.max_output_tokens,
        temperature=llm.temperature,
    )
    name = endpoint_name(endpoint.model, endpoint.base_url)
    return Link(client, name, endpoint.context_window_tokens, endpoint.vision, breaker)


def consolidation_chain(
    llm: LLMConfig,
    endpoints: list[Endpoint],
    measure: Measure | None = None,
    on_call: OnCall | None = None,
) -> ChainLLM:
    """[[consolidation.endpoints]] as a chain: each sized on its own (none is the one the
    agent's prompt was built for)."""
    links = [link_of(one, llm, _breaker(llm)) for one in endpoints]
    return ChainLLM(links, measure, on_call, first_sized=False)


def measure_by(estimator: TokenEstimator) -> Measure:
    """A request's prompt tokens as `estimator` counts them (corrected as it learnt)."""

    def measure(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        raw = estimator.raw_request_tokens(messages, json.dumps(tools) if tools else "")
        return estimator.corrected(raw)

    return measure
