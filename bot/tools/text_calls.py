"""Tool calls a model wrote as text, which its server did not parse into `tool_calls`.

Local servers with a model's own chat template pass its calls on as plain text (Qwen writes
Hermes-style JSON, SmolLM2 llama-cpp-python's `functions.NAME:`). Shown as they are, the person
gets a line of JSON and the edit is never made. The shapes known here:

- a JSON object `{"name": …, "arguments": {…}}` ("parameters" also taken for "arguments"),
  or a JSON list of them;
- `<tool_call>{…}</tool_call>` (Hermes, Qwen: that object between tags; the last closing
  tag may be missing, as when the answer was cut at its stop word);
- `functions.NAME:` followed by the JSON object of its arguments.

An answer is taken as calls only when the whole of it (white space and code fences aside) is a
sequence of them: prose that merely quotes such JSON is an answer. A bare object must name a
tool of the turn (a person may ask for JSON with a "name"); the tags and the `functions.`
marker say "call" by themselves, and the Toolbox refuses a tool the turn does not offer.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Collection
from typing import Any

from memory.llm import ToolCall

_OPEN_TAG = "<tool_call>"
_CLOSE_TAG = "</tool_call>"
_MARKER = "functions."
# What starts calls written as text, for a stream to hold back; "function." too: SmolLM2 also
# wrote `function.get_history: {…}` (a tool it was not offered: never run, never shown).
_OPENERS = (_OPEN_TAG, _MARKER, "function.", "```")
_FENCE = re.compile(r"```[\w-]*")
_NAME = re.compile(r"[A-Za-z_][\w.-]{0,63}")
_MARKER_CALL = re.compile(r"functions\.([A-Za-z_][\w-]{0,63})\s*:?")
_DECODER = json.JSONDecoder(strict=False)  # raw newlines inside strings, as some grammars write


def parse(text: str | None, names: Collection[str]) -> list[ToolCall]:
    """The calls `text` consists of, in order; [] when it is not wholly calls (an answer).
    `names`: the tools the turn offers."""
    calls: list[ToolCall] = []
    position, end = 0, len(text or "")
    source = text or ""
    while True:
        position = _skip(source, position)
        if position >= end:
            return calls
        found = _one(source, position, names)
        if found is None:
            return []
        made, position = found
        calls.extend(made)


def could_be_calls(text: str) -> bool:
    """Whether `text`, the beginning of an answer being written, may still turn out to be
    calls (a stream holds it back until it is known: a shown call cannot be taken back)."""
    position = _skip(text, 0)
    rest = text[position:]
    if rest.startswith(("{", "[")):
        return True
    # (An opener may be arriving a few characters at a time: "<tool", "func", "``".)
    return any(rest.startswith(opener) or opener.startswith(rest) for opener in _OPENERS)


def _skip(text: str, position: int) -> int:
    """Past white space and code-fence marks (```json …```) from `position`."""
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        fence = _FENCE.match(text, position)
        if fence is None:
            return position
        position = fence.end()


def _one(text: str, position: int, names: Collection[str]) -> tuple[list[ToolCall], int] | None:
    """The call(s) at `position` and where they end, or None if no call starts there."""
    if text.startswith(_OPEN_TAG, position):
        value, after = _json_at(text, position + len(_OPEN_TAG))
        call = _from_object(value, None)
        if call is None:
            return None
        after = _skip(text, after)
        if text.startswith(_CLOSE_TAG, after):
            after += len(_CLOSE_TAG)
        elif after < len(text):
            return None
        return [call], after
    marker = _MARKER_CALL.match(text, position)
    if marker is not None:
        value, after = _json_at(text, marker.end())
        if not isinstance(value, dict):
            return None
        return [_call(marker.group(1), value)], after
    value, after = _json_at(text, position)
    items = value if isinstance(value, list) and value else [value]
    made = [_from_object(item, names) for item in items]
    if any(call is None for call in made):
        return None
    return [call for call in made if call is not None], after


def _json_at(text: str, position: int) -> tuple[Any, int]:
    """The JSON value at `position` (after white space) and where it ends; (None, position)
    when there is none."""
    start = _skip(text, position)
    try:
        return _DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        return None, position


def _from_object(value: Any, names: Collection[str] | None) -> ToolCall | None:
    """A call from `{"name": …, "arguments": …}` and nothing else in it; with `names`, only
    a call of one of those tools."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    keys = set(value) - {"name"}
    if len(keys) != 1 or not keys <= {"arguments", "parameters"}:
        return None
    name = value["name"]
    arguments = value[keys.pop()]
    if not _NAME.fullmatch(name) or (names is not None and name not in names):
        return None
    if not isinstance(arguments, dict | str):
        return None
    return _call(name, arguments)


def _call(name: str, arguments: dict[str, Any] | str) -> ToolCall:
    """A call as if the server had parsed it (an id of our own: the tool's answer names it)."""
    return ToolCall(id=f"call_text_{secrets.token_hex(4)}", name=name, arguments=arguments)
