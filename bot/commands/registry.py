"""Slash commands: one registry that /help, the platforms' command menus and the core all read.

A command is answered without the LLM. Its handler gets a narrow CommandContext (the user's
workspace and session, the inbound, the few figures and actions it needs), never the agent, so
commands stay testable on their own and bot.agent.agent is the only module that knows both.
"""

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from bot.commands.basic import (
    cmd_memory,
    cmd_new,
    cmd_privacy,
    cmd_status,
    cmd_usage,
    cmd_voice,
)
from bot.commands.context import CommandContext, Handler
from bot.commands.control import cmd_export, cmd_forget, cmd_wipe
from bot.commands.conversation import cmd_group, cmd_persona, cmd_retry, cmd_undo
from bot.commands.importing import cmd_import
from bot.commands.link import cmd_link, cmd_unlink
from bot.commands.model import cmd_model
from bot.commands.recall import cmd_recall
from bot.commands.reminders import cmd_remind, cmd_reminders, cmd_timezone
from bot.outbound import Outbound, Reply

GROUPS = "groups"  # Command.works_in: in group chats only

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
    # Where it works: "groups" for a command of group chats only (/group); /help leaves those
    # out, and `group_details`, where the platform has no group chats (the terminal).
    works_in: str = "any"
    group_details: str = ""  # what /help adds under it where there are group chats
    # Whether the command, with these arguments, works through the person's files whole (a
    # small budget of its own in [limits]: heavy_commands_per_hour).
    heavy: Callable[[str], bool] = lambda args: False
    # It writes the person's reminders (its own budget: [limits] reminder_commands_per_minute).
    reminders: bool = False
    # Whether, with these arguments, in a group, the adapter asks the platform whether the
    # sender administers the chat (Inbound.chat_admin): the command changes the chat's
    # settings, or reaches what others set there (/reminders group).
    chat_admin: Callable[[str], bool] = lambda args: False
    # Its answer is part of the conversation (/retry's): the adapter sends its receipt.
    in_conversation: bool = False
    # A file sent with it is its input (/import's export), downloaded within its own limit.
    takes_file: bool = False


async def cmd_help(ctx: CommandContext, args: str) -> str:
    """The commands that work on this platform (no group ones where there are no groups)."""
    groups = ctx.inbound.has_groups
    lines = [f"I'm {ctx.bot_name}, and I remember our conversations.", ""]
    for command in COMMANDS:
        if command.works_in == GROUPS and not groups:
            continue
        lines.append(f"/{command.name} — {command.description}")
        for details in (command.details, command.group_details if groups else ""):
            if details:
                lines.append(f"    {details}")
    lines += ctx.inbound.help_notes
    lines += ["", "Anything else you write is a message to me."]
    return "\n".join(lines)


COMMANDS: tuple[Command, ...] = (
    Command(
        "memory",
        "Show what I remember about you; /memory history, /memory undo",
        cmd_memory,
        private=True,
        argument=Argument("action", "history, undo, or undo N", required=False),
        heavy=lambda args: _first(args) in ("history", "undo"),
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
        heavy=lambda args: _first(args) != "cancel",
    ),
    Command(
        "export",
        "Send you everything I keep about you, as a zip file",
        cmd_export,
        private=True,
        heavy=lambda args: True,
    ),
    Command(
        "import",
        "Bring in your ChatGPT or Claude conversations: send the export with /import",
        cmd_import,
        private=True,
        heavy=lambda args: True,
        takes_file=True,
        details="the export's zip or its conversations.json, as a file with /import as caption; "
        "/import facts: learn facts from what you imported",
    ),
    Command(
        "wipe",
        "Erase everything I know about you (asks first)",
        cmd_wipe,
        private=True,
        argument=Argument("action", "confirm or cancel", required=False),
        heavy=lambda args: _first(args) != "cancel",
    ),
    Command(
        "link",
        "One memory on every platform: /link gives a code for the other one",
        cmd_link,
        private=True,
        argument=Argument("code", "The code from /link on your other platform", required=False),
        details="/link CODE on the other platform, then /link confirm",
    ),
    Command(
        "unlink",
        "Take this account out of a shared memory, or remove another (asks first)",
        cmd_unlink,
        private=True,
        argument=Argument(
            "action",
            "An account of yours to remove (e.g. discord-77), or confirm / cancel",
            required=False,
        ),
    ),
    Command(
        "remind",
        "Remind you of something: /remind <when> <what>",
        cmd_remind,
        reminders=True,
        argument=Argument("what", "When, then what: e.g. tomorrow at 9 call the dentist"),
        details=(
            "when: in 10 minutes, at 18:30, tomorrow at 9, friday 18:30, 2026-12-24 18:00, "
            "every day at 8:00, every monday at 9"
        ),
    ),
    Command(
        "reminders",
        "Your reminders; /reminders cancel N (or all)",
        cmd_reminders,
        private=True,
        reminders=True,
        argument=Argument(
            "action",
            "cancel N, or cancel all; a group's admins: group, group cancel N",
            required=False,
        ),
        group_details=(
            "in a group, its admins: /reminders group (everyone's), /reminders group cancel N"
        ),
        chat_admin=lambda args: _first(args) == "group",
    ),
    Command(
        "timezone",
        "Your time zone for reminders: /timezone Europe/Lisbon",
        cmd_timezone,
        private=True,
        argument=Argument("zone", "An IANA name such as Europe/Lisbon", required=False),
    ),
    Command("new", "Start a fresh conversation (the old one is filed)", cmd_new),
    Command(
        "retry",
        "Answer your last message again (my old answer leaves the chat)",
        cmd_retry,
        in_conversation=True,
    ),
    Command("undo", "Take back your last message and my answer", cmd_undo),
    Command(
        "persona",
        "How I talk in this chat: /persona <instructions>, /persona reset",
        cmd_persona,
        argument=Argument("instructions", "What I should be like here, or reset", required=False),
        chat_admin=lambda args: True,
    ),
    Command(
        "group",
        "When I speak in this group: /group trigger mention|always|keyword <words>",
        cmd_group,
        argument=Argument("setting", "trigger mention, always or keyword <words>", required=False),
        chat_admin=lambda args: True,
        works_in=GROUPS,
    ),
    Command(
        "model",
        "Which model answers you: /model NAME, /model default; a chat's admins: /model only NAME",
        cmd_model,
        argument=Argument("name", "A model's name, default, only NAME, or any", required=False),
        chat_admin=lambda args: _first(args) in ("only", "any"),
    ),
    Command("help", "What I can do", cmd_help),
    Command("status", "Model, context used, last consolidation", cmd_status),
    Command(
        "usage",
        "Your tokens and their cost today and this month, and your limits",
        cmd_usage,
        private=True,
    ),
    Command(
        "privacy",
        "Whether I use your memory in group chats: /privacy groups on|off",
        cmd_privacy,
        private=True,
        argument=Argument("choice", "groups on, groups off or groups default", required=False),
    ),
    Command(
        "voice",
        "Whether I read my answers aloud too: /voice off|auto|always",
        cmd_voice,
        private=True,
        argument=Argument("mode", "off, auto (voice messages), always, or default", required=False),
    ),
)
_BY_NAME = {command.name: command for command in COMMANDS}


