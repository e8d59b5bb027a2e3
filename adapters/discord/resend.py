"""Sending a Discord answer by its destination alone, without the message or interaction it
answers (bot.platform.Resender): in `lightgrep ingress`, the answer of a message whose ingress
died while it was on its way, sent by the next one (bot/cluster/resend.py).

The destination is plain text ids (`Inbound.destination`): the channel, and in a guild the
message to reply to; for a slash command the interaction's token (valid 15 minutes). A private
answer is never sent where others can see it: asked in a guild, or by a slash command, it goes
to the person's DMs (a follow-up after the first could not be made ephemeral).
"""

from __future__ import annotations

from typing import Any

import discord

from adapters.discord.live import NO_MENTIONS

Messages = list[tuple[str, dict[str, Any]]]


def of_message(message: discord.Message, guild_id: int | None) -> dict[str, str]:
    """Where the answer to a DM or a guild message goes."""
    where = {"channel": str(message.channel.id), "user": str(message.author.id)}
    if guild_id is not None:
        where |= {"guild": str(guild_id), "reply_to": str(message.id)}
    return where


def place_of(channel_id: int | None, user_id: int, guild_id: int | None) -> dict[str, str]:
    """The channel itself (`Inbound.place`): where a reminder set there is sent later. No
    message to reply to and no interaction token (it expires after 15 minutes)."""
    where = {"user": str(user_id)}
    if channel_id is not None:
        where["channel"] = str(channel_id)
    if guild_id is not None:
        where["guild"] = str(guild_id)
    return where


def of_interaction(interaction: discord.Interaction) -> dict[str, str]:
    """Where the answer to a slash command (or a pressed button) goes: its follow-ups."""
    return {
        "interaction": interaction.token,
        "application": str(interaction.application_id),
        "user": str(interaction.user.id),
    }


def paced_channel(where: dict[str, str], *, private: bool) -> int | None:
    """The guild channel a message sent there posts in (paced at the channel's rate), None
    for a DM, an interaction's follow-up or a private answer (which goes to the DMs)."""
    if "interaction" in where or "channel" not in where or "guild" not in where or private:
        return None
    return int(where["channel"])


async def send_by_destination(
    client: discord.Client, where: dict[str, str], messages: Messages, *, private: bool
) -> None:
    """Send `messages` there; discord.HTTPException if Discord refused."""
    if "interaction" in where and not private:
        application, token = int(where["application"]), where["interaction"]
        hook = discord.Webhook.partial(application, token, client=client)
        try:
            for chunk, extra in messages:
                await hook.send(chunk, allowed_mentions=NO_MENTIONS, **extra)
            return
        except discord.NotFound:  # never deferred, so expired: the person's DMs instead
            pass
    if "interaction" in where or "channel" not in where or (private and "guild" in where):
        dm = await client.create_dm(discord.Object(id=int(where["user"])))
        for chunk, extra in messages:
            await dm.send(chunk, allowed_mentions=NO_MENTIONS, **extra)
        return
    channel = client.get_partial_messageable(int(where["channel"]))
    for index, (chunk, extra) in enumerate(messages):
        if index == 0 and "reply_to" in where:
            extra["reference"] = discord.MessageReference(
                message_id=int(where["reply_to"]),
                channel_id=int(where["channel"]),
                guild_id=int(where["guild"]),
                fail_if_not_exists=False,
            )
        await channel.send(chunk, allowed_mentions=NO_MENTIONS, **extra)
