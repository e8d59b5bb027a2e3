"""What an adapter hands the core (the answer goes back through bot.outbound)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Inbound:
    """One user message, already translated out of its platform."""

    platform: str  # "telegram", "discord", "cli"
    session_key: str  # e.g. "telegram:dm:42"; see bot.keys
    user_key: str  # e.g. "telegram-42"; owns the workspace
    text: str
    is_private: bool = True
    # The platform's id of this message (e.g. "<chat>:<message>"), so a message redelivered
    # after a crash is recognised instead of persisted and answered twice.
    message_id: str | None = None