def is_command(name: str) -> bool:
    """Whether /name is a command of the registry."""
    return name in _BY_NAME


def is_heavy(parsed: ParsedCommand) -> bool:
    """Whether this command works through the person's files whole ([limits])."""
    command = _BY_NAME.get(parsed.name)
    return command is not None and command.heavy(parsed.args)


def is_reminder_command(parsed: ParsedCommand) -> bool:
    """Whether this command is one of /remind and /reminders ([limits])."""
    command = _BY_NAME.get(parsed.name)
    return command is not None and command.reminders


def _first(args: str) -> str:
    return args.split(" ", 1)[0].lower()


async def refuse_command(parsed: ParsedCommand, text: str, out: Outbound) -> None:
    """Answer a command a limit refused, with the command's privacy."""
    command = _BY_NAME.get(parsed.name)
    await out.begin(private=command is not None and command.private)
    await out.add_text(text)
    await out.finish()


def in_conversation(text: str) -> bool:
    """Whether the answer to `text` is part of the conversation (a turn's, or /retry's), so
    the adapter tells the core where it was sent (bot.inbound.Delivered)."""
    parsed = parse_command(text)
    command = _BY_NAME.get(parsed.name) if parsed is not None else None
    return parsed is None or (command is not None and command.in_conversation)


def takes_file(text: str) -> bool:
    """Whether `text` is a command whose attached file is its input (Command.takes_file)."""
    parsed = parse_command(text)
    command = _BY_NAME.get(parsed.name) if parsed is not None else None
    return command is not None and command.takes_file


def needs_chat_admin(text: str) -> bool:
    """Whether `text` is a command whose sender's standing in a group the adapter must ask
    the platform for (Command.chat_admin)."""
    parsed = parse_command(text)
    if parsed is None:
        return False
    command = _BY_NAME.get(parsed.name)
    return command is not None and command.chat_admin(parsed.args)


async def run_command(
    parsed: ParsedCommand, context: Callable[[], CommandContext], out: Outbound
) -> None:
    """Answer one command through `out`. The privacy is the command's, announced before any
    text; `context` is only built for a known command (an unknown one touches no files)."""
    command = _BY_NAME.get(parsed.name)
    await out.begin(private=command is not None and command.private)
    if command is None:
        reply = Reply(unknown_command(parsed.name))
    else:
        answer = await command.handler(replace(context(), say=out.add_text), parsed.args)
        reply = answer if isinstance(answer, Reply) else Reply(answer)
    await out.add_text(reply.text)
    for file in reply.files:
        await out.attach_file(file)
    if reply.buttons:
        await out.offer(reply.buttons)
    await out.finish()


def unknown_command(name: str) -> str:
    """The answer to /name that is not a command: the closest names first, then all of them."""
    known = ", ".join(f"/{c.name}" for c in COMMANDS)
    close = difflib.get_close_matches(name, _BY_NAME, n=2, cutoff=0.6)
    if close:
        guess = " or ".join(f"/{n}" for n in close)
        return f"I don't know the command /{name}. Did you mean {guess}? All commands: {known}."
    return f"I don't know the command /{name}. Try one of: {known}."
