"""The conversation as people hold it: /retry and /undo take back the last exchange, /persona
sets how the bot talks in this chat, /group when it speaks in a group.

The core does the work (bot/agent/conversation.py, bot.chats); these handlers word it."""

from __future__ import annotations

from dataclasses import replace

from bot.chats import MAX_PERSONA_CHARS, TRIGGERS, ChatSettings, clean_words
from bot.commands.context import (
    DONE,
    FILED,
    NOTHING,
    OLD,
    REFUSED,
    ChatControl,
    CommandContext,
    Taken,
)
from bot.outbound import Reply

STILL_ON_DISK = "The lines stay in the transcript on disk; only /forget removes text."


async def cmd_undo(ctx: CommandContext, args: str) -> str:
    if ctx.undo is None:
        return "Nothing to undo here."
    taken = await ctx.undo()
    if taken.outcome == DONE:
        return (
            f'Withdrawn: your message "{taken.said}" and my answer are out of this '
            "conversation: I won't see them again, and they won't be filed into my memory. "
            + STILL_ON_DISK
        )
    return _not_taken(taken, "undo")


async def cmd_retry(ctx: CommandContext, args: str) -> str | Reply:
    if ctx.retry is None:
        return "Nothing to retry here."
    taken = await ctx.retry()
    if taken.outcome == DONE and taken.answer is not None:
        return taken.answer
    if taken.outcome == REFUSED and taken.answer is not None:
        return taken.answer
    return _not_taken(taken, "retry")


def _not_taken(taken: Taken, what: str) -> str:
    if taken.outcome == NOTHING:
        return f"There is nothing to {what} in this conversation yet."
    if taken.outcome == FILED:
        return (
            f"I can't {what} that: our last exchange has already been filed into my memory. "
            "/forget removes something for good."
        )
    if taken.outcome == OLD:
        return (
            f'I can\'t {what} "{taken.said}": it was written before I could take messages '
            "back. /forget removes something for good."
        )
    return f"I couldn't {what} that: {taken.said}. Nothing changed; please try again later."


# ---- /persona ------------------------------------------------------------------------------

PERSONA_USAGE = (
    "/persona <instructions> sets how I talk in this chat (e.g. /persona Answer like a pirate), "
    "/persona shows them, /persona reset removes them."
)


async def cmd_persona(ctx: CommandContext, args: str) -> str:
    chat = ctx.chat
    if chat is None:
        return "Personas are not kept here."
    current = chat.book.get(chat.chat_key)
    if not args:
        return _persona_shown(chat, current)
    if not chat.may_manage:
        return "Only this chat's admins can change its persona."
    if args.lower() == "reset":
        if not current.persona:
            return "This chat has no persona of its own. " + PERSONA_USAGE
        chat.book.set(chat.chat_key, replace(current, persona=None, owner=chat.owner))
        return "The persona of this chat is removed; I talk as the bot's defaults say." + (
            await _unsaved(chat)
        )
    if len(args) > MAX_PERSONA_CHARS:
        return f"A persona may have at most {MAX_PERSONA_CHARS:,} characters ({len(args):,} given)."
    refusal = chat.persona_refusal(args)
    if refusal is not None:
        return refusal
    chat.book.set(chat.chat_key, replace(current, persona=args, owner=chat.owner))
    return (
        "From the next message on I follow these instructions in this chat (after my own "
        f"rules, which they cannot change):\n\n{args}"
    ) + await _unsaved(chat)


async def _unsaved(chat: ChatControl) -> str:
    """Nothing once the change is on disk (a thread writes it, bot.chats); else what to know."""
    error = await chat.book.saved()
    if error is None:
        return ""
    return (
        f"\n\n(It holds now, but I could not save it to disk yet: {error.strerror or error}. "
        "I keep trying; a restart before that would undo it.)"
    )


def _persona_shown(chat: ChatControl, current: ChatSettings) -> str:
    lines = []
    if chat.bot_persona.strip():
        lines.append(f"The bot's instructions for every chat:\n{chat.bot_persona.strip()}")
    if current.persona:
        lines.append(f"This chat's persona:\n{current.persona}")
    else:
        lines.append("This chat has no persona of its own.")
    return "\n\n".join([*lines, PERSONA_USAGE])


# ---- /group --------------------------------------------------------------------------------

GROUP_USAGE = (
    "/group trigger mention (answer @mentions, replies to me and commands), /group trigger "
    "always (every message), /group trigger keyword <words> (messages holding one of them, "
    "and mentions); /group shows the setting."
)


async def cmd_group(ctx: CommandContext, args: str) -> str:
    chat = ctx.chat
    if chat is None or ctx.inbound.is_private:
        return "/group is for group chats: there it says when I speak."
    current = chat.book.get(chat.chat_key)
    words = args.split()
    if not words:
        return _group_shown(chat, current)
    if words[0].lower() != "trigger" or len(words) < 2 or words[1].lower() not in TRIGGERS:
        return f"I didn't understand that. {GROUP_USAGE}"
    if not chat.may_manage:
        return "Only this group's admins (or the bot's) can change when I speak here."
    mode = words[1].lower()
    keywords: tuple[str, ...] = ()
    if mode == "keyword":
        checked = clean_words(words[2:])
        if isinstance(checked, str):
            return checked
        keywords = checked
    elif len(words) > 2:
        return f"/group trigger {mode} takes no words. {GROUP_USAGE}"
    chat.book.set(chat.chat_key, replace(current, trigger=mode, words=keywords))
    return "Done. " + _trigger_text(mode, keywords) + await _unsaved(chat)


def _group_shown(chat: ChatControl, current: ChatSettings) -> str:
    mode = current.trigger or chat.default_trigger
    words = current.words if current.trigger else chat.default_words
    why = "this group's choice" if current.trigger else "the bot's setting"
    return f"{_trigger_text(mode, words)} ({why})\n{GROUP_USAGE}"


def _trigger_text(mode: str, words: tuple[str, ...]) -> str:
    if mode == "always":
        return "In this group I answer every message."
    if mode == "keyword":
        listed = ", ".join(f'"{w}"' for w in words) or "(none set)"
        return f"In this group I answer messages holding {listed}, and @mentions and replies to me."
    return "In this group I answer @mentions, replies to me and commands."
