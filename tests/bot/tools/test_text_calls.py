"""Tool calls written as text: each shape local models were seen to write is read as calls,
and prose that merely holds such JSON is not (it is an answer, shown as it is)."""

from __future__ import annotations

import pytest

from bot.tools.text_calls import could_be_calls, parse

OFFERED = {"edit_memory", "search_history", "remind"}
ADD = '{"action": "add", "section": "Preferences", "text": "Likes green tea"}'
ADDED = {"action": "add", "section": "Preferences", "text": "Likes green tea"}


def calls_of(text: str) -> list[tuple[str, object]]:
    return [(call.name, call.arguments) for call in parse(text, OFFERED)]


@pytest.mark.parametrize(
    "text",
    [
        # Hermes style, as Qwen wrote it with its own template
        f'{{"name": "edit_memory", "arguments": {ADD}}}',
        f'  {{"arguments": {ADD}, "name": "edit_memory"}}\n',
        f'{{"name": "edit_memory", "parameters": {ADD}}}',  # Llama 3.1's word
        f'```json\n{{"name": "edit_memory", "arguments": {ADD}}}\n```',
        f'[{{"name": "edit_memory", "arguments": {ADD}}}]',
        # Hermes and Qwen's tags; the closing one cut at its stop word
        f'<tool_call>\n{{"name": "edit_memory", "arguments": {ADD}}}\n</tool_call>',
        f'<tool_call>{{"name": "edit_memory", "arguments": {ADD}}}',
        # llama-cpp-python's function-calling format, as SmolLM2 wrote it
        f"functions.edit_memory: {ADD}",
        f"functions.edit_memory:\n{ADD}",
        f"```\nfunctions.edit_memory:{ADD}\n```",
    ],
)
def test_each_shape_is_read_as_the_call(text: str) -> None:
    assert calls_of(text) == [("edit_memory", ADDED)]


def test_arguments_given_as_a_json_string_are_passed_on_for_the_toolbox_to_read() -> None:
    text = '{"name": "search_history", "arguments": "{\\"query\\": \\"Lisbon\\"}"}'
    assert calls_of(text) == [("search_history", '{"query": "Lisbon"}')]


def test_a_sequence_of_calls_in_any_of_the_shapes_is_every_call_in_order() -> None:
    text = (
        f'<tool_call>\n{{"name": "edit_memory", "arguments": {ADD}}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search_history", "arguments": {"query": "tea"}}\n</tool_call>\n'
        'functions.search_history: {"query": "Lisbon"}\n'
        '{"name": "remind", "arguments": {"text": "tea", "when": "in 1 hour"}}'
    )
    assert [name for name, _ in calls_of(text)] == [
        "edit_memory",
        "search_history",
        "search_history",
        "remind",
    ]
    ids = [call.id for call in parse(text, OFFERED)]
    assert len(set(ids)) == 4  # each call's result names its own call


def test_each_call_gets_a_fresh_id() -> None:
    text = f'{{"name": "edit_memory", "arguments": {ADD}}}'
    assert parse(text, OFFERED)[0].id != parse(text, OFFERED)[0].id


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "Hello Ada, nice to meet you.",
        # prose around a call is an answer that talks about one
        f'To add it I would call {{"name": "edit_memory", "arguments": {ADD}}}.',
        f'{{"name": "edit_memory", "arguments": {ADD}}}\nDone, I noted that you like green tea.',
        f'Here you go:\n```json\n{{"name": "edit_memory", "arguments": {ADD}}}\n```',
        f"Sure: functions.edit_memory: {ADD}",
        # JSON a person asked for, naming no tool of the turn, or not shaped as a call
        '{"name": "Ada", "arguments": {"age": 36}}',
        '{"name": "edit_memory"}',
        f'{{"name": "edit_memory", "arguments": {ADD}, "reason": "asked"}}',
        '{"name": "edit_memory", "arguments": [1, 2]}',
        '{"name": 3, "arguments": {}}',
        '[{"name": "edit_memory", "arguments": {}}, 3]',
        "[]",
        '{"city": "Lisbon"}',
        # the bare marker carries no arguments: not a call (the turn asks again without tools)
        "functions.search_history:",
        "functions.search_history is what I use to look things up.",
        # broken JSON, an unclosed tag followed by prose
        '{"name": "edit_memory", "arguments": {"action": "add"',
        f'<tool_call>{{"name": "edit_memory", "arguments": {ADD}}} and then I was done',
        "<tool_call></tool_call>",
    ],
)
def test_prose_and_other_json_are_not_calls(text: str) -> None:
    assert parse(text, OFFERED) == []


def test_the_tags_and_the_marker_say_call_whatever_the_name_the_toolbox_refuses_it() -> None:
    """A call of a tool the turn does not offer (a group chat's) is still a call: the Toolbox
    answers the model that it cannot, instead of the person reading the call."""
    assert calls_of('<tool_call>{"name": "wipe_all", "arguments": {}}</tool_call>') == [
        ("wipe_all", {})
    ]
    assert calls_of("functions.wipe_all: {}") == [("wipe_all", {})]
    assert calls_of('{"name": "wipe_all", "arguments": {}}') == []  # a bare object: JSON


HELD = ["", " ", "`", "``", "```json\n", "{", '{"na', "[", "<tool", "<tool_call>{", "func"]


@pytest.mark.parametrize("start", [*HELD, "functions.search_hi", "\n  functions."])
def test_a_beginning_that_may_still_become_calls_is_held(start: str) -> None:
    assert could_be_calls(start)


@pytest.mark.parametrize(
    "start", ["Hello", "  Sure", "```python\nprint", "<b>", "fun fact", "Functions are"]
)
def test_a_beginning_that_cannot_become_calls_is_shown(start: str) -> None:
    assert not could_be_calls(start)
