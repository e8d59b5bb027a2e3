"""What a conversation's requests to the model hold: the newest user text, the whole talk."""

from __future__ import annotations

from typing import Any


def user_text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


def last_said(request: dict[str, Any]) -> str:
    return next(user_text(m) for m in reversed(request["messages"]) if m["role"] == "user")


def conversation(request: dict[str, Any]) -> str:
    return "\n".join(user_text(m) for m in request["messages"][1:] if m.get("content"))
