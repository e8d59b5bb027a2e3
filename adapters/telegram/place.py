"""Where a Telegram message was written, so where its answer goes; read from PTB or a raw update.

A turn needs six things of the message it answers: the chat, whether it is private, the forum
topic, the message's id, the sender and the text. PTB's `Update.de_json` builds a Message of
about a hundred and fifty attributes (and its chat and sender) to give them, which cost more CPU
than the rest of receiving the update. So the commonest update, a private text message, is read
straight from its JSON (`private_text`); everything else (groups, where mentions and replies
decide whether the bot is addressed; commands; media; buttons) still goes through PTB's objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from telegram import Message, MessageEntity
from telegram.constants import ChatType


@dataclass(frozen=True)
class Place:
    """The chat of a message, whether it is private, the message's id (a group's answer replies
    to it) and its forum topic (None outside one: the answer goes there too)."""

    chat_id: int
    private: bool
    message_id: int
    thread: int | None = None

    def address(self, user_id: int) -> dict[str, str]:
        """The chat as plain ids (`Inbound.place`): where a reminder set here is sent later,
        by `send_to` (adapters/telegram/adapter.py)."""
        where = {"chat": str(self.chat_id), "user": str(user_id)}
        if self.thread is not None:
            where["thread"] = str(self.thread)
        return where

    @classmethod
    def of(cls, msg: Message) -> Place:
        return cls(
            chat_id=msg.chat.id,
            private=msg.chat.type == ChatType.PRIVATE,
            message_id=msg.message_id,
            thread=msg.message_thread_id if msg.is_topic_message else None,
        )


@dataclass(frozen=True)
class PrivateText:
    """A private text message that is not a command, as a turn reads it."""

    place: Place
    user_id: int
    username: str | None
    text: str


def private_text(raw: dict[str, Any]) -> PrivateText | None:
    """The private text message a raw update carries, read as PTB would read it; None for any
    other update, or one whose fields are not of the types the Bot API gives (PTB then decides)."""
    if raw.keys() != {"update_id", "message"}:
        return None
    message = raw["message"]
    if not isinstance(message, dict):
        return None
    chat, sender, text = message.get("chat"), message.get("from"), message.get("text")
    if not (isinstance(chat, dict) and chat.get("type") == ChatType.PRIVATE):
        return None
    if not isinstance(sender, dict) or sender.get("is_bot") is not False:
        return None
    chat_id, user_id, message_id = chat.get("id"), sender.get("id"), message.get("message_id")
    username = sender.get("username")
    thread = message.get("message_thread_id") if message.get("is_topic_message") else None
    if not (
        isinstance(text, str)
        and type(chat_id) is int
        and type(user_id) is int
        and type(message_id) is int
        and (username is None or isinstance(username, str))
        and (thread is None or type(thread) is int)
    ):
        return None
    if _starts_with_command(message.get("entities")):
        return None
    if message.keys() & {"reply_to_message", "quote", "external_reply"}:
        return None  # a reply: PTB reads what it replies to (adapters/telegram/conversation.py)
    return PrivateText(Place(chat_id, True, message_id, thread), user_id, username, text)


def _starts_with_command(entities: Any) -> bool:
    """Whether the text opens with a bot command (or its entities cannot be read: PTB decides)."""
    if entities is None:
        return False
    if not isinstance(entities, list):
        return True
    if not entities:
        return False
    first = entities[0]
    return not isinstance(first, dict) or (
        first.get("type") == MessageEntity.BOT_COMMAND and first.get("offset") == 0
    )
