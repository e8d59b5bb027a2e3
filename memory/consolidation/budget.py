"""How one context window is shared: the prompt, the answer, and a margin for estimate error.

A provider counts prompt and answer against the same window: a request whose prompt fits but
whose `max_tokens` does not is rejected (or, on some servers, silently truncated). So every check
here compares `prompt + answer + margin` with the window, never the prompt alone.
"""

from __future__ import annotations

from dataclasses import dataclass

# The user's side of one ordinary exchange: a message of a few sentences, its time stamp.
EXCHANGE_TOKENS = 128
# What a consolidation's answer needs besides the new MEMORY.md: the history entry, the JSON.
HISTORY_ENTRY_TOKENS = 200

# The shares of the window when they are not configured. Chosen so that a 2,048-token window
# leaves more than half of itself to the conversation and a 4,096 one more than 60 % (with the
# lean fixed part of bot/agent/sizing.py and the margin); capped for big windows, where a
# quarter of 65,536 tokens of MEMORY.md would ride on every request and cost the person on
# every turn (hermes caps its memory near 1,300 tokens).
ANSWER_SHARE = 8  # the answer: an eighth of the window,
ANSWER_CAP = 2048  # at most this (the former fixed default)
MEMORY_SHARE = 10  # MEMORY.md: a tenth of the window,
MEMORY_CAP = 1500  # at most this


def answer_budget(window: int, configured: int | None = None) -> int:
    """The answer's share of the window (max_tokens of every turn): `configured` ([llm]
    max_output_tokens) if set, else an eighth of the window up to ANSWER_CAP."""
    if configured:
        return configured
    return max(1, min(ANSWER_CAP, window // ANSWER_SHARE))


def memory_budget(window: int, configured: int = 0) -> int:
    """Room MEMORY.md may take in every prompt (and in a consolidation's answer, which rewrites
    it): `configured` ([memory] max_memory_tokens) if set, else a tenth of the window up to
    MEMORY_CAP."""
    return configured if configured > 0 else min(MEMORY_CAP, window // MEMORY_SHARE)


def default_margin(window: int) -> int:
    """About 5 % of the window: what an estimate may still be off after learning the server."""
    return max(16, window // 20) if window > 0 else 0


@dataclass(frozen=True)
class Budget:
    window: int
    answer: int = 0  # max_output_tokens: the answer's share of the window
    margin: int = 0

    @property
    def prompt_limit(self) -> int:
        """The largest prompt whose request still fits: window − answer − margin."""
        return max(0, self.window - self.answer - self.margin)

    def fits(self, prompt_tokens: int) -> bool:
        return prompt_tokens <= self.prompt_limit

    def target(self, fixed_tokens: int) -> int:
        """Where consolidation stops: the fixed part (system prompt, tools) plus half of what
        remains for conversation. Half of the window would be unreachable whenever the fixed
        part alone is larger than that, and every turn would then consolidate in vain."""
        room = max(0, self.prompt_limit - fixed_tokens)
        return fixed_tokens + room // 2

    def smallest_window(self, fixed_tokens: int, memory_tokens: int) -> int:
        """The window a bot needs: fixed part, a full MEMORY.md (`memory_tokens`, its budget),
        one exchange, answer, margin."""
        return fixed_tokens + memory_tokens + EXCHANGE_TOKENS + self.answer + self.margin


@dataclass
class Shares:
    """The window's shares as consolidation reads them, held in one place: the bot's window
    (bot/agent/context_window.py) changes them when a refusal names a smaller window, and every
    consolidator given this object sees the change."""

    budget: Budget
    memory: int = 0  # tokens MEMORY.md may take; 0: a share of the window (memory_budget)
