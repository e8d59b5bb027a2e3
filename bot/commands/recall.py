"""/recall: the person's history searched, a page at a time, each entry saying why it matched."""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass
from pathlib import Path

from bot.commands.context import CommandContext
from memory.search import transcripts
from memory.search.engine import HistoryHit, SearchError, SearchResult

RECALL_PAGE_SIZE = 5
RECALL_ENTRY_CHARS = 700


RECALL_HELP = (
    'Tell me what to look for, e.g. `/recall holiday plans`. Options: "quotes" for a phrase, '
    "`--regex PATTERN` (or `-r`) for a regular expression, `--page N` for more results."
)
NO_HISTORY = (
    "There is no history to search yet: conversations are filed into it once they grow long, "
    "or when you start a fresh one with /new."
)
# Phone keyboards turn " into curly quotes; they quote the same way.
_CURLY_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"'})


class RecallArgsError(ValueError):
    """/recall arguments that cannot be understood; the message is for the user."""


@dataclass(frozen=True)
class RecallQuery:
    """What /recall (and `lightgrep recall`) searches for: memory.search.engine's query syntax."""

    text: str
    page: int = 1
    regex: bool = False


def parse_recall_args(args: str) -> RecallQuery:
    """`--regex`/`-r`, `--page N` (or `--page=N`) and keywords, split as a shell would.

    Quotes group words, and a group of several words stays a phrase; after `--regex` the rest
    is one pattern, its quotes dropped. Backslashes are kept as typed (a regex needs them), an
    apostrophe ("what's") is a letter when it opens no quote, and an unpaired double quote is
    left to the search to read."""
    page, regex, words = 1, False, []
    tokens = iter(_shell_words(args))
    for token in tokens:
        if token in ("--regex", "-r"):
            regex = True
        elif token == "--page":
            page = _page_number(next(tokens, None))
        elif token.startswith("--page="):
            page = _page_number(token.partition("=")[2])
        else:
            words.append(token)
    if regex:
        return RecallQuery(" ".join(words).strip(), page, True)
    phrases = [f'"{w}"' if any(c.isspace() for c in w) else w for w in words if w.strip()]
    return RecallQuery(" ".join(phrases), page, False)


def _shell_words(text: str) -> list[str]:
    text = text.translate(_CURLY_QUOTES)
    for quotes in ("\"'", '"'):  # then: an unpaired ' is an apostrophe
        lexer = shlex.shlex(text, posix=True)
        lexer.whitespace_split = True
        lexer.quotes, lexer.escape, lexer.commenters = quotes, "", ""
        try:
            return list(lexer)
        except ValueError:
            continue
    return text.split()  # an unpaired ": the search reads it (as far as the next quote)


def _page_number(text: str | None) -> int:
    if text is None:
        raise RecallArgsError("`--page` needs a number, e.g. `/recall --page 2 holiday`.")
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise RecallArgsError(f"`--page` needs a whole number from 1 up, not “{text}”.")
    return int(text)


async def recall(
    history_path: Path, sessions_dir: Path, query: RecallQuery, *, update: bool = True
) -> str:
    """The answer to a /recall: HISTORY.md, then the person's own consolidated messages
    (memory/search/transcripts.py; ``update=False`` only reads, for the operator's command).
    Raises SearchError for a query that cannot be run (its message is for the user), so the
    CLI can exit non-zero."""
    if not query.text:
        return RECALL_HELP
    offset = (query.page - 1) * RECALL_PAGE_SIZE
    result = await asyncio.to_thread(
        transcripts.search,
        history_path,
        sessions_dir,
        query.text,
        limit=RECALL_PAGE_SIZE,
        offset=offset,
        regex=query.regex,
        update=update,
    )
    if result.total == 0 and not await asyncio.to_thread(_has_history, history_path):
        return NO_HISTORY
    return format_recall(query.text, result, query.page, query.regex)


def _has_history(path: Path) -> bool:
    """Whether HISTORY.md, or the consolidated messages' derived text, holds anything."""
    if transcripts.existing(path.parent) is not None:
        return True
    try:
        with path.open("rb") as file:
            head = file.read(4096)
    except FileNotFoundError:
        return False
    return bool(head.strip()) or len(head) == 4096


async def cmd_recall(ctx: CommandContext, args: str) -> str:
    try:
        query = parse_recall_args(args)
        return await recall(ctx.workspace.history_path, ctx.workspace.sessions_dir, query)
    except RecallArgsError as exc:
        return f"{exc} {RECALL_HELP}"
    except SearchError as exc:
        return f"I can't search for that: {exc}"


def format_recall(query: str, result: SearchResult, page: int, regex: bool) -> str:
    """Dated entries with matches in bold, a page at a time, and how to get the next page."""
    if result.total == 0:
        return f"No match for “{query}” in your history."
    if not result.hits:
        return f"There is no page {page}: “{query}” matched {result.total} entries."
    first = (page - 1) * RECALL_PAGE_SIZE + 1
    last = first + len(result.hits) - 1
    where = "History entries" if not any(h.conversation for h in result.hits) else "Your history"
    if all(h.conversation for h in result.hits):
        where = "Your own messages"
    lines = [f"{where} matching “{query}” ({first}–{last} of {result.total}):"]
    for hit in result.hits:
        lines.append(_said(hit) + _mark(hit.text, hit.spans) + _why(hit.why))
    if last < result.total:
        flag = " --regex" if regex else ""
        lines.append(f"More: /recall --page {page + 1}{flag} {query}")
    return "\n\n".join(lines)


def _said(hit: HistoryHit) -> str:
    """Over a message of the transcripts: that these are the person's own words, not a
    summary (the search found what no history entry kept)."""
    if not hit.conversation:
        return ""
    return f"From the conversation of {hit.timestamp[:10]}, in your own words:\n"


_WHY = {
    "word": "{}",
    "phrase": "“{}”",
    "form": "{} (form)",
    "part": "{} (inside a word)",
    "date": "{} (date)",
    "number": "{} (number)",
    "typo": "{} (spelled like it)",
    "meaning": "close in meaning{}",  # no shared keyword: [search] embeddings found it
}


def _why(why: list[tuple[str, str]]) -> str:
    """A line saying what made the entry match: words, other forms of them, dates."""
    said = [_WHY[kind].format(text) for kind, text in why if kind in _WHY]
    return "\n↳ matched: " + ", ".join(dict.fromkeys(said)) if said else ""


def _mark(text: str, spans: list[tuple[int, int]]) -> str:
    """Bold the matched spans; cut a long entry after its first match, saying so."""
    first = min((start for start, _ in spans), default=0)
    end = max(RECALL_ENTRY_CHARS, min(len(text), first + RECALL_ENTRY_CHARS // 2))
    out, pos = [], 0
    for start, stop in sorted(spans):
        if start < pos or start >= end:
            continue
        out += [text[pos:start], "**", text[start:stop], "**"]
        pos = stop
    out.append(text[pos:end])
    if len(text) > end:
        out.append(f" … ({len(text) - end} more characters)")
    return "".join(out)
