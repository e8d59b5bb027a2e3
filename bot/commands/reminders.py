"""/remind, /reminders and /timezone: the person's reminders, by command (the model reaches the
same desk through its `remind` tool, bot/tools/remind.py). The work is bot/reminders/desk.py's;
these handlers read the arguments and word the answers."""

from __future__ import annotations

from bot.commands.context import CommandContext
from bot.reminders.desk import PersonReminders
from bot.reminders.when import EXAMPLE, FORMS
from bot.reminders.zones import EXAMPLES, ZoneError, label

NOT_HERE = "Reminders are not available here."
REMIND_USAGE = f"Tell me when, then what, e.g. {EXAMPLE}. When can be: {FORMS}."


def _desk(ctx: CommandContext) -> PersonReminders | None:
    return ctx.reminders


async def cmd_remind(ctx: CommandContext, args: str) -> str:
    desk = _desk(ctx)
    if desk is None:
        return NOT_HERE
    if not args.strip():
        return REMIND_USAGE
    return await desk.set_from_text(args)


async def cmd_reminders(ctx: CommandContext, args: str) -> str:
    desk = _desk(ctx)
    if desk is None:
        return NOT_HERE
    action, _, rest = args.strip().partition(" ")
    if not action:
        return await desk.listing()
    if action.lower() == "group":
        return await _group(ctx, rest.strip())
    if action.lower() in ("cancel", "delete", "remove"):
        if not rest.strip():
            return "Which one? /reminders cancel N (N from /reminders), or /reminders cancel all."
        return await desk.cancel(rest)
    return "Try /reminders to list them, /reminders cancel N or /reminders cancel all."


async def _group(ctx: CommandContext, args: str) -> str:
    """/reminders group [cancel N|all]: everyone's reminders in this group, for its admins."""
    group = ctx.group_reminders
    if group is None:
        return (
            "Ask in the group: there /reminders group lists the reminders waiting in it, "
            "whoever set them (for the group's admins). /reminders lists your own."
        )
    if ctx.chat is None or not ctx.chat.may_manage:
        return (
            "Only this group's admins (or the bot's) can see and cancel everyone's reminders "
            "here. /reminders lists your own."
        )
    action, _, rest = args.partition(" ")
    if not action:
        return await group.listing()
    if action.lower() in ("cancel", "delete", "remove"):
        if not rest.strip():
            return "Which one? /reminders group cancel N (N from /reminders group), or all."
        return await group.cancel(rest)
    return "Try /reminders group to list them, /reminders group cancel N or cancel all."


async def cmd_timezone(ctx: CommandContext, args: str) -> str:
    desk = _desk(ctx)
    if desk is None:
        return NOT_HERE
    name = args.strip()
    if not name:
        zone, chosen = desk.zone()
        why = "your choice" if chosen else "the bot's default"
        return (
            f"Your reminders are in {label(zone)} ({why}). Change it with /timezone and an IANA "
            f"name, such as {EXAMPLES}."
        )
    try:
        zone = desk.set_zone(name)
    except ZoneError as exc:
        return str(exc)
    return (
        f"Your time zone is now {label(zone)}: times you give and I show are in it. A repeating "
        "reminder keeps the zone it was set in (/reminders shows it)."
    )
