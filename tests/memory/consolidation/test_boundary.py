"""Chunk boundaries: at user turns, never inside a tool exchange, never the newest turn."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memory.consolidation.boundary import pick_boundary


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str = "hello") -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "search", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str | None) -> dict[str, Any]:
    message = {"role": "tool", "content": "found", "name": "search"}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message


def by_count(start: int, end: int) -> int:
    """Every message costs 10 tokens."""
    return (end - start) * 10


def test_first_user_turn_that_sheds_enough() -> None:
    messages = [user(), assistant(), user(), assistant(), user(), assistant(), user()]
    assert pick_boundary(messages, 0, 15, by_count) == 2
    assert pick_boundary(messages, 0, 25, by_count) == 4
    assert pick_boundary(messages, 2, 15, by_count) == 4


def test_never_the_newest_user_turn() -> None:
    messages = [user(), assistant(), user(), assistant(), user(), assistant("latest answer")]
    # Wants everything gone, but the newest turn (from index 4) stays: the largest valid end.
    assert pick_boundary(messages, 0, 10_000, by_count) == 4


def test_none_when_only_one_turn() -> None:
    assert pick_boundary([user(), assistant(), assistant()], 0, 5, by_count) is None
    assert pick_boundary([], 0, 5, by_count) is None
    assert pick_boundary([assistant(), assistant()], 0, 5, by_count) is None
    messages = [user(), assistant(), user(), assistant()]
    assert pick_boundary(messages, 2, 5, by_count) is None  # start is already the newest turn


def test_never_separates_tool_calls_from_their_results() -> None:
    messages = [
        user(),  # 0
        calls("a", "b"),  # 1
        result("a"),  # 2
        user("interrupting"),  # 3: a user message inside the exchange (b answered later)
        result("b"),  # 4
        assistant(),  # 5
        user(),  # 6
        assistant(),  # 7
        user(),  # 8
    ]
    assert pick_boundary(messages, 0, 15, by_count) == 6
    assert pick_boundary(messages, 0, 1, by_count) == 6


def test_results_without_ids_belong_to_the_last_caller() -> None:
    messages = [user(), calls("x"), user("oops"), result(None), user(), assistant(), user()]
    assert pick_boundary(messages, 0, 1, by_count) == 4


def test_shed_nothing_still_takes_the_first_turn() -> None:
    messages = [user(), assistant(), user(), assistant(), user()]
    assert pick_boundary(messages, 0, 0, by_count) == 2


ROLES = st.lists(st.sampled_from(["user", "assistant", "calls", "result"]), max_size=40)


@given(ROLES, st.integers(0, 5), st.integers(0, 500))
def test_any_transcript_gets_a_valid_boundary_or_none(roles: list[str], start: int, shed: int):
    messages: list[dict[str, Any]] = []
    open_ids: list[str] = []
    for n, role in enumerate(roles):
        if role == "calls":
            open_ids = [f"c{n}a", f"c{n}b"]
            messages.append(calls(*open_ids))
        elif role == "result" and open_ids:
            messages.append(result(open_ids.pop(0)))
        elif role in ("user", "assistant"):
            messages.append(user() if role == "user" else assistant())
    start = min(start, len(messages))
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]

    def valid(end: int) -> bool:
        chunk_ids = {c["id"] for m in messages[start:end] for c in m.get("tool_calls") or []}
        kept_results = {m.get("tool_call_id") for m in messages[end:] if m["role"] == "tool"}
        return not (chunk_ids & kept_results)

    ends = [i for i in users if start < i <= users[-1] and valid(i)] if users else []
    enough = [i for i in ends if by_count(start, i) >= shed]
    expected = enough[0] if enough else (ends[-1] if ends else None)
    assert pick_boundary(messages, start, shed, by_count) == expected
