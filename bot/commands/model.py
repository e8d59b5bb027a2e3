"""/model: which of the operator's models answers a person, and, for a chat's admins, the only
one answering in that chat.

The models offered are the chain's ([llm] and each [[llm.fallback]], bot/llm/chain.py): the
chosen one is asked first, the others stay behind it as fallbacks. A person's choice is kept
with their memory (memory/preferences.py: it follows /link, survives restarts and goes with
/wipe); a chat's is a chat setting (bot/chats.py), and wins over the person's in that chat.
"""

from __future__ import annotations

from dataclasses import replace

from bot.commands.context import CommandContext
from memory.preferences import MODEL

MODEL_USAGE = (
    "/model NAME picks the model that answers you, /model default goes back to the bot's; in a "
    "chat, its admins: /model only NAME, /model any."
)


async def cmd_model(ctx: CommandContext, args: str) -> str:
    """List, pick, or (a chat's admins) restrict the model."""
    models = ctx.models
    if models is None or len(models.allowed) < 2:
        return "This bot offers one model, so there is nothing to choose."
    words = args.split()
    preferences = ctx.workspace.preferences
    if words[:1] in (["only"], ["any"]):
        return await _restrict(ctx, words)
    if len(words) > 1:
        return f"I didn't understand that. {MODEL_USAGE}"
    if words:
        name = words[0]
        if name.lower() == "default":
            preferences.set(MODEL, None)
        elif name in models.allowed:
            preferences.set(MODEL, None if name == models.allowed[0] else name)
        else:
            return f"{name!r} is not one of this bot's models: {', '.join(models.allowed)}."
    return _shown(ctx)


async def _restrict(ctx: CommandContext, words: list[str]) -> str:
    chat, models = ctx.chat, ctx.models
    assert models is not None
    if chat is None:
        return "Chats' settings are not kept here."
    if not chat.may_manage:
        return "Only this chat's admins can choose its model."
    current = chat.book.get(chat.chat_key)
    if words == ["any"]:
        chat.book.set(chat.chat_key, replace(current, model=None, owner=chat.owner))
        return "Everyone here is answered by the model they chose again."
    if len(words) != 2 or words[1] not in models.allowed:
        return f"Which one? /model only NAME, with one of: {', '.join(models.allowed)}."
    chat.book.set(chat.chat_key, replace(current, model=words[1], owner=chat.owner))
    return f"In this chat everyone is answered by {words[1]} from now on (/model any undoes it)."


def _shown(ctx: CommandContext) -> str:
    models = ctx.models
    assert models is not None
    chosen = ctx.workspace.preferences.get(MODEL)
    yours = chosen if chosen in models.allowed else models.allowed[0]
    lines = [f"Models: {', '.join(models.allowed)} (the first is the bot's default)."]
    lines.append(f"Yours: {yours}" + (" (your choice)." if yours == chosen else "."))
    only = ctx.chat.book.get(ctx.chat.chat_key).model if ctx.chat is not None else None
    if only in models.allowed and only != yours:
        lines.append(f"In this chat its admins chose {only}: it answers everyone here.")
    lines.append(MODEL_USAGE)
    return "\n".join(lines)
