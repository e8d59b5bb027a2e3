"""File names from keys: one safe path component, reversible and collision-free.

Keys come from chat platforms and are untrusted. Every character outside [A-Za-z0-9_-] becomes
%XX of its UTF-8 bytes, so '.', '/', '\\', ':' and NUL can never appear and no name is "." or "..".
Names longer than MAX_NAME_LENGTH are shortened to a readable prefix plus "~" and the key's
sha256; '~' never occurs in a plain encoding (it is escaped), so the two kinds cannot collide.
The empty key, whose plain encoding would be the empty string, is named "%".
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 200
HASHED_PREFIX_LENGTH = 120
EMPTY_KEY_NAME = "%"

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_PLAIN_NAME = re.compile(r"(?:[A-Za-z0-9_-]|%[0-9A-F]{2})+")


def _to_bytes(key: str) -> bytes:
    # surrogatepass: even a lone surrogate gets a name, and decodes back to itself.
    return key.encode("utf-8", "surrogatepass")


def _escape(key: str) -> str:
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in _to_bytes(key))


def encode_key(key: str) -> str:
    """The file or folder name for `key`: a single component that cannot leave its folder."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    if key == "":
        return EMPTY_KEY_NAME
    name = _escape(key)
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(_to_bytes(key)).hexdigest()
    return f"{name[:HASHED_PREFIX_LENGTH]}~{digest}"


def is_hashed_name(name: str) -> bool:
    """True for the shortened form of a long key, whose full key is recorded elsewhere."""
    return "~" in name


def decode_key(name: str) -> str | None:
    """The key a name was made from; None for hashed names and names encode_key never makes."""
    if name == EMPTY_KEY_NAME:
        return ""
    if is_hashed_name(name) or not _PLAIN_NAME.fullmatch(name):
        return None
    raw = bytearray()
    i = 0
    while i < len(name):
        if name[i] == "%":
            raw.append(int(name[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(name[i]))
            i += 1
    try:
        key = bytes(raw).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    # Only the canonical spelling decodes (e.g. not "%41" for "A"), keeping names one-to-one.
    return key if encode_key(key) == name else None
