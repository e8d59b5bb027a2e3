"""What a Discord message says about its conversation, translated for the core: the message it
replies to (a message reference), whether its sender may manage the chat, which chat's
settings apply (a thread follows its channel), and the platform ids of messages."""

from __future__ import annotations

import discord

from adapters.discord.settings import PLATFORM
from bot.inbound import Quoted
from bot.keys import chat_key

MAX_QUOTED_CHARS = 8192  # what an Inbound carries of a replied-to message (the core trims more)


def platform_id(channel_id: int, message_id: int) -> str:
    """A message's id as the core keeps it: "<channel>:<message>", like Telegram's."""
    return f"{channel_id}:{message_id}"


def quoted_of(message: discord.Message, me: int) -> Quoted | None:
    """The message `message` replies to, as Quoted: its text when Discord sent it along,
    else only its id (the core finds an answer of the bot's by it in the transcript)."""
    reference = message.reference
    if reference is None or reference.message_id is None:
        return None
    where = platform_id(reference.channel_id or message.channel.id, reference.message_id)
    original = reference.resolved
    if not isinstance(original, discord.Message):  # not sent along, or deleted
        return Quoted(where, "")
    author = original.author
    text = original.content or " ".join(a.filename for a in original.attachments)
    return Quoted(
        message_id=where,
        text=text[:MAX_QUOTED_CHARS],
        author=author.display_name,
        from_bot=author.id == me,
        from_sender=author.id == message.author.id,
    )


def may_manage(member: discord.abc.User) -> bool:
    """Whether the member may manage the server or its channels (Discord's Manage Server or
    Manage Channels, which administrators and the owner have)."""
    if not isinstance(member, discord.Member):
        return False
    permissions = member.guild_permissions
    return permissions.manage_guild or permissions.manage_channels


def chat_of(guild_id: int, channel: object, channel_id: int | None) -> str:
    """The chat whose settings apply in the channel (`channel` as discord.py knows it, if it
    does): a thread follows its parent channel."""
    parent = channel.parent_id if isinstance(channel, discord.Thread) else None
    return chat_key(PLATFORM, "guild", guild_id, parent or channel_id)
