"""Taking back the last exchange of a conversation: /undo withdraws it, /retry replaces its
answer. Both append one record to the transcript (memory.session: the lines stay on disk) and
work only on an exchange not yet consolidated: what is in MEMORY.md and HISTORY.md cannot be
taken back this way (/forget removes text for good). The caller holds the session still."""

from __future__ import annotations

from bot.agent.replies import trimmed
from bot.commands.context import DONE, FILED, NOTHING, OLD, Taken
from memory.session import TURN, Session, SessionStore

SAID_CHARS = 60  # the start of the person's message, to say which exchange it was
CONVERSATION_START = "conversation_start"  # session metadata: where /new began the conversation


def conversation_start(session: Session) -> int:
    """Index of the first message after the last /new (0 if there was none)."""
    start = session.metadata.get(CONVERSATION_START, 0)
    if not isinstance(start, int) or isinstance(start, bool):
        return 0
    return min(max(0, start), session.total)


def withdraw_last(sessions: SessionStore, session: Session) -> Taken:
    """/undo: the newest user message still in the conversation, and all after it, leave it."""
    index, taken = _last_exchange(session)
    if index is None:
        return taken
    left = sum(1 for _ in session.span(index))
    sessions.withdraw(session, index)  # OSError: the caller says it was not saved
    return Taken(DONE, said=taken.said, messages=left)


def supersede_last(sessions: SessionStore, session: Session) -> tuple[Taken, bool]:
    """/retry: the answer after the newest user message leaves the conversation (True: there
    was one; the message is then answered again by the caller)."""
    index, taken = _last_exchange(session)
    if index is None:
        return taken, False
    answered = index + 1 < session.total
    if answered:
        sessions.supersede(session, index)
    return Taken(DONE, said=taken.said), answered


def _last_exchange(session: Session) -> tuple[int | None, Taken]:
    """The index of the newest user message that may be taken back, with what it said; or
    None and why not."""
    index = session.last_turn()
    if index is None:  # none after the cursor: the last exchange, if any, is filed
        return None, Taken(FILED if session.last_consolidated > 0 else NOTHING)
    message = session.span(index, index + 1)[0]
    content = message.get("content")
    text = content if isinstance(content, str) else _first_text(content)
    said = trimmed(" ".join(text.split()), SAID_CHARS)
    if not isinstance(message.get(TURN), str):
        return None, Taken(OLD, said=said)
    return index, Taken(DONE, said=said)


def _first_text(content: object) -> str:
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                return str(part["text"])
    return ""
