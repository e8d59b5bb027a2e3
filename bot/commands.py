"""Slash commands: one registry that /help, the platforms' command menus and the core all read.

A command is answered without the LLM. Its handler gets a narrow CommandContext (the user's
workspace and session, the inbound, the few figures and actions it needs), never the agent, so
commands stay testable on their own and bot.agent is the only module that knows both.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

from bot.confirm import Confirmations
from bot.control import (
    cmd_export,
    cmd_forget,
    cmd_wipe,
    held_text,
    memory_history,
    memory_undo,
)
from bot.inbound import Inbound
from bot.limits import UsageReport
from bot.outbound import Outbound, Reply
from memory.control.versions import HeldUpdate
from memory.preferences import MEMORY_IN_GROUPS
from memory.search.engine import SearchError, SearchResult, search_history
from memory.session import Session
from memory.usage import Totals
from memory.workspace import Workspace

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


@dataclass(frozen=True)
class SessionStatus:
    """The figures /status shows, measured by the core."""

    model: str
    context_tokens: int  # the prompt and the answer's share: what the provider counts
    answer_tokens: int
    window_tokens: int
    messages: int
    unconsolidated: int
    last_consolidation: str
    memory_tokens: int = 0  # MEMORY.md's size, and its budget ([memory] max_memory_tokens)
    memory_budget_tokens: int = 0
    held: HeldUpdate | None = None  # an update held back since MEMORY.md was last written


@dataclass(frozen=True)
class CommandContext:
    """What a handler may use: this user's files and two actions the core performs for it."""

    inbound: Inbound
    workspace: Workspace
    session: Session
    bot_name: str
    status: Callable[[], SessionStatus]  # /status figures of this session
    start_new: Callable[[], Awaitable[bool]]  # /new: False when there was nothing to file
    confirmations: Confirmations  # the questions /forget and /wipe wait on
    # Inside it no turn, consolidation or memory write of this user runs (pending ones are
    # waited for); what the core derived from the user's files is rebuilt afterwards.
    exclusive: Callable[[], AbstractAsyncContextManager[None]]
    erase: Callable[[], Awaitable[bool]]  # /wipe: everything of this user; False if nothing
    memory_in_groups: bool = False  # the operator's default for /privacy ([agent])
    usage: Callable[[], UsageReport] | None = None  # /usage figures of this user


# A handler answers with text, or with a Reply carrying files or buttons too. The privacy is
# the command's own (announced before the handler runs), not the Reply's.
Handler = Callable[[CommandContext, str], Awaitable[str | Reply]]


@dataclass(frozen=True)
class Argument:
    """A command's one argument; platforms with typed options (Discord) build theirs from it."""

    name: str
    description: str
    required: bool = True


@dataclass(frozen=True)
class Command:
    """One command. A private answer is never shown in a group, so the platform learns it
    before any text (Discord defers ephemerally, Telegram answers in the private chat)."""

    name: str
    description: str
    handler: Handler
    private: bool = False
    argument: Argument | None = None
    details: str = ""  # shown under it by /help (menus get only the short description)


async def cmd_memory(ctx: CommandContext, args: str) -> str:
    action, _, rest = args.partition(" ")
    if action.lower() == "undo":
        return await memory_undo(ctx, rest.strip())
    if action.lower() == "history":
        return memory_history(ctx)
    if action:
        return "Try /memory, /memory history or /memory undo."
    content = ctx.workspace.memory.read().strip()
    if not content:
        return "I don't remember anything about you yet."
    return f"Here is what I remember about you:\n\n{content}"


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


async def recall(history_path: Path, query: RecallQuery) -> str:
    """The answer to a /recall; raises SearchError for a query that cannot be run (its message
    is for the user), so the CLI can exit non-zero."""
    if not query.text:
        return RECALL_HELP
    if not await asyncio.to_thread(_has_history, history_path):
        return NO_HISTORY
    offset = (query.page - 1) * RECALL_PAGE_SIZE
    result = await asyncio.to_thread(
        search_history,
        history_path,
        query.text,
        limit=RECALL_PAGE_SIZE,
        offset=offset,
        regex=query.regex,
    )
    return format_recall(query.text, result, query.page, query.regex)


