"""The allow list shared by every platform (`allow_from`)."""

from __future__ import annotations

from collections.abc import Iterable


def is_allowed(allow_from: Iterable[str], user_id: object, username: str | None = None) -> bool:
    """True when `"*"`, the user's id, or their username (with or without "@") is listed."""
    allowed = {str(entry).strip().lstrip("@").lower() for entry in allow_from}
    if "*" in allowed:
        return True
    if str(user_id).lower() in allowed:
        return True
    return username is not None and username.lstrip("@").lower() in allowed
