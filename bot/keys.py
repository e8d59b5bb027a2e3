"""The one place that turns platform ids into user keys and session keys.

Platform ids are untrusted: each part is escaped so that no id can forge another key's
separators. (File names are derived from keys separately, by memory.keys.)
"""

from __future__ import annotations

from urllib.parse import quote


def _part(value: object) -> str:
    """Escape one id so it cannot contain ':' (the session separator) or '-' ambiguity."""
    # surrogatepass: an id with a lone surrogate (a broken terminal locale) still gets a key.
    return quote(str(value), safe="", errors="surrogatepass")


def user_key(platform: str, user_id: object) -> str:
    """`<platform>-<user_id>`, e.g. `cli-alice`: who owns the memory."""
    return f"{platform}-{_part(user_id)}"


def session_key(platform: str, scope: str, *parts: object) -> str:
    """`<platform>:<scope>:<part>:…`, e.g. `cli:dm:alice` or `<platform>:group:<chat>:<user>`."""
    return ":".join([platform, scope, *(_part(p) for p in parts)])
