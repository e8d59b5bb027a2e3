"""How big the context window is and how it is shared, when the config does not say.

WHY automatic: people who run their own model (Ollama, llama.cpp, vLLM) have 2,048–8,192
tokens, and fixed defaults made for 65,536 (an answer of 2,048, a quarter of the window for
MEMORY.md) left nothing for the conversation: every message was refused as too long.

The window is, in this order: `[llm] context_window_tokens` when set; the server's own where it
tells (llama.cpp /props, vLLM max_model_len, Ollama num_ctx: bot/agent/window.py); a known
window for well-known hosted models; DEFAULT_WINDOW. The answer and MEMORY.md get shares of it
(memory/consolidation/budget.py) unless `[llm] max_output_tokens` or `[memory]
max_memory_tokens` is set. The fixed part of every prompt (system prompt and tool schemas)
takes the richest form (bot/tools/tool.py FORMS) that is at most 1/FIXED_SHARE of the window;
it counts the tools the config switches on ([tools]).
An explicit setting always wins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from bot.agent.prompt import ContextBuilder
from bot.agent.window import ServerWindow, server_window
from bot.config import Config
from bot.tools.tool import FORMS, PromptForm
from bot.tools.toolbox import enabled_tools, tools_text
from memory.consolidation.budget import (
    EXCHANGE_TOKENS,
    Budget,
    answer_budget,
    default_margin,
    memory_budget,
)
from memory.store import MEMORY_TEMPLATE, memory_prompt_section
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, TokenEstimator

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 65536  # a server that does not tell, a model we do not know
# Where the default window came from, as doctor, init and /status say it: a stand-in until the
# server names its own (bot/agent/context_window.py ContextWindow.learn).
DEFAULT_FROM = (
    "the default until the server names its own, when it first refuses a request as too long "
    "(llama-cpp-python tells it no other way): neither the server nor the model says"
)
NOT_TOLD = (
    "the server does not say its own window (llama-cpp-python does not: the bot is sized to it "
    "when it first refuses a request as too long; or set [llm] context_window_tokens)"
)
FIXED_SHARE = 8  # the fixed part takes at most an eighth of the window
# Context windows of well-known hosted models, by the start of the model's name (the longest
# match wins; a "provider/" prefix is ignored). Only where the provider documents one size.
KNOWN_WINDOWS: dict[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4": 8_192,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
}


def known_window(model: str) -> int | None:
    """The documented window of a well-known hosted model, or None."""
    name = model.rsplit("/", 1)[-1].lower()
    matches = [prefix for prefix in KNOWN_WINDOWS if name.startswith(prefix)]
    return KNOWN_WINDOWS[max(matches, key=len)] if matches else None


def fixed_tokens(config: Config, form: PromptForm, estimator: TokenEstimator) -> int:
    """Tokens every turn's prompt carries in `form` before any conversation: the system prompt
    (with an empty MEMORY.md and the operator's [agent] system_prompt) and the tool schemas (a
    chat's /persona adds to it: at most a tenth of the window). Only the tools the config
    switches on count."""
    tools = enabled_tools(config)
    system = ContextBuilder(config.agent.bot_name, form, tools=tools).system_prompt(
        memory_prompt_section(MEMORY_TEMPLATE), "telegram", False, config.agent.system_prompt
    )
    raw = MESSAGE_OVERHEAD + estimator.count_text(system + tools_text(tools, form)) + REPLY_PRIMING
    return estimator.corrected(raw)


@dataclass(frozen=True)
class Sizing:
    """The window and its shares, each with where it came from (for doctor and /status)."""

    window: int
    window_from: str  # "configured", "told by the server, llama.cpp /props n_ctx", …
    answer: int
    answer_from: str
    memory: int
    memory_from: str
    margin: int
    form: PromptForm
    fixed: int
    server: ServerWindow | None = None

    @property
    def budget(self) -> Budget:
        return Budget(self.window, self.answer, self.margin)

    @property
    def conversation(self) -> int:
        """What is left for the conversation once the rest is counted."""
        return max(0, self.window - self.fixed - self.memory - self.answer - self.margin)

    @property
    def needed(self) -> int:
        """The smallest window that holds the fixed part, a full MEMORY.md, one exchange, the
        answer and the margin."""
        return self.budget.smallest_window(self.fixed, self.memory)

    def shares(self) -> str:
        """ "fixed part 220 (11 %), memory 204 (10 %), …" of the window."""
        parts = [
            ("fixed part", self.fixed),
            ("memory", self.memory),
            ("conversation", self.conversation),
            ("answer", self.answer),
            ("margin", self.margin),
        ]
        window = max(1, self.window)
        return ", ".join(f"{name} {n:,} ({round(n * 100 / window)} %)" for name, n in parts)

    def applied(self, config: Config) -> Config:
        """`config` with these figures in place of the automatic ones (what the LLM client and
        the consolidator read)."""
        llm = replace(config.llm, context_window_tokens=self.window, max_output_tokens=self.answer)
        memory = replace(config.memory, max_memory_tokens=self.memory)
        return replace(config, llm=llm, memory=memory)


def plan(
    config: Config, server: ServerWindow | None = None, estimator: TokenEstimator | None = None
) -> Sizing:
    """The sizing for `config`, given what the server said about its window (None: nothing)."""
    llm = config.llm
    if llm.context_window_tokens:
        window, window_from = llm.context_window_tokens, "configured"
    elif server is not None:
        window, window_from = server.tokens, f"told by the server, {server.source}"
    elif known_window(llm.model):
        window, window_from = known_window(llm.model) or 0, f"known for {llm.model}"
    else:
        window, window_from = DEFAULT_WINDOW, DEFAULT_FROM
    estimator = estimator or TokenEstimator()
    form: PromptForm = FORMS[-1]
    for form in FORMS:
        if fixed_tokens(config, form, estimator) * FIXED_SHARE <= window:
            break
    margin = llm.context_margin_tokens
    return Sizing(
        window=window,
        window_from=window_from,
        answer=answer_budget(window, llm.max_output_tokens),
        answer_from="configured" if llm.max_output_tokens else "automatic",
        memory=memory_budget(window, config.memory.max_memory_tokens),
        memory_from="configured" if config.memory.max_memory_tokens else "automatic",
        margin=default_margin(window) if margin is None else margin,
        form=form,
        fixed=fixed_tokens(config, form, estimator),
        server=server,
    )


async def size(config: Config, estimator: TokenEstimator | None = None) -> Sizing:
    """plan() with the server asked for its window (when there is a base_url: the OpenAI API
    does not tell)."""
    server = None
    if config.llm.base_url:
        log.info("asking %s for its context window", config.llm.base_url)
        server = await server_window(config.llm.base_url, config.llm.model)
    return plan(config, server, estimator)


def problems(config: Config, sizing: Sizing) -> tuple[list[str], bool]:
    """(what is wrong with the window, whether it is too small to run at all), each worded
    with its fix."""
    found: list[str] = []
    server = sizing.server
    configured = config.llm.context_window_tokens
    if server is not None:
        if configured and configured > server.tokens:
            found.append(
                f"the configured window is larger than the server's: set [llm] "
                f"context_window_tokens = {server.tokens} (or leave it unset: automatic)"
            )
        if server.note and (configured or 0) > server.tokens:
            found.append(server.note)
    too_small = sizing.window < sizing.needed
    if too_small:
        fixes = [
            "a bigger window on the server (llama.cpp --ctx-size, Ollama num_ctx, vLLM "
            "--max-model-len)"
        ]
        if config.llm.max_output_tokens:
            fixes.append("a smaller [llm] max_output_tokens (or unset: automatic)")
        if config.memory.max_memory_tokens:
            fixes.append("a smaller [memory] max_memory_tokens (or 0: automatic)")
        if configured and (server is None or configured < server.tokens):
            fixes.append("a bigger [llm] context_window_tokens (or unset: automatic)")
        found.append(
            f"the window cannot hold the fixed part, the memory and one exchange (it needs "
            f"{sizing.needed:,}): use " + ", or ".join(fixes)
        )
    return found, too_small


def describe(sizing: Sizing) -> str:
    """One line: the window, where it came from, and its shares."""
    server = sizing.server
    told = ""
    if server is not None and sizing.window_from == "configured":
        told = f"; the server's {server.tokens:,} ({server.source})"
    note = f"; {server.note}" if server is not None and server.note else ""
    return (
        f"{sizing.window:,} tokens ({sizing.window_from}{told}{note}); {sizing.shares()}; one "
        f"turn needs at least {sizing.needed:,} (a message {EXCHANGE_TOKENS}); prompt form "
        f"{sizing.form}"
    )


@dataclass(frozen=True)
class WindowCheck:
    """What doctor says about the window, and what run and chat start with."""

    sizing: Sizing
    detail: str
    problems: tuple[str, ...]
    too_small: bool  # the bot would refuse every message: run and chat stop at start

    @property
    def fine(self) -> bool:
        return not self.problems

    @property
    def line(self) -> str:
        return f"{self.detail}. " + "; ".join(self.problems) if self.problems else self.detail


async def check_window(config: Config, estimator: TokenEstimator | None = None) -> WindowCheck:
    """The window's size and shares, against the server's where it can tell and against what
    one turn needs."""
    sizing = await size(config, estimator)
    found, too_small = problems(config, sizing)
    detail = describe(sizing)
    if sizing.window_from == DEFAULT_FROM:
        detail += "; to size it before that, set [llm] context_window_tokens"
    elif sizing.server is None and config.llm.base_url:
        detail += f"; {NOT_TOLD}"
    return WindowCheck(sizing, detail, tuple(found), too_small)
