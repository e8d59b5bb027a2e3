"""What the bot says to a person on every platform when the intake, not the core, answers: a
refusal, a failure, where a private answer went. One wording, so the platforms cannot drift."""

from __future__ import annotations

REFUSAL = "Sorry, this bot is private and you are not on its allow list."
FAILED = "Sorry, something went wrong on my side. Please try again in a moment."
TEXT_ONLY = (
    "I can't read that kind of message. Send me text, pictures, voice messages or files "
    "(text, Markdown, CSV, JSON, source code, PDF)."
)
SENT_PRIVATELY = "I've sent you the answer in our private chat."
RESTARTING = "I'm restarting; please try again in a minute."


def private_only(how: str) -> str:
    """Said in a group when a private answer cannot reach the person's private chat; `how`:
    how to open one on this platform."""
    return f"I can only show that in a private chat. {how}"


def failed_here(failed: str, log: str) -> str:
    """The failure (`failed`) where the person is also the operator (the terminal): it says
    where the details are."""
    return f"({failed} The details are in {log}.)"