def _has_history(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            head = file.read(4096)
    except FileNotFoundError:
        return False
    return bool(head.strip()) or len(head) == 4096


async def cmd_recall(ctx: CommandContext, args: str) -> str:
    try:
        query = parse_recall_args(args)
        return await recall(ctx.workspace.history_path, query)
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
    lines = [f"History entries matching “{query}” ({first}–{last} of {result.total}):"]
    for hit in result.hits:
        lines.append(_mark(hit.text, hit.spans) + _why(hit.why))
    if last < result.total:
        flag = " --regex" if regex else ""
        lines.append(f"More: /recall --page {page + 1}{flag} {query}")
    return "\n\n".join(lines)


_WHY = {
    "word": "{}",
    "phrase": "“{}”",
    "form": "{} (form)",
    "part": "{} (inside a word)",
    "date": "{} (date)",
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


async def cmd_new(ctx: CommandContext, args: str) -> str:
    if not await ctx.start_new():
        return "This conversation is already fresh."
    return "Started a fresh conversation. I'm filing the previous one into your history."


PRIVACY_USAGE = (
    "Use /privacy groups on to let me use your memory in group chats, /privacy groups off to "
    "keep it out of them, /privacy groups default for the bot's setting."
)


async def cmd_privacy(ctx: CommandContext, args: str) -> str:
    """Whether the person's memory is used in group chats, where every answer is public."""
    words = args.lower().split()
    preferences = ctx.workspace.preferences
    if words:
        choice = {"on": True, "off": False, "default": None}.get(words[-1])
        if words[0] != "groups" or len(words) != 2 or words[-1] not in ("on", "off", "default"):
            return f"I didn't understand that. {PRIVACY_USAGE}"
        preferences.set(MEMORY_IN_GROUPS, choice)
    chosen = preferences.get(MEMORY_IN_GROUPS)
    shown = chosen if isinstance(chosen, bool) else ctx.memory_in_groups
    why = "your choice" if isinstance(chosen, bool) else "the bot's setting"
    if shown:
        state = (
            "In group chats I use your memory (MEMORY.md and your history), and everyone in the "
            "group reads my answers"
        )
    else:
        state = (
            "In group chats I don't use your memory: I see neither MEMORY.md nor your history "
            "there, and what you tell me there can be noted but not read back"
        )
    return f"{state} ({why}). Private chats always use it.\n{PRIVACY_USAGE}"


async def cmd_usage(ctx: CommandContext, args: str) -> str:
    """The person's own usage, as the provider counted it, and the limits that apply to them."""
    if ctx.usage is None:
        return "Usage is not counted here."
    report = ctx.usage()
    lines = [
        f"Today ({report.day}, UTC): {_tokens(report.today)}.",
        f"This month ({report.month_name}): {_tokens(report.month)}.",
    ]
    if report.admin:
        lines.append("You are an admin of this bot: no limits apply to you.")
    else:
        limits = []
        if report.tokens_per_day:
            left = max(0, report.tokens_per_day - report.today.tokens)
            limits.append(
                f"{report.tokens_per_day:,} tokens a day ({left:,} left; the day resets at "
                f"midnight UTC, in {report.resets_in})"
            )
        if report.messages_per_minute:
            limits.append(f"{report.messages_per_minute} messages a minute")
        lines.append("Your limits: " + "; ".join(limits) + "." if limits else "No limits are set.")
    return "\n".join(lines)


def _tokens(totals: Totals) -> str:
    return (
        f"{totals.tokens:,} tokens ({totals.prompt_tokens:,} read, "
        f"{totals.completion_tokens:,} written) in {totals.calls:,} model calls"
    )


TERMINAL = "cli"  # the platform name adapters/terminal.py gives its Inbound
TERMINAL_HELP = (
    "/quit — Leave (Ctrl-D, or Ctrl-C at an empty prompt, too)",
    "Esc then Enter (or Alt+Enter) starts a new line; Ctrl-C stops an answer under way.",
)


async def cmd_help(ctx: CommandContext, args: str) -> str:
    lines = [f"I'm {ctx.bot_name}, and I remember our conversations.", ""]
    for command in COMMANDS:
        lines.append(f"/{command.name} — {command.description}")
        if command.details:
            lines.append(f"    {command.details}")
    if ctx.inbound.platform == TERMINAL:
        lines += TERMINAL_HELP
    lines += ["", "Anything else you write is a message to me."]
    return "\n".join(lines)


async def cmd_status(ctx: CommandContext, args: str) -> str:
    status = ctx.status()
    text = (
        f"Model: {status.model}\n"
        f"Context: ~{status.context_tokens:,} of {status.window_tokens:,} tokens "
        f"({status.context_tokens * 100 // max(1, status.window_tokens)}%, "
        f"{status.answer_tokens:,} of them kept for the answer)\n"
        f"Messages in this conversation: {status.messages} "
        f"({status.unconsolidated} not yet filed)\n"
        f"Last consolidation: {status.last_consolidation}\n"
    )
    if not ctx.inbound.is_private:  # the memory is the person's own business
        return text + "Memory: shown by /status in a private chat"
    return text + _memory_status(status)


def _memory_status(status: SessionStatus) -> str:
    used, budget = status.memory_tokens, status.memory_budget_tokens
    text = f"Memory: ~{used:,} of {budget:,} tokens ({used * 100 // max(1, budget)}%)"
    if used > budget:
        text += ": over its budget; /forget removes what you no longer need"
    if status.held is not None:
        text += "\n" + held_text(status.held)
    return text


COMMANDS: tuple[Command, ...] = (
    Command(
        "memory",
        "Show what I remember about you; /memory history, /memory undo",
        cmd_memory,
        private=True,
        argument=Argument("action", "history, undo, or undo N", required=False),
    ),
    Command(
        "recall",
        "Search our past conversations: /recall <keywords>",
        cmd_recall,
        private=True,
        argument=Argument("keyword", "Words to look for in your history"),
        details='"a phrase" in quotes; --regex PATTERN for a regular expression; --page N',
    ),
    Command(
        "forget",
        "Forget something for good: /forget <words>",
        cmd_forget,
        private=True,
        argument=Argument("words", "The words or phrase to forget"),
    ),
    Command(
        "export", "Send you everything I keep about you, as a zip file", cmd_export, private=True
    ),
    Command(
        "wipe",
        "Erase everything I know about you (asks first)",
        cmd_wipe,
        private=True,
        argument=Argument("action", "confirm or cancel", required=False),
    ),
    Command("new", "Start a fresh conversation (the old one is filed)", cmd_new),
    Command("help", "What I can do", cmd_help),
    Command("status", "Model, context used, last consolidation", cmd_status),
    Command(
        "usage", "Your token usage today and this month, and your limits", cmd_usage, private=True
    ),
    Command(
        "privacy",
        "Whether I use your memory in group chats: /privacy groups on|off",
        cmd_privacy,
        private=True,
        argument=Argument("choice", "groups on, groups off or groups default", required=False),
    ),
)
_BY_NAME = {command.name: command for command in COMMANDS}


def is_command(name: str) -> bool:
    """Whether /name is a command of the registry."""
    return name in _BY_NAME


async def run_command(
    parsed: ParsedCommand, context: Callable[[], CommandContext], out: Outbound
) -> None:
    """Answer one command through `out`. The privacy is the command's, announced before any
    text; `context` is only built for a known command (an unknown one touches no files)."""
    command = _BY_NAME.get(parsed.name)
    await out.begin(private=command is not None and command.private)
    if command is None:
        known = ", ".join(f"/{c.name}" for c in COMMANDS)
        reply = Reply(f"I don't know the command /{parsed.name}. Try one of: {known}.")
    else:
        answer = await command.handler(context(), parsed.args)
        reply = answer if isinstance(answer, Reply) else Reply(answer)
    await out.add_text(reply.text)
    for file in reply.files:
        await out.attach_file(file)
    if reply.buttons:
        await out.offer(reply.buttons)
    await out.finish()
