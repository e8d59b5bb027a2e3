"""What a Telegram message says about its conversation, translated for the core: the message it
replies to (and the part of it the person quoted), whether its sender administers the chat,
and the ids of the answer the bot sent, for the receipt that lets a later reply find it."""

from __future__ import annotations

import logging

from telegram import Bot, Message
from telegram.error import TelegramError

from adapters.telegram.bot_api import flood_safe, raw_call
from bot.inbound import Quoted

log = logging.getLogger(__name__)

ADMIN_STATUSES = frozenset({"creator", "administrator"})
MAX_QUOTED_CHARS = 8192  # what an Inbound carries of a replied-to message (the core trims more)


def quoted_of(msg: Message, me: int) -> Quoted | None:
    """The message `msg` replies to, as Quoted; the person's quote (Telegram's `quote`: the
    part they selected) rather than the whole message when there is one. None for no reply,
    and for the reply every message in a forum topic makes to the topic's first message."""
    original = msg.reply_to_message
    if original is not None and (
        original.forum_topic_created is not None
        or (msg.is_topic_message and original.message_id == msg.message_thread_id)
    ):
        original = None
    quote = msg.quote.text if msg.quote is not None and msg.quote.text else None
    if original is None:
        if quote is None:
            return None  # (a reply to a message of another chat names it only by a quote)
        return Quoted(None, quote[:MAX_QUOTED_CHARS], partial=True)
    sender = original.from_user
    if sender is not None:
        author = sender.full_name
    elif original.sender_chat is not None:
        author = original.sender_chat.title or ""
    else:
        author = ""
    text = quote if quote is not None else (original.text or original.caption or "")
    return Quoted(
        message_id=f"{original.chat.id}:{original.message_id}",
        text=text[:MAX_QUOTED_CHARS],
        author=author,
        from_bot=sender is not None and sender.id == me,
        from_sender=(
            sender is not None and msg.from_user is not None and sender.id == msg.from_user.id
        ),
        partial=quote is not None,
    )


async def is_chat_admin(bot: Bot, chat_id: int, user_id: int) -> bool:
    """Whether Telegram says the user is the chat's creator or one of its administrators
    (getChatMember; only its status is read). A failed call counts as no."""
    try:
        member = await flood_safe(
            lambda: raw_call(bot, "getChatMember", {"chat_id": chat_id, "user_id": user_id})
        )
    except TelegramError as exc:
        log.info("telegram: getChatMember %s/%s failed: %s", chat_id, user_id, exc.message)
        return False
    return isinstance(member, dict) and member.get("status") in ADMIN_STATUSES
