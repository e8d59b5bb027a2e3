"""Every metric LightGrep exports, defined once, and the small functions that count them.

Prometheus names and labels live here only. The core is counted from the outside: `MeteredCore`
wraps what adapters call (`handle`), `MeteredLLM` wraps the model client (every call of the agent
and of the consolidator goes through it), and the consolidator reports its outcomes through a
plain callback (`count_consolidation`), so memory/ imports nothing of this. Anyone else counts with
the functions below (e.g. `count_limit_refusal` for a limit that refuses a message).

The registry is our own, not prometheus_client's global one: nothing else in the process adds
metrics to what /metrics shows. Counters only grow for the process's lifetime; rates are the
scraper's job.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bot.commands.registry import parse_command
from bot.llm.breaker import STATE_VALUES, Breaker
from bot.llm.chain import ChainLLM, failure_kind
from bot.llm.stream import stream_or_chat
from memory.llm import ChatLLM, ChatResult, LLMError

if TYPE_CHECKING:
    from bot.inbound import Inbound
    from bot.outbound import Outbound
    from bot.platform import Core

REGISTRY = CollectorRegistry(auto_describe=True)

CALL_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)  # seconds: an answer, a model call
TURNS = Counter(
    "lightgrep_turns",
    "Messages handed to the core, by platform, kind (turn or command) and outcome.",
    ["platform", "kind", "outcome"],
    registry=REGISTRY,
)
ANSWER_SECONDS = Histogram(
    "lightgrep_answer_seconds",
    "Time from a message reaching the core to its whole answer, by platform and kind.",
    ["platform", "kind"],
    buckets=CALL_BUCKETS,
    registry=REGISTRY,
)
LLM_CALLS = Counter(
    "lightgrep_llm_calls",
    "Calls to the model, by purpose (chat or consolidation) and outcome (ok or an error kind).",
    ["purpose", "outcome"],
    registry=REGISTRY,
)
LLM_SECONDS = Histogram(
    "lightgrep_llm_call_seconds",
    "Duration of one model call, by purpose.",
    ["purpose"],
    buckets=CALL_BUCKETS,
    registry=REGISTRY,
)
ENDPOINT_CALLS = Counter(
    "lightgrep_llm_endpoint_calls",
    "Calls to each model endpoint of a chain ([[llm.fallback]], [[consolidation.endpoints]]), "
    "by endpoint (model@host) and outcome: ok, an error kind, or passed_over (its window "
    "could not hold the request, or it cannot see the pictures).",
    ["endpoint", "outcome"],
    registry=REGISTRY,
)
ENDPOINT_SECONDS = Histogram(
    "lightgrep_llm_endpoint_seconds",
    "Duration of one call of a chain's endpoint, until it answered or failed.",
    ["endpoint"],
    buckets=CALL_BUCKETS,
    registry=REGISTRY,
)
BREAKER_STATE = Gauge(
    "lightgrep_llm_endpoint_breaker",
    "Each chain endpoint's circuit breaker: 0 closed (asked), 1 open (passed over), "
    "2 half-open (one call probes it).",
    ["endpoint"],
    registry=REGISTRY,
)
TOKENS = Counter(
    "lightgrep_llm_tokens",
    "Tokens the provider reported, by purpose and kind (prompt or completion).",
    ["purpose", "kind"],
    registry=REGISTRY,
)
CONSOLIDATIONS = Counter(
    "lightgrep_consolidations",
    "Chunks of a session moved into MEMORY.md/HISTORY.md, by outcome (consolidated, or "
    "raw_archive after repeated failures).",
    ["outcome"],
    registry=REGISTRY,
)
LIMIT_REFUSALS = Counter(
    "lightgrep_limit_refusals",
    "Messages refused because a usage limit was reached, by limit.",
    ["limit"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "lightgrep_updates_in_flight",
    "Platform updates accepted and not yet handled (running or waiting), by platform.",
    ["platform"],
    registry=REGISTRY,
)

# `lightgrep ingress` and `lightgrep worker` (bot/cluster/). kind: "message" (a user's, from the
# ingress to a worker) or "answer" (back).
CLUSTER_PUBLISHED = Counter(
    "lightgrep_cluster_published",
    "Messages JetStream acknowledged storing, by kind (message, answer or receipt).",
    ["kind"],
    registry=REGISTRY,
)
CLUSTER_ACKED = Counter(
    "lightgrep_cluster_acked",
    "Messages this process was done with and acknowledged, by kind (message: answered by a "
    "worker; answer: sent by an ingress; receipt: where an answer went, noted by a worker).",
    ["kind"],
    registry=REGISTRY,
)
CLUSTER_REDELIVERED = Counter(
    "lightgrep_cluster_redelivered",
    "Messages JetStream delivered here again (a worker or ingress died, or an ack wait "
    "passed), by kind.",
    ["kind"],
    registry=REGISTRY,
)
CLUSTER_REJECTED = Counter(
    "lightgrep_cluster_rejected",
    "Messages dropped (terminated in JetStream) instead of handled, by kind and reason: "
    "malformed (cannot be decoded), unauthenticated (not signed with [cluster] signing_key), "
    "replayed (a signed message published again, or too old), too_many_deliveries "
    "(delivered more than [cluster] max_deliveries times), failed (our own code raised on it).",
    ["kind", "reason"],
    registry=REGISTRY,
)
CLUSTER_RESENT = Counter(
    "lightgrep_cluster_resent",
    "Answers an ingress sent by their destination, their own ingress having stopped.",
    registry=REGISTRY,
)
CLUSTER_CONNECTED = Gauge(
    "lightgrep_cluster_nats_connected",
    "1 while this process is connected to NATS.",
    registry=REGISTRY,
)
CLUSTER_LEASE_HELD = Gauge(
    "lightgrep_cluster_lease_held",
    "1 while this worker holds its claim on the partition.",
    ["partition"],
    registry=REGISTRY,
)
CLUSTER_WAITING = Gauge(
    "lightgrep_cluster_waiting",
    "An ingress's messages published whose answer has not come yet.",
    registry=REGISTRY,
)

CONSOLIDATION_TOOL = "save_memory"


def count_consolidation(outcome: str) -> None:
    """ "consolidated" or "raw_archive": the consolidator's callback."""
    CONSOLIDATIONS.labels(outcome).inc()


