"""What a person replied to, made into the context their message carries to the model.

The adapter hands over the replied-to message as the platform shows it (bot.inbound.Quoted);
here it becomes the `reply_to` field stored with the user message (memory.session renders it
before the message in every request, the same bytes each time):
- a quote (the part the person picked) is carried as it is;
- a whole message that is still in the conversation (the bot's answer by the platform id it was
  sent under, or text any unconsolidated message holds) is not carried again: a pointer to it,
  with its first words, says which one it was;
- anything else is carried, trimmed to `max_chars`: the platform's text, or, when the platform
  gives none, the bot's answer read from the transcript by its platform id (also after that
  answer was consolidated).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from bot.inbound import Quoted
from memory.session import HIDDEN, Session, SessionStore, sent_on_disk

POINTER_CHARS = 60  # the first words of a message already in the conversation
SCAN_CHARS = 65_536  # the newest text compared with a reply's (see _in_conversation)
_WORDS = re.compile(r"\w+")


async def reply_record(
    quoted: Quoted, sessions: SessionStore, session: Session, max_chars: int
) -> dict[str, Any] | None:
    """The `reply_to` field for a message replying to `quoted`, or None (nothing to say)."""
    text = quoted.text.strip()
    above = False
    from_bot = quoted.from_bot
    if quoted.message_id is not None and not quoted.partial:
        found = sessions.sent_answer(session, quoted.message_id)
        if found is None:  # consolidated, or never ours: read from the disk, off the loop
            on_disk = await asyncio.to_thread(sent_on_disk, session.path, quoted.message_id)
            found = None if on_disk is None else (on_disk, False)
        if found is not None:  # an answer of the bot's (the platform may not have said so)
            transcript, above = found
            text, from_bot = text or transcript.strip(), True
    if not text:
        return None
    if not quoted.partial and not above:
        own = session.message_ids.get(quoted.message_id or "")  # the person's own, in RAM
        shown = own is not None and not session.span(own, own + 1)[0].get(HIDDEN)
        above = shown or _in_conversation(text, session)
    who = "bot" if from_bot else "self" if quoted.from_sender else "other"
    limit = POINTER_CHARS if above else max_chars
    record: dict[str, Any] = {"who": who, "text": trimmed(text, limit)}
    if who == "other" and quoted.author:
        record["name"] = trimmed(" ".join(quoted.author.split()), 64)
    if above:
        record["above"] = True
    elif quoted.partial:
        record["quote"] = True
    return record


def trimmed(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at a word where one is near, marked "…"."""
    if len(text) <= limit:
        return text
    cut = text[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _in_conversation(text: str, session: Session) -> bool:
    """Whether an unconsolidated message still in the conversation holds `text` (compared by
    its words, so the Markdown the bot wrote and the text a platform shows agree).

    WHY bounded: splitting a 128k window's conversation into words took ~60 ms, on the loop.
    So the newest messages are compared first, SCAN_CHARS of them at most (an older one is
    carried again, trimmed: a small repeat, never a lost context), and only those holding the
    quote's longest word (a plain substring test) are split (bench/reply_bench.py)."""
    found = _WORDS.findall(text.lower())
    if not found:
        return False
    words, probe = " ".join(found), max(found, key=len)
    left = SCAN_CHARS
    for message in reversed(session.unconsolidated()):
        if message.get(HIDDEN) or message.get("role") not in ("user", "assistant"):
            continue
        content = message.get("content")
        said = (content if isinstance(content, str) else _text_parts(content)).lower()
        if probe in said and words in " ".join(_WORDS.findall(said)):
            return True
        left -= len(said)
        if left <= 0:
            return False
    return False


def _text_parts(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return " ".join(
        str(part.get("text")) for part in content if isinstance(part, dict) and part.get("text")
    )
