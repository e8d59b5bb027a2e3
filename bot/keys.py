"""The one place that turns platform ids into user keys and session keys.

Platform ids are untrusted: each part is escaped so that no id can forge another key's
separators. (File names are derived from keys separately, by memory.keys.)
"""

from __future__ import annotations

_KEPT_ASCII = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def _part(value: object) -> str:
    """Escape one id so it cannot contain ':' (the session separator); '%' escapes itself.

    Letters of any script are kept as they are ("José" stays "José", so `lightgrep memory
    cli-José` finds the person); what else could mislead a reader of a key (spaces, control
    and format characters such as bidi overrides, lone surrogates) becomes %XX of its UTF-8
    bytes, like ASCII punctuation."""
    return "".join(_kept(ch) for ch in str(value))


def _kept(ch: str) -> str:
    letter = not ch.isascii() and ch.isprintable() and not ch.isspace()
    if ch in _KEPT_ASCII or (letter and not 0xD800 <= ord(ch) <= 0xDFFF):
        return ch
    # surrogatepass: an id with a lone surrogate (a broken terminal locale) still gets a key.
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def user_key(platform: str, user_id: object) -> str:
    """`<platform>-<user_id>`, e.g. `cli-alice`: who owns the memory."""
    return f"{platform}-{_part(user_id)}"


def session_key(platform: str, scope: str, *parts: object) -> str:
    """`<platform>:<scope>:<part>:…`, e.g. `cli:dm:alice` or `<platform>:group:<chat>:<user>`."""
    return ":".join([platform, scope, *(_part(p) for p in parts)])


def chat_key(platform: str, scope: str, *parts: object) -> str:
    """The chat itself, whoever writes in it, e.g. `telegram:group:-1001`: its settings (when
    to speak, its persona: bot.chats) are kept by it. Spelt like a session key."""
    return session_key(platform, scope, *parts)
