"""`search_history`: the model searches the person's log of past conversations (HISTORY.md),
then their own words in the consolidated transcripts (memory/search/transcripts.py), each such
hit marked as a message of theirs, so the model does not take a summary for what they said.

Not offered in a group turn whose answer is public: what it finds would be read by everyone.
"""

from __future__ import annotations

import asyncio

from bot.tools.tool import MEMORY, Arguments, Offer, Tool, ToolTurn, string_schema
from memory import clock
from memory.search import transcripts
from memory.search.engine import HistoryHit, SearchError

MAX_SEARCH_RESULTS = 5
MAX_RESULT_CHARS = 4000
EXCERPT_CONTEXT = 160  # characters kept on each side of a match when an entry is cut

FULL = Offer(
    {
        "type": "function",
        "function": {
            "name": "search_history",
            "description": (
                "Search this person's log of past conversations for what your memory does "
                "not answer: a few words the entry holds (names, numbers, dates, rare words), "
                'not the question; best first. "quotes": a phrase.'
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Keywords, or a regex if regex",
                    },
                    "regex": {"type": "boolean", "description": "Treat query as a regex"},
                },
                "required": ["query"],
            },
        },
    },
    "- Older conversations are filed in their history log. When they ask about the past and "
    "your\n  memory does not answer, call `search_history` first with a few distinctive keywords "
    "(names,\n  numbers, rare words), not their whole question.",
)
COMPACT = Offer(
    string_schema("search_history", "Search earlier conversations for keywords.", "query"),
    "`search_history` finds earlier conversations",
)


async def run(turn: ToolTurn, args: Arguments) -> str:
    """The best entries for the query, each whole or cut around its matches."""
    query = args.get("query")
    if not isinstance(query, str):
        return "Error: `query` must be a string."
    try:
        result = await asyncio.to_thread(
            transcripts.search,
            turn.workspace.history_path,
            turn.workspace.sessions_dir,
            query,
            limit=MAX_SEARCH_RESULTS,
            regex=bool(args.get("regex")),
            now=clock.now(),  # "last week" as the model was told the time: the one clock
        )
    except SearchError as exc:
        return f"Error: {exc}"
    if not result.hits:
        return "No entry of the history matches."
    text = "\n\n".join(shown_hits(result.hits, MAX_RESULT_CHARS))
    return f"{result.total} matching entries; the most relevant:\n\n{text}"


SEARCH_HISTORY = Tool(
    name="search_history",
    reaches=(MEMORY,),  # the history log is part of the person's memory
    enabled=lambda config: config.tools.search_history,
    run=run,
    full=FULL,
    compact=COMPACT,
    quotes_history=True,
)


def shown_hits(hits: list[HistoryHit], budget: int) -> list[str]:
    """The hits as the model reads them, within ``budget`` characters together: each whole if
    it fits its share, else its stamp and the passages around its matches. Long entries (a
    session of a chat is often 2-4 KB) would otherwise fill the answer with the first one or
    two, and the entry meant, ranked third, or its matching lines, would be cut away."""
    shares = [0] * len(hits)
    left, todo = budget, sorted(range(len(hits)), key=lambda i: len(hits[i].text))
    for n, i in enumerate(todo):  # shortest first: what a short entry leaves, the rest share
        shares[i] = min(len(hits[i].text), left // (len(todo) - n))
        left -= shares[i]
    return [_said(hit) + _excerpt(hit, share) for hit, share in zip(hits, shares, strict=True)]


def _said(hit: HistoryHit) -> str:
    """Before a message of the transcripts: the person's own words of that day, no summary."""
    if not hit.conversation:
        return ""
    return f"(From the conversation of {hit.timestamp[:10]}: the person's own message.) "


def _excerpt(hit: HistoryHit, share: int) -> str:
    text = hit.text
    if len(text) <= share:
        return text
    windows: list[tuple[int, int]] = []
    for s, e in hit.spans:
        lo, hi = max(0, s - EXCERPT_CONTEXT), min(len(text), e + EXCERPT_CONTEXT)
        if windows and lo <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], hi))
        else:
            windows.append((lo, hi))
    stamp = text[: text.find("]") + 1] if text.startswith("[") else ""
    out, used = [stamp] if windows and windows[0][0] > 0 else [], len(stamp)
    for lo, hi in windows or [(0, share)]:
        piece = text[lo : min(hi, lo + max(share - used, 0))]
        if not piece:
            break
        out.append(("… " if lo > 0 else "") + piece + (" …" if lo + len(piece) < len(text) else ""))
        used += len(piece)
    return " ".join(out)
