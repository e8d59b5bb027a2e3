"""How a settings section declares its keys, so one loader can read and check any section.

A section is a dataclass deriving from `Section`. Each field may say, through `setting()`, what a
valid value is, which URL schemes it takes, whether it is a secret (masked in repr, `redacted()`
and logs), the vendor environment variable that fills it when the file leaves it unset, and
whether an enabled section needs it. The core's sections and every platform plugin's section are
declared this way, so bot/config.py checks each of them the same way, in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any

SECRET_SHOWN = "***"


@dataclass(frozen=True)
class Rule:
    """What a valid value is, worded for the error message, and the check itself."""

    text: str
    check: Callable[[Any], bool]


POSITIVE_INT = Rule("a positive integer", lambda v: v > 0)
NON_NEGATIVE_INT = Rule("an integer of 0 or more", lambda v: v >= 0)
NON_EMPTY = Rule("a non-empty string", lambda v: bool(v.strip()))
PORT = Rule("a port number from 1 to 65535", lambda v: 0 < v < 65536)
HTTP = ("http", "https")
WEBSOCKET = ("ws", "wss")


@dataclass(frozen=True)
class KeySpec:
    """A field's declaration, as `setting()` stored it (all empty for a plain field)."""

    rule: Rule | None = None
    url: tuple[str, ...] = ()
    secret: bool = False
    env: str | None = None
    required: bool = False
    hint: str = ""
    single: bool = False  # a list key that may also be given as one string (a list of one)
    question: str = ""  # how `lightgrep init` asks for a required key (default: its name)


def setting(
    default: Any = MISSING,
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    rule: Rule | None = None,
    url: tuple[str, ...] = (),
    secret: bool = False,
    env: str | None = None,
    required: bool = False,
    hint: str = "",
    single: bool = False,
    question: str = "",
) -> Any:
    """A dataclass field carrying its KeySpec.

    `env` is a vendor variable (e.g. OPENAI_API_KEY) used only when the file leaves the key unset;
    `required` keys must be set (lists: non-empty) when the section is enabled, and `hint` ends
    that error message with how to fix it. `single`: a list key that also takes one string
    (`signing_key = "…"` as well as a list of keys). `question`: how `lightgrep init` asks a
    person for a required key, in words that need no knowledge of the config.
    """
    spec = KeySpec(rule, url, secret, env, required, hint, single, question)
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={"spec": spec})
    return dataclasses.field(default=default, metadata={"spec": spec})


def key_spec(f: dataclasses.Field[Any]) -> KeySpec:
    spec = f.metadata.get("spec")
    return spec if isinstance(spec, KeySpec) else KeySpec()


@dataclass(repr=False)
class Section:
    """Base of every settings section: a repr with secrets masked, so a logged section is safe.

    Subclasses are `@dataclass(repr=False)`: a generated repr would show the secrets."""

    def redacted(self) -> dict[str, Any]:
        """Every key, secrets replaced by '***' (None or [] stays: "unset" is no secret)."""
        shown: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            unset = value is None or value == []
            shown[f.name] = SECRET_SHOWN if key_spec(f).secret and not unset else value
        return shown

    def secrets(self) -> list[str]:
        """The values of the secret keys that are set (each of a list), for the log redactor."""
        found: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if key_spec(f).secret:
                values = value if isinstance(value, list) else [value]
                found += [v for v in values if isinstance(v, str) and v]
        return found

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.redacted().items())
        return f"{type(self).__name__}({shown})"


class SettingError(Exception):
    """A plugin's cross-key check failed: `problem` follows "[section] " in the message, and
    `key` names the setting whose origin (file or variable) the message should cite."""

    def __init__(self, problem: str, key: str = "enabled") -> None:
        super().__init__(problem)
        self.problem = problem
        self.key = key
