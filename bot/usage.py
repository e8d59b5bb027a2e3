"""Who spent which tokens, and what they cost: every model call is charged to the person it was
made for.

The agent's calls and the consolidator's (which folds a person's conversation into their own
memory) go through one `ChargedLLM`, which books the provider's reported tokens, with the model
that answered and the prompt tokens it read from its cache, to the user whose turn is running:
`charged_to(user_key)` marks it for the current task and every task it starts (asyncio copies the
context), so a consolidation in the background is charged to its owner too.

Tokens are what is kept; money is worked out when it is shown, from [prices] (`Prices`), so a
corrected price corrects the past too, and the figures are exact decimals, never summed floats.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from bot.config import Config, Price
from bot.llm.stream import stream_or_chat
from memory.llm import ChatLLM, ChatResult
from memory.usage import UNNAMED, USAGE_FILE, Totals, UsageLog
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

    def record(
        self,
        user_key: str | None,
        prompt: int,
        completion: int,
        *,
        model: str = UNNAMED,
        cached: int = 0,
    ) -> None:
        """Book one call's tokens. A failed write is logged, never fails the turn: the answer
        matters more than the tally."""
        if not prompt and not completion:
            return
        logs = [self.everyone] + ([self.of(user_key)] if user_key else [])
        for usage in logs:
            try:
                usage.record(prompt, completion, model=model, cached_prompt_tokens=cached)
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
        self.book.record(
            _charged.get(),
            prompt or 0,
            completion or 0,
            model=result.model or self.inner.model,
            cached=result.cached_prompt_tokens or 0,
        )

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


# ---- what it cost ---------------------------------------------------------------------------

MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class Cost:
    """Money spent at [prices], and the tokens of models that have no price there."""

    amount: Decimal = Decimal(0)
    unpriced_tokens: int = 0


class Prices:
    """[prices] applied to tokens. A usage line that names no model was written before models
    were recorded, when the bot had one model only: it counts as `default_model`'s ([llm] model),
    the likely truth, and the safe side for a cost cap."""

    def __init__(self, table: Mapping[str, Price], default_model: str) -> None:
        self.table = {model: _exact(price) for model, price in table.items()}
        self.default_model = default_model

    @classmethod
    def of(cls, config: Config) -> Prices:
        return cls(config.prices, config.llm.model)

    @property
    def set(self) -> bool:
        """Whether any price is set: without one, no money is shown anywhere."""
        return bool(self.table)

    def model(self, name: str) -> str:
        """The model a usage line's name stands for."""
        return name or self.default_model

    def by_model(self, usage: Mapping[str, Totals]) -> dict[str, Totals]:
        """`usage` with the unnamed model's lines counted as the default model's."""
        merged: dict[str, Totals] = {}
        for name, totals in usage.items():
            model = self.model(name)
            merged[model] = merged.get(model, Totals()) + totals
        return merged

    def of_model(self, name: str, totals: Totals) -> Decimal | None:
        """What `totals` of model `name` cost; None when it has no price."""
        price = self.table.get(self.model(name))
        if price is None:
            return None
        read_input, read_cached, written = price
        fresh = totals.prompt_tokens - totals.cached_prompt_tokens
        spent = fresh * read_input + totals.cached_prompt_tokens * read_cached
        return (spent + totals.completion_tokens * written) / MILLION

    def cost(self, usage: Mapping[str, Totals]) -> Cost:
        amount, unpriced = Decimal(0), 0
        for name, totals in usage.items():
            spent = self.of_model(name, totals)
            if spent is None:
                unpriced += totals.tokens
            else:
                amount += spent
        return Cost(amount, unpriced)


def priced_estimate(config: Config, model: str, prompt: int, completion: int) -> str | None:
    """What so many tokens of `model` would cost at [prices], in words ("~$0.0123"); None when
    the model has no price (an estimate shown before work that asks the model)."""
    cost = Prices.of(config).of_model(
        model, Totals(prompt_tokens=prompt, completion_tokens=completion)
    )
    return None if cost is None else f"~{money(cost)}"


def _exact(price: Price) -> tuple[Decimal, Decimal, Decimal]:
    """(input, cached input, output) as the decimals the config file wrote (0.15, not
    0.1499999…)."""
    cached = price.input if price.cached_input is None else price.cached_input
    return Decimal(repr(price.input)), Decimal(repr(cached)), Decimal(repr(price.output))


def money(amount: Decimal | float) -> str:
    """An amount as people read it: cents from a dollar up, or when that is all it has
    ("$0.50"), else four decimals ("$0.0123"); a spend too small for them is "<$0.0001"."""
    value = Decimal(repr(amount)) if isinstance(amount, float) else amount
    if value >= 1 or value == value.quantize(Decimal("0.01")):
        return f"${value:,.2f}"
    if 0 < value < Decimal("0.0001"):
        return "<$0.0001"
    return f"${value:.4f}"
