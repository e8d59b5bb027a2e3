"""The everyday commands: /memory, /new, /privacy, /voice, /usage and /status."""

from __future__ import annotations

from decimal import Decimal

from bot.commands.context import CommandContext, SessionStatus
from bot.commands.control import held_text, memory_history, memory_undo
from bot.usage import Cost, money
from memory.preferences import MEMORY_IN_GROUPS, VOICE
from memory.usage import Totals


async def cmd_memory(ctx: CommandContext, args: str) -> str:
    action, _, rest = args.partition(" ")
    if action.lower() == "undo":
        return await memory_undo(ctx, rest.strip())
    if action.lower() == "history":
        return await memory_history(ctx)
    if action:
        return "Try /memory, /memory history or /memory undo."
    content = ctx.workspace.memory.read().strip()
    if not content:
        return "I don't remember anything about you yet."
    return f"Here is what I remember about you:\n\n{content}"


async def cmd_new(ctx: CommandContext, args: str) -> str:
    outcome = await ctx.start_new()
    if outcome == "fresh":
        return "This conversation is already fresh."
    if outcome == "waits":
        return (
            "Started a fresh conversation. Filing the previous one into your history needs my "
            "language model, and what you may spend is used up for now (/usage says until "
            "when): I'll file it before I answer your next message once you may again. Nothing "
            "is lost."
        )
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


VOICE_USAGE = (
    "Use /voice always to hear every answer, /voice auto to hear the answers to your voice "
    "messages, /voice off for text only, /voice default for the bot's setting."
)
VOICE_MODES = {
    "off": "my answers are text only",
    "auto": "I answer a voice message with my voice too, after the text",
    "always": "I read every answer aloud too, after the text",
}


async def cmd_voice(ctx: CommandContext, args: str) -> str:
    """Whether the person's answers are also read aloud (a choice kept with their memory)."""
    voice = ctx.voice
    if voice is None or not voice.enabled:
        return "I can't read my answers aloud on this bot: its operator has not set up a voice."
    words = args.lower().split()
    preferences = ctx.workspace.preferences
    if words:
        if len(words) != 1 or words[0] not in (*VOICE_MODES, "default"):
            return f"I didn't understand that. {VOICE_USAGE}"
        preferences.set(VOICE, None if words[0] == "default" else words[0])
    mode, own = voice.mode_of(preferences)
    why = "your choice" if own else "the bot's setting"
    lines = [f"Voice: {mode} ({why}): {VOICE_MODES[mode]}."]
    limit = voice.config.chars_per_day
    spoken = voice.spoken_today(ctx.inbound.user_key)
    if limit:
        lines.append(f"Read aloud today: {spoken:,} of your {limit:,} characters (UTC day).")
    lines.append(VOICE_USAGE)
    return "\n".join(lines)


async def cmd_usage(ctx: CommandContext, args: str) -> str:
    """The person's own usage, as the provider counted it, and the limits that apply to them."""
    if ctx.usage is None:
        return "Usage is not counted here."
    report = ctx.usage()
    lines = [
        f"Today ({report.day}, UTC): {_tokens(report.today)}{_cost(report.today_cost)}.",
        f"This month ({report.month_name}): {_tokens(report.month)}{_cost(report.month_cost)}.",
    ]
    voice = ctx.voice if ctx.voice is not None and ctx.voice.enabled else None
    if voice is not None:  # the speech server counts characters, not tokens (bot/media/voice.py)
        spoken = voice.spoken_today(ctx.inbound.user_key)
        lines.append(f"Read aloud today: {spoken:,} characters (/voice).")
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
        day = f"at midnight UTC, in {report.resets_in}"
        for cap, spent, every, resets in (
            (report.cost_per_day, report.today_cost, "a day", day),
            (report.cost_per_month, report.month_cost, "a month", report.month_resets),
        ):
            if cap and spent is not None:
                remaining = max(Decimal(0), Decimal(repr(cap)) - spent.amount)
                limits.append(f"{money(cap)} {every} ({money(remaining)} left; it resets {resets})")
        if voice is not None and voice.config.chars_per_day:
            limits.append(f"{voice.config.chars_per_day:,} characters read aloud a day")
        if report.messages_per_minute:
            limits.append(f"{report.messages_per_minute} messages a minute, commands included")
        if report.heavy_commands_per_hour:
            limits.append(
                f"{report.heavy_commands_per_hour} of /export, /forget, /wipe and /memory "
                "history or undo an hour"
            )
        lines.append("Your limits: " + "; ".join(limits) + "." if limits else "No limits are set.")
    return "\n".join(lines)


def _tokens(totals: Totals) -> str:
    cached = totals.cached_prompt_tokens
    cache = f", {cached:,} of them from the server's cache" if cached else ""
    return (
        f"{totals.tokens:,} tokens ({totals.prompt_tokens:,} read{cache}, "
        f"{totals.completion_tokens:,} written) in {totals.calls:,} model calls"
    )


def _cost(cost: Cost | None) -> str:
    """What it cost at [prices] (", costing $0.0123"); nothing when no price is set."""
    if cost is None:
        return ""
    unpriced = cost.unpriced_tokens
    rest = f" (and {unpriced:,} tokens of a model with no price set)" if unpriced else ""
    return f", costing {money(cost.amount)}{rest}"


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
        f"{_shares(status)}\n"
        f"Tools: {', '.join(status.tools) or 'none'}\n"
    )
    if not ctx.inbound.is_private:  # the memory is the person's own business
        return text + "Memory: shown by /status in a private chat"
    return text + _memory_status(status) + _linked(ctx)


def _linked(ctx: CommandContext) -> str:
    """The accounts sharing this memory (/link), private chats only."""
    members = ctx.links.members() if ctx.links is not None else []
    if len(members) < 2:
        return "\nLinked accounts: none (/link shares this memory with another platform)"
    return "\nLinked accounts (one memory): " + ", ".join(members)


def _shares(status: SessionStatus) -> str:
    """How the window is shared: what every prompt carries, what is left to the conversation."""
    window = max(1, status.window_tokens)
    rest = status.fixed_tokens + status.memory_budget_tokens + status.answer_tokens
    conversation = max(0, window - rest - status.margin_tokens)
    parts = [
        ("fixed part", status.fixed_tokens),
        ("memory", status.memory_budget_tokens),
        ("conversation", conversation),
        ("answer", status.answer_tokens),
    ]
    shown = ", ".join(f"{name} {round(n * 100 / window)}%" for name, n in parts)
    where = f" ({status.window_from})" if status.window_from else ""
    return f"Window {status.window_tokens:,} tokens{where}: {shown}"


def _memory_status(status: SessionStatus) -> str:
    used, budget = status.memory_tokens, status.memory_budget_tokens
    text = f"Memory: ~{used:,} of {budget:,} tokens ({used * 100 // max(1, budget)}%)"
    if used > budget:
        text += ": over its budget; /forget removes what you no longer need"
    if status.held is not None:
        text += "\n" + held_text(status.held)
    return text
