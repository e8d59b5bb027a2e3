"""Recognising a provider's "this request is longer than the model's context" rejection.

Each server words it its own way, and not always with HTTP 400 (llama.cpp has answered 500 with
the same body). Told apart from an outage, it is recoverable: consolidate and try again.
"""

from __future__ import annotations

import re
from typing import Any

# Lower-cased fragments of the wordings seen in the wild.
_WORDINGS = (
    "context_length_exceeded",  # OpenAI's error code (and llama-cpp-python's)
    "maximum context length",  # OpenAI, vLLM, llama-cpp-python: "This model's maximum …"
    "exceed_context_size_error",  # llama.cpp server's error type
    "exceeds the available context size",  # llama.cpp server
    "exceed context window",  # llama-cpp-python: "Requested tokens (N) exceed context window"
    "longer than the maximum model length",  # vLLM: "The decoder prompt (length N) is longer…"
    "input exceeds context length",  # Ollama's runner
    "input length exceeds",  # Ollama
    "prompt too long",  # Ollama: "prompt too long; exceeded max context length by N tokens"
    "context window exceeds",
    "context length exceeded",
)
# "(1100 in the messages, 1024 in the completion)" (OpenAI wording, vLLM, llama-cpp-python);
# "your messages resulted in 9000 tokens" (OpenAI); llama.cpp's n_prompt_tokens field.
_PROMPT_COUNTS = (
    re.compile(r"(\d+) in the messages"),
    re.compile(r"messages resulted in (?:over )?(\d+) tokens"),
    re.compile(r"your request has (\d+) input tokens"),
    re.compile(r"decoder prompt \(length (\d+)\)"),
)


# The window itself: "maximum context length is 2048 tokens" (OpenAI, vLLM, llama-cpp-python),
# "exceed context window of 2048" (llama-cpp-python's own), llama.cpp's n_ctx field.
_WINDOWS = (
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"exceed context window of (\d+)"),
)


def _flatten(body: Any) -> tuple[str, int | None]:
    """The error's text (message, code, type) and llama.cpp's n_prompt_tokens, if given."""
    if isinstance(body, dict):
        inner = body.get("error")
        error: dict[str, Any] = inner if isinstance(inner, dict) else body
        parts = [str(error.get(k) or "") for k in ("message", "code", "type")]
        n = error.get("n_prompt_tokens")
        return " ".join(parts), n if isinstance(n, int) else None
    return str(body or ""), None


def context_overflow(body: Any, message: str = "") -> tuple[bool, int | None]:
    """(is it a context-length rejection, the prompt tokens the provider counted or None)."""
    text, counted = _flatten(body)
    text = f"{text} {message}".lower()
    if not any(wording in text for wording in _WORDINGS):
        return False, None
    if counted is None:
        for pattern in _PROMPT_COUNTS:
            match = pattern.search(text)
            if match:
                counted = int(match.group(1))
                break
    return True, counted


def overflow_window(body: Any, message: str = "") -> int | None:
    """The context window a context-length rejection names, if it names one: a server that
    does not tell its window otherwise (llama-cpp-python) tells it here."""
    inner = body.get("error") if isinstance(body, dict) else None
    error = inner if isinstance(inner, dict) else body if isinstance(body, dict) else {}
    n = error.get("n_ctx")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    text = f"{_flatten(body)[0]} {message}".lower()
    for pattern in _WINDOWS:
        match = pattern.search(text)
        if match and int(match.group(1)) > 0:
            return int(match.group(1))
    return None
