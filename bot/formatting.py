"""The one message splitter: long replies become several messages, each within a platform limit.

Splits at paragraph, then line, then word boundaries, and never leaves a code block open: when a
cut falls inside a ``` fence, the chunk closes it and the next chunk reopens it with its language.
"""

from __future__ import annotations

FENCE = "```"


def split_message(text: str, limit: int) -> list[str]:
    """Chunks of at most `limit` characters whose concatenation keeps every character of `text`."""
    if limit < 2 * len(FENCE) + 20:
        raise ValueError("limit too small to split safely")
    if len(text) <= limit:
        return [text] if text else []
    chunks: list[str] = []
    reopen = ""  # fence opener to prepend to the next chunk when a code block continues
    rest = text
    while rest:
        budget = limit - len(reopen)
        if len(rest) <= budget:
            chunks.append(reopen + rest)
            break
        # Leave room to close a fence ("\n```") if this chunk ends inside a code block.
        cut = _best_cut(rest, budget - len(FENCE) - 1)
        piece, rest = rest[:cut], rest[cut:]
        body = reopen + piece
        opener = _open_fence(body)
        if opener is not None:
            body = body.rstrip("\n") + "\n" + FENCE
            reopen = opener + "\n"
        else:
            reopen = ""
        chunks.append(body)
    return chunks


def _best_cut(text: str, budget: int) -> int:
    """Index to cut at: the last paragraph, line or word break within budget, else the budget."""
    window = text[:budget]
    for sep in ("\n\n", "\n", " "):
        pos = window.rfind(sep)
        if pos > budget // 2:
            return pos + len(sep)
    return budget


def _open_fence(chunk: str) -> str | None:
    """The opener line (e.g. "```python") of a code block left open at the end of `chunk`."""
    opener: str | None = None
    for line in chunk.split("\n"):
        stripped = line.strip()
        if stripped.startswith(FENCE):
            opener = None if opener is not None else stripped
    return opener


# What Markdown (Telegram's renderer, adapters/telegram/markup.py; Discord; rich) would read as
# markup inside a line: spans, links, spoilers, <@mentions>, autolinks.
_MARKUP_CHARACTERS = frozenset("\\`*_~|[]()<>#")


def literal(text: str) -> str:
    """`text` as itself inside a Markdown answer: each character Markdown would read as markup
    backslash-escaped. For people's own text that the bot posts where others read it (a
    reminder, its confirmation): `[support](https://evil.example)` must arrive as those
    characters, never as a link that shows other words than where it leads."""
    return "".join(f"\\{c}" if c in _MARKUP_CHARACTERS else c for c in text)