def count_endpoint_call(endpoint: str, outcome: str, seconds: float) -> None:
    """One call of a chain's endpoint (bot.llm.chain.OnCall); a call passed over took none."""
    ENDPOINT_CALLS.labels(endpoint, outcome).inc()
    if outcome != "passed_over":
        ENDPOINT_SECONDS.labels(endpoint).observe(seconds)


def watch_breakers(chain: ChainLLM) -> None:
    """Read each endpoint's breaker at every scrape."""
    for link in chain.links:
        read = functools.partial(_breaker_value, link.breaker)
        BREAKER_STATE.labels(link.name).set_function(read)


def _breaker_value(breaker: Breaker) -> float:
    return float(STATE_VALUES[breaker.state])


def count_limit_refusal(limit: str) -> None:
    """A message refused by a usage limit (e.g. "messages_per_minute", "tokens_per_day")."""
    LIMIT_REFUSALS.labels(limit).inc()


def watch_in_flight(platform: str, count: Callable[[], int]) -> None:
    """Read `count()` at every scrape as the platform's updates in flight."""
    IN_FLIGHT.labels(platform).set_function(count)


def count_cluster(counter: Counter, kind: str | None = None, n: int = 1) -> None:
    """One of the CLUSTER_ counters, by kind where it has one."""
    (counter.labels(kind) if kind is not None else counter).inc(n)


def count_rejected(kind: str, reason: str) -> None:
    """A cluster message dropped instead of handled (see CLUSTER_REJECTED)."""
    CLUSTER_REJECTED.labels(kind, reason).inc()


