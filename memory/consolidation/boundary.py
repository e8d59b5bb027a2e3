"""Where a consolidation chunk may end: at a user turn, never inside a tool exchange.

A chunk that ended between an assistant's tool calls and their results would leave orphan
tool results in the prompt (providers reject them) and a half-told exchange in the archive.
The newest user turn always stays in the prompt: the model is answering it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _blocked_ends(messages: list[dict[str, Any]], start: int) -> list[bool]:
    """blocked[i] is True when a chunk ending at i would separate tool calls from results.

    A tool result belongs to the assistant message holding its tool_call_id, or (when the id
    is missing or unknown) to the nearest earlier assistant message with tool calls.
    """
    n = len(messages)
    delta = [0] * (n + 2)
    owner_of_id: dict[str, int] = {}
    last_caller: int | None = None
    for i in range(start, n):
        message = messages[i]
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            last_caller = i
            for call in message["tool_calls"]:
                call_id = call.get("id") if isinstance(call, dict) else getattr(call, "id", None)
                if call_id:
                    owner_of_id[str(call_id)] = i
        elif role == "tool":
            owner = owner_of_id.get(str(message.get("tool_call_id")), last_caller)
            if owner is not None:
                delta[owner + 1] += 1  # ends owner+1 .. i would split the exchange
                delta[i + 1] -= 1
    blocked = []
    running = 0
    for i in range(n):
        running += delta[i]
        blocked.append(running > 0)
    return blocked


def valid_ends(messages: list[dict[str, Any]], start: int) -> list[int]:
    """Every end a chunk messages[start:end] may have, ascending: a user message after start,
    not after the newest user message, splitting no tool exchange."""
    newest_user = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None
    )
    if newest_user is None or newest_user <= start:
        return []
    blocked = _blocked_ends(messages, start)
    return [
        end
        for end in range(start + 1, newest_user + 1)
        if messages[end].get("role") == "user" and not blocked[end]
    ]


def pick_boundary(
    messages: list[dict[str, Any]],
    start: int,
    tokens_to_shed: int,
    count: Callable[[int, int], int],
) -> int | None:
    """End index (exclusive) of the chunk messages[start:end] to consolidate, or None.

    messages[end] is a user message, start < end <= index of the newest user message, and no
    tool exchange is split. The first such end that sheds `tokens_to_shed` (per `count`) wins;
    if none sheds enough, the largest valid end does.
    """
    ends = valid_ends(messages, start)
    for end in ends:
        if count(start, end) >= tokens_to_shed:
            return end
    return ends[-1] if ends else None
