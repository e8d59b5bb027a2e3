"""Slash commands, implemented once for every platform and answered without the LLM."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bot.inbound import Inbound, Reply
from memory.search import SearchError, SearchResult, search_history

if TYPE_CHECKING:
    from bot.agent import Agent

RECALL_PAGE_SIZE = 5
RECALL_ENTRY_CHARS = 700
_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_]{0,31})(?:@\S+)?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class ParsedCommand:
    name: str
    args: str


def parse_command(text: str) -> ParsedCommand | None:
    """A command is "/name args"; "/etc/passwd is a file" is text, not a command."""
    match = _COMMAND.match(text.strip())
    if not match:
        return None
    return ParsedCommand(match.group(1).lower(), (match.group(2) or "").strip())


Handler = Callable[["Agent", Inbound, str], Awaitable[Reply]]


async def cmd_memory(agent: Agent, inbound: Inbound, args: str) -> Reply:
    content = agent.workspaces.get(inbound.user_key).memory.read().strip()
    if not content:
        return Reply("I don't remember anything about you yet.", private=True)
    return Reply(f"Here is what I remember about you:\n\n{content}", private=True)


def _parse_recall_args(args: str) -> tuple[str, int, bool]:
    """Options `--page N` and `--regex` (or `-r`) around the keywords."""
    page, regex, words = 1, False, []
    tokens = args.split(" ")
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in ("--regex", "-r"):
            regex = True
        elif token == "--page" and i + 1 < len(tokens) and tokens[i + 1].isdigit():
            page = max(1, int(tokens[i + 1]))
            i += 1
        else:
            words.append(token)
        i += 1
    return " ".join(words).strip(), page, regex


async def cmd_recall(agent: Agent, inbound: Inbound, args: str) -> Reply:
    query, page, regex = _parse_recall_args(args)
    if not query:
        return Reply(
            "Tell me what to look for, e.g. `/recall holiday plans`. Use \"quotes\" for a phrase, "
            "`--regex` for a regular expression, `--page 2` for more.",
            private=True,
        )
    path = agent.workspaces.get(inbound.user_key).history_path
    offset = (page - 1) * RECALL_PAGE_SIZE
    try:
        result = await asyncio.to_thread(
            search_history, path, query, limit=RECALL_PAGE_SIZE, offset=offset, regex=regex
        )
    except SearchError as exc:
        return Reply(f"I can't search for that: {exc}", private=True)
    return Reply(format_recall(query, result, page, regex), private=True)


def format_recall(query: str, result: SearchResult, page: int, regex: bool) -> str:
    """Dated entries with matches in bold, a page at a time, and how to get the next page."""
    if result.total == 0:
        return f"No match for “{query}” in your history."
    if not result.hits:
        return f"There is no page {page}: “{query}” matched {result.total} entries."
    first = (page - 1) * RECALL_PAGE_SIZE + 1
    last = first + len(result.hits) - 1
    lines = [f"History entries matching “{query}” ({first}–{last} of {result.total}):"]
    for hit in result.hits:
        lines.append(_mark(hit.text, hit.spans))
    if last < result.total:
        flag = " --regex" if regex else ""
        lines.append(f"More: /recall --page {page + 1}{flag} {query}")
    return "\n\n".join(lines)


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


async def cmd_new(agent: Agent, inbound: Inbound, args: str) -> Reply:
    started = await agent.start_new_session(inbound)
    if not started:
        return Reply("This conversation is already fresh.")
    return Reply("Started a fresh conversation. I'm filing the previous one into your history.")


async def cmd_help(agent: Agent, inbound: Inbound, args: str) -> Reply:
    lines = [f"I'm {agent.config.agent.bot_name}, and I remember our conversations.", ""]
    lines += [f"/{name} — {description}" for name, description in COMMAND_MENU]
    lines += ["", "Anything else you write is a message to me."]
    return Reply("\n".join(lines))


async def cmd_status(agent: Agent, inbound: Inbound, args: str) -> Reply:
    status = agent.session_status(inbound)
    return Reply(
        f"Model: {status.model}\n"
        f"Context: ~{status.context_tokens:,} of {status.window_tokens:,} tokens "
        f"({status.context_tokens * 100 // max(1, status.window_tokens)}%)\n"
        f"Messages in this conversation: {status.messages} "
        f"({status.unconsolidated} not yet filed)\n"
        f"Last consolidation: {status.last_consolidation}"
    )


# Answers that must never be shown in a group (an adapter may need to know before answering,
# e.g. to defer a Discord interaction ephemerally).
PRIVATE_COMMANDS = frozenset({"memory", "recall"})

COMMAND_MENU: list[tuple[str, str]] = [
    ("memory", "Show what I remember about you"),
    ("recall", "Search our past conversations: /recall <keywords>"),
    ("new", "Start a fresh conversation (the old one is filed)"),
    ("help", "What I can do"),
    ("status", "Model, context used, last consolidation"),
]

HANDLERS: dict[str, Handler] = {
    "memory": cmd_memory,
    "recall": cmd_recall,
    "new": cmd_new,
    "help": cmd_help,
    "status": cmd_status,
}


async def run_command(agent: Agent, inbound: Inbound, command: ParsedCommand) -> Reply:
    handler = HANDLERS.get(command.name)
    if handler is None:
        known = ", ".join(f"/{name}" for name, _ in COMMAND_MENU)
        return Reply(f"I don't know the command /{command.name}. Try one of: {known}.")
    reply = await handler(agent, inbound, command.args)
    if command.name in PRIVATE_COMMANDS and not reply.private:
        reply = replace(reply, private=True)  # whatever the handler said, it stays private
    return reply