def watch_cluster(
    connected: Callable[[], bool],
    waiting: Callable[[], int] | None = None,
    leases: dict[int, Callable[[], bool]] | None = None,
) -> None:
    """Read at every scrape: connected to NATS, answers awaited, each partition's claim held."""
    CLUSTER_CONNECTED.set_function(lambda: float(connected()))
    if waiting is not None:
        CLUSTER_WAITING.set_function(lambda: float(waiting()))
    for partition, held in (leases or {}).items():
        CLUSTER_LEASE_HELD.labels(str(partition)).set_function(functools.partial(_as_float, held))


def _as_float(read: Callable[[], bool]) -> float:
    return float(read())


class ModelHealth:
    """Whether the model answered lately: the outcome of the newest call, when it was."""

    def __init__(self) -> None:
        self.ok: bool | None = None  # None: no call yet
        self.at = 0.0  # time.monotonic() of that call
        self.error = ""

    def record(self, ok: bool, error: str = "") -> None:
        self.ok, self.at, self.error = ok, time.monotonic(), error


MODEL = ModelHealth()


class MeteredLLM:
    """The model client, counted: calls, errors by kind, duration, reported tokens."""

    def __init__(self, llm: ChatLLM) -> None:
        self._llm = llm

    @property
    def model(self) -> str:
        return self._llm.model

    async def aclose(self) -> None:
        await self._llm.aclose()

    async def chat(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResult:  # fmt: skip
        return await self._metered(tools, lambda: self._llm.chat(messages, tools=tools, **options))

    async def stream(
        self, messages: list[dict[str, Any]], *, on_text: Callable[[str], Awaitable[None]],
        tools: list[dict[str, Any]] | None = None, **options: Any,
    ) -> ChatResult:  # fmt: skip
        """A streamed call (LLMClient.stream), counted the same way; its duration is the whole
        answer's."""
        return await self._metered(
            tools,
            lambda: stream_or_chat(self._llm, messages, on_text=on_text, tools=tools, **options),
        )

    async def _metered(
        self, tools: list[dict[str, Any]] | None, call: Callable[[], Awaitable[ChatResult]]
    ) -> ChatResult:
        purpose = "consolidation" if _offers(tools, CONSOLIDATION_TOOL) else "chat"
        started = time.monotonic()
        try:
            result = await call()
        except LLMError as exc:
            kind = llm_error_kind(exc)
            LLM_CALLS.labels(purpose, kind).inc()
            MODEL.record(kind == "bad_request", str(exc))  # a 400 came from a working server
            raise
        finally:
            LLM_SECONDS.labels(purpose).observe(time.monotonic() - started)
        LLM_CALLS.labels(purpose, "ok").inc()
        MODEL.record(True)
        if result.prompt_tokens:
            TOKENS.labels(purpose, "prompt").inc(result.prompt_tokens)
        if result.completion_tokens:
            TOKENS.labels(purpose, "completion").inc(result.completion_tokens)
        return result


def llm_error_kind(exc: LLMError) -> str:
    """bad_request, timeout, connection, http_<status>, or other."""
    kind = failure_kind(exc)
    return "bad_request" if kind == "context_overflow" else kind


class MeteredCore:
    """The core as adapters see it, counted: every message, its kind, outcome and answer time."""

    def __init__(self, core: Core) -> None:
        self._core = core

    async def handle(self, inbound: Inbound, out: Outbound) -> None:
        if inbound.delivered is not None:  # a receipt of an answer sent: no message of anyone's
            await self._core.handle(inbound, out)
            return
        kind = "command" if parse_command(inbound.text) is not None else "turn"
        started = time.monotonic()
        try:
            await self._core.handle(inbound, out)
        except BaseException:
            TURNS.labels(inbound.platform, kind, "error").inc()
            raise
        TURNS.labels(inbound.platform, kind, "ok").inc()
        ANSWER_SECONDS.labels(inbound.platform, kind).observe(time.monotonic() - started)


def _offers(tools: list[dict[str, Any]] | None, name: str) -> bool:
    return any((t.get("function") or {}).get("name") == name for t in tools or [])
