"""Quote marks a model wrote as HTML entities, turned back into the characters it meant.

WHY: llama-cpp-python's `chatml-function-calling` template HTML-escapes the prompt, so the model
reads every apostrophe as `&#39;` and copies that: answers read "My sister&#39;s name is…" (both
small models of the real-model runs, docs/local-models.md), and, copying its own earlier answer,
`&amp;#39;`. Only the escapes of quote marks are undone (escaped again or not), which is what
escaping makes of ordinary prose; `&lt;`, `&gt;` and `&amp;` are left, as a model may mean them.
A conversation in which the person wrote an entity themselves (a question about HTML) gets its
answers exactly as written.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any

from memory.llm import ChatResult

# A quote mark's escape, escaped again any number of times ("&amp;#39;": a model copying its own
# earlier answer, escaped once more by the template).
_ESCAPE = re.compile(r"&(?:amp;)*(#39|#x27|#34|quot);")
_QUOTE = {"#39": "'", "#x27": "'", "#34": '"', "quot": '"'}
# What a stream's piece may end in that the next piece can make an escape of.
_BEGUN = re.compile(r"&(?:amp;)*(?:a|am|amp|#|#3|#39|#34|#x|#x2|#x27|q|qu|quo|quot)?")
_HELD_AT_MOST = 64  # characters: a run of "&amp;" longer than that is not waited for
_ANY_ENTITY = re.compile(r"&(?:#\d+|#x[0-9a-f]+|[a-z]+);", re.I)


def unescaped(text: str) -> str:
    """`text` with the quote marks' escapes turned back into quote marks."""
    return _ESCAPE.sub(lambda match: _QUOTE[match.group(1)], text) if "&" in text else text


def writes_entities(messages: Iterable[dict[str, Any]]) -> bool:
    """Whether the person wrote an HTML entity in the conversation: its answers stay as written."""
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and "&" in text and _ANY_ENTITY.search(text):
                return True
    return False


def result_unescaped(result: ChatResult) -> ChatResult:
    """The model call's result with its text unescaped (the calls' arguments are JSON, which the
    template's escaping does not reach)."""
    if not result.content or "&" not in result.content:
        return result
    return replace(result, content=unescaped(result.content))


class Unescaping:
    """An `on_text` for a streamed answer that passes each piece on unescaped. A piece ending in
    what may be the start of an escape split across pieces ("…sister&#3") keeps that end back
    until the next piece, or `flush`."""

    def __init__(self, on_text: Callable[[str], Awaitable[None]]) -> None:
        self._on_text = on_text
        self._held = ""

    async def __call__(self, piece: str) -> None:
        text, self._held = self._held + piece, ""
        start = text.find("&", max(0, len(text) - _HELD_AT_MOST))
        while start != -1:  # the first "&" from which the end may still become an escape
            if _BEGUN.fullmatch(text, start):
                text, self._held = text[:start], text[start:]
                break
            start = text.find("&", start + 1)
        if text:
            await self._on_text(unescaped(text))

    async def flush(self) -> None:
        """The end of the stream: a held end was not an escape after all."""
        if self._held:
            held, self._held = self._held, ""
            await self._on_text(unescaped(held))
