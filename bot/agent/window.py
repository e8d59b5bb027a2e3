"""The context window: how it is shared, whether it is big enough, and what the server says.

The configured `context_window_tokens` is a promise about the server. Several servers can tell
their real window: llama.cpp's server (`/props`), vLLM (`/v1/models`, `max_model_len`) and
Ollama (`/api/show`; beyond its `num_ctx` Ollama silently cuts the prompt's beginning, which
is the system prompt holding MEMORY.md). `doctor` compares the two; the bot warns at start-up.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from bot.agent.prompt import ContextBuilder
from bot.agent.tools import REMIND_SCHEMA, TOOL_SCHEMAS
from bot.config import Config, LLMConfig
from memory.consolidation.budget import EXCHANGE_TOKENS, Budget, default_margin, memory_budget
from memory.store import MEMORY_TEMPLATE, memory_prompt_section
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, TokenEstimator

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
OLLAMA_DEFAULT_NUM_CTX = 2048  # the smallest default of the versions in use; unset means this
# The tool schemas ride on every turn, so they count towards the window too.
TOOLS_TEXT = "\n" + json.dumps([*TOOL_SCHEMAS, REMIND_SCHEMA])


def llm_budget(llm: LLMConfig) -> Budget:
    """The window's shares as configured: answer = max_output_tokens, margin as set or ~5 %."""
    margin = llm.context_margin_tokens
    if margin is None:
        margin = default_margin(llm.context_window_tokens)
    return Budget(llm.context_window_tokens, llm.max_output_tokens, margin)


def fixed_prompt_tokens(config: Config, estimator: TokenEstimator | None = None) -> int:
    """Tokens every turn's prompt carries before any conversation: system prompt (with an
    empty MEMORY.md and the operator's [agent] system_prompt) and the tool schemas, as our
    estimate counts them (a chat's /persona adds to it: at most a tenth of the window)."""
    estimator = estimator or TokenEstimator()
    system = ContextBuilder(config.agent.bot_name).system_prompt(
        memory_prompt_section(MEMORY_TEMPLATE), "telegram", False, config.agent.system_prompt
    )
    raw = MESSAGE_OVERHEAD + estimator.count_text(system + TOOLS_TEXT) + REPLY_PRIMING
    return estimator.corrected(raw)


@dataclass(frozen=True)
class ServerWindow:
    tokens: int
    source: str  # e.g. "llama.cpp /props n_ctx"
    note: str = ""


def _root(base_url: str) -> str:
    """http://host:port/v1 → http://host:port (where /props and /api/show live)."""
    parts = urlsplit(base_url)
    path = re.sub(r"/v1/?$", "", parts.path.rstrip("/"))
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


async def _get_json(session: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> Any:
    try:
        async with session.request(method, url, **kw) as response:
            if response.status != 200:
                return None
            return await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def _from_props(body: Any) -> ServerWindow | None:
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    for holder in (body, settings if isinstance(settings, dict) else {}):
        n = holder.get("n_ctx")
        if isinstance(n, int) and n > 0:
            return ServerWindow(n, "llama.cpp /props n_ctx")
    return None


def _from_models(body: Any, model: str) -> ServerWindow | None:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    entries = [d for d in data if isinstance(d, dict)]
    entries.sort(key=lambda d: d.get("id") != model)  # the configured model first
    for entry in entries:
        n = entry.get("max_model_len")
        if isinstance(n, int) and n > 0:
            return ServerWindow(n, "vLLM /v1/models max_model_len")
    return None


def _from_ollama(body: Any) -> ServerWindow | None:
    if not isinstance(body, dict):
        return None
    parameters = body.get("parameters")
    if isinstance(parameters, str):
        match = re.search(r"^\s*num_ctx\s+(\d+)", parameters, re.M)
        if match:
            return ServerWindow(int(match.group(1)), "Ollama /api/show num_ctx")
    info = body.get("model_info")
    if not isinstance(info, dict):
        return None
    trained = next(
        (v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)), None
    )
    if trained is None:
        return None
    return ServerWindow(
        min(trained, OLLAMA_DEFAULT_NUM_CTX),
        "Ollama /api/show (num_ctx not set)",
        f"the model could take {trained:,}, but Ollama cuts prompts at its default num_ctx "
        f"unless it is set (Modelfile PARAMETER num_ctx, or OLLAMA_CONTEXT_LENGTH)",
    )


async def server_window(base_url: str, model: str) -> ServerWindow | None:
    """The window the server at `base_url` reports for `model`, or None if it does not say."""
    root = _root(base_url)
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        found = _from_props(await _get_json(session, "GET", f"{root}/props"))
        if found is None:
            models = await _get_json(session, "GET", f"{base_url.rstrip('/')}/models")
            found = _from_models(models, model)
        if found is None:
            show = await _get_json(session, "POST", f"{root}/api/show", json={"model": model})
            found = _from_ollama(show)
    return found


async def check_window(config: Config) -> tuple[bool, str]:
    """(fine, one line) about the configured window: against the server's where it can tell,
    and against what one turn needs (fixed part, a full MEMORY.md, one exchange, the answer)."""
    llm = config.llm
    budget = llm_budget(llm)
    problems: list[str] = []
    facts = [f"configured {llm.context_window_tokens:,} tokens"]
    if llm.base_url:
        found = await server_window(llm.base_url, llm.model)
        if found is None:
            facts.append("the server does not say its own")
        else:
            facts.append(f"the server's {found.tokens:,} ({found.source})")
            if llm.context_window_tokens > found.tokens:
                problems.append(
                    f"the configured window is larger than the server's: set [llm] "
                    f"context_window_tokens = {found.tokens}"
                )
            if found.note:
                problems.append(found.note)
    fixed = fixed_prompt_tokens(config)
    memory = memory_budget(llm.context_window_tokens, config.memory.max_memory_tokens)
    needed = budget.smallest_window(fixed, memory)
    facts.append(
        f"one turn needs at least {needed:,} (system prompt and tools {fixed:,}, memory "
        f"{memory:,}, a message {EXCHANGE_TOKENS}, answer {budget.answer:,}, "
        f"margin {budget.margin:,})"
    )
    if llm.context_window_tokens < needed:
        problems.append(
            "the window cannot hold the system prompt, the memory and one exchange: use a "
            "bigger window, a smaller [llm] max_output_tokens or [memory] max_memory_tokens"
        )
    detail = "; ".join(facts)
    if problems:
        return False, f"{detail}. " + "; ".join(problems)
    return True, detail


async def warn_about_window(config: Config) -> None:
    """At start-up: log what doctor would fail on (the bot still starts)."""
    try:
        fine, detail = await check_window(config)
    except Exception as exc:  # a probe must never stop the bot from starting
        log.debug("could not check the context window: %s", exc)
        return
    if not fine:
        log.warning("context window: %s", detail)
