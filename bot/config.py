"""Configuration: one TOML file plus secrets from the environment (DESIGN.md §8).

Every key is documented in config.example.toml. Errors are ConfigError with one line that names
the key, never a traceback.
"""

from __future__ import annotations

import difflib
import os
import tempfile
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SECRET_FIELDS = frozenset({"api_key", "token"})
DEFAULT_CONFIG = Path("config.toml")


class ConfigError(Exception):
    """A configuration problem, worded for the person who wrote the file."""


class _Section:
    """Shared repr of the sections: secrets show as '***', so a logged config is safe."""

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in _redacted_section(self).items())
        return f"{type(self).__name__}({shown})"


@dataclass(repr=False)
class LLMConfig(_Section):
    base_url: str | None = None  # None: the OpenAI API
    api_key: str | None = None
    model: str = "gpt-4o-mini"
    context_window_tokens: int = 65536
    max_output_tokens: int = 2048
    temperature: float = 0.7
    timeout_s: float = 60.0
    max_retries: int = 2


@dataclass(repr=False)
class MemoryConfig(_Section):
    workspaces_dir: Path = Path("workspaces")
    keep_memory_versions: int = 10


@dataclass(repr=False)
class AgentConfig(_Section):
    max_tool_iterations: int = 8
    bot_name: str = "LightGrep"


@dataclass(repr=False)
class TelegramConfig(_Section):
    enabled: bool = False
    token: str | None = None
    allow_from: list[str] = field(default_factory=list)  # ids or usernames; "*" for everyone
    api_base: str | None = None  # self-hosted Bot API server, e.g. "http://127.0.0.1:8081"
    mode: str = "polling"  # "polling" or "webhook"
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = 8443
    poll_timeout_s: int = 30


@dataclass(repr=False)
class DiscordConfig(_Section):
    enabled: bool = False
    token: str | None = None
    allow_from: list[str] = field(default_factory=list)  # user ids; "*" for everyone
    api_base: str | None = None  # REST proxy, e.g. "http://127.0.0.1:9000/api/v10"
    gateway_url: str | None = None  # gateway proxy, e.g. "ws://127.0.0.1:9000/"
    message_content_intent: bool = False  # privileged; DMs and mentions work without it
    sync_guild_id: int | None = None  # sync slash commands to one guild only (fast iteration)


@dataclass(repr=False)
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    telegram: TelegramConfig = field(default_factory=TelegramConfig)
    discord: DiscordConfig = field(default_factory=DiscordConfig)
    source: Path | None = None  # the file it was loaded from; None: defaults + environment

    def redacted(self) -> dict[str, dict[str, Any]]:
        """Every setting by section, secrets replaced by '***' (or None when unset): safe to log."""
        return {name: _redacted_section(getattr(self, name)) for name in SECTIONS}

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in SECTIONS)
        return f"Config({shown}, source={self.source!r})"

    def enabled_platforms(self) -> list[str]:
        """Names of the chat platforms switched on, in a stable order."""
        return [name for name in PLATFORMS if getattr(self, name).enabled]


SECTIONS: dict[str, type[_Section]] = {
    "llm": LLMConfig,
    "memory": MemoryConfig,
    "agent": AgentConfig,
    "telegram": TelegramConfig,
    "discord": DiscordConfig,
}
PLATFORMS = ("telegram", "discord")
ENV_PREFIX = "LIGHTGREP_"
# The usual variables of each vendor fill a setting only when the file leaves it unset (a key meant
# for OpenAI must not silently replace the key a config file gives a local server); LIGHTGREP_*
# variables are explicit, so they override the file.
VENDOR_ENV: dict[str, tuple[str, str]] = {
    "OPENAI_API_KEY": ("llm", "api_key"),
    "OPENAI_BASE_URL": ("llm", "base_url"),
    "TELEGRAM_BOT_TOKEN": ("telegram", "token"),
    "DISCORD_BOT_TOKEN": ("discord", "token"),
}
TOKEN_ENV = {"telegram": "TELEGRAM_BOT_TOKEN", "discord": "DISCORD_BOT_TOKEN"}

_KIND_WORDS = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    Path: "a path (a string)",
    list: "a list of strings",
}


def _positive(v: Any) -> bool:
    return v > 0


def _non_negative(v: Any) -> bool:
    return v >= 0


def _non_empty(v: Any) -> bool:
    return bool(v.strip())


# (section, key) → (what a valid value is, check). Type errors use the same words.
RULES: dict[tuple[str, str], tuple[str, typing.Callable[[Any], bool]]] = {
    ("llm", "model"): ("a non-empty string", _non_empty),
    ("llm", "context_window_tokens"): ("a positive integer", _positive),
    ("llm", "max_output_tokens"): ("a positive integer", _positive),
    ("llm", "temperature"): ("a number from 0 to 2", lambda v: 0 <= v <= 2),
    ("llm", "timeout_s"): ("a positive number of seconds", _positive),
    ("llm", "max_retries"): ("an integer of 0 or more", _non_negative),
    ("memory", "keep_memory_versions"): ("an integer of 0 or more", _non_negative),
    ("agent", "max_tool_iterations"): ("a positive integer", _positive),
    ("agent", "bot_name"): ("a non-empty string", _non_empty),
    ("telegram", "mode"): ('"polling" or "webhook"', lambda v: v in ("polling", "webhook")),
    ("telegram", "webhook_port"): ("a port number from 1 to 65535", lambda v: 0 < v < 65536),
    ("telegram", "poll_timeout_s"): ("an integer of 0 or more", _non_negative),
    ("discord", "sync_guild_id"): ("a positive integer (a guild id)", _positive),
}
URL_SCHEMES: dict[tuple[str, str], tuple[str, ...]] = {
    ("llm", "base_url"): ("http", "https"),
    ("telegram", "api_base"): ("http", "https"),
    ("telegram", "webhook_url"): ("http", "https"),
    ("discord", "api_base"): ("http", "https"),
    ("discord", "gateway_url"): ("ws", "wss"),
}


def _redacted_section(section: object) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for f in fields(section):  # type: ignore[arg-type]
        value = getattr(section, f.name)
        if f.name in SECRET_FIELDS and value is not None:
            value = "***"
        shown[f.name] = value
    return shown


def load_config(path: Path | None = None, env: Mapping[str, str] = os.environ) -> Config:
    """The configuration from `path` (default ./config.toml if present) and the environment.

    Precedence: LIGHTGREP_<SECTION>_<KEY> variables, then the file, then OPENAI_API_KEY /
    TELEGRAM_BOT_TOKEN / DISCORD_BOT_TOKEN, then the defaults. Raises ConfigError (one line).
    """
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    loader = _Loader(path)
    if path is not None:
        loader.apply_file(_read_toml(path))
    loader.apply_env(env)
    loader.resolve_workspaces()
    loader.validate()
    return loader.config


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = Path(path).expanduser().read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such config file (copy config.example.toml to start)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: the config file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _kind(hint: Any) -> tuple[Any, bool]:
    """(base type, optional) of a field's annotation, e.g. `str | None` → (str, True)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _kind(inner[0])[0], True
    if typing.get_origin(hint) is list:
        return list, False
    return hint, False


def _field_kinds(cls: type) -> dict[str, tuple[Any, bool]]:
    hints = typing.get_type_hints(cls)
    return {f.name: _kind(hints[f.name]) for f in fields(cls)}


def _suggest(
    word: str, choices: typing.Iterable[str], show: typing.Callable[[str], str] = str
) -> str:
    """' (did you mean …?)' for a likely typo, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {show(close[0])}?)" if close else ""


class _Loader:
    """Builds one Config, remembering where each value came from so errors can say so."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.config = Config(source=path)
        self.label = str(path) if path is not None else "configuration"
        # (section, key) → where its value came from, for error messages.
        self.origin: dict[tuple[str, str], str] = {}

    def where(self, section: str, key: str) -> str:
        return self.origin.get((section, key), self.label)

    def fail(self, section: str, key: str, problem: str) -> typing.NoReturn:
        raise ConfigError(f"{self.where(section, key)}: [{section}] {key} {problem}")

    def describe(self, section: str, key: str, kind: Any) -> str:
        rule = RULES.get((section, key))
        if rule:
            return rule[0]
        if (section, key) in URL_SCHEMES:
            return "a URL"
        return _KIND_WORDS[kind]

    def apply_file(self, raw: dict[str, Any]) -> None:
        for name, table in raw.items():
            if name not in SECTIONS:
                if isinstance(table, dict):
                    hint = _suggest(name, SECTIONS, "[{}]".format)
                    raise ConfigError(f"{self.label}: unknown section [{name}]{hint}")
                raise ConfigError(
                    f"{self.label}: unknown key {name!r} outside any section "
                    f"(settings belong under a section such as [llm])"
                )
            if not isinstance(table, dict):
                raise ConfigError(
                    f"{self.label}: [{name}] must be a section (a table), got {table!r}"
                )
            kinds = _field_kinds(SECTIONS[name])
            for key, value in table.items():
                if key not in kinds:
                    raise ConfigError(
                        f"{self.label}: [{name}] unknown key {key!r}{_suggest(key, kinds, repr)}"
                    )
                self.origin[(name, key)] = self.label
                self._set(name, key, self._from_toml(name, key, value, *kinds[key]))

    def _set(self, section: str, key: str, value: Any) -> None:
        setattr(getattr(self.config, section), key, value)

    def _from_toml(self, section: str, key: str, value: Any, kind: Any, optional: bool) -> Any:
        bad = f"must be {self.describe(section, key, kind)}, got {value!r}"
        if optional and value == "":
            return None
        if kind is bool:
            if not isinstance(value, bool):
                self.fail(section, key, bad)
            return value
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                self.fail(section, key, bad)
            return value
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fail(section, key, bad)
            return float(value)
        if kind is list:
            # Numeric ids are common in allow lists: accept them as their text.
            if not isinstance(value, list) or not all(
                isinstance(v, str | int) and not isinstance(v, bool) for v in value
            ):
                self.fail(section, key, bad)
            return [str(v) for v in value]
        if not isinstance(value, str):
            self.fail(section, key, bad)
        return Path(value) if kind is Path else value

    def _from_env(self, section: str, key: str, text: str, kind: Any, optional: bool) -> Any:
        bad = f"must be {self.describe(section, key, kind)}, got {text!r}"
        text = text.strip()
        if optional and text == "":
            return None
        if kind is bool:
            words = {"true": True, "1": True, "yes": True, "on": True,
                     "false": False, "0": False, "no": False, "off": False}
            if text.lower() not in words:
                self.fail(section, key, bad)
            return words[text.lower()]
        if kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                self.fail(section, key, bad)
        if kind is list:
            return [part.strip() for part in text.split(",") if part.strip()]
        return Path(text) if kind is Path else text

    def apply_env(self, env: Mapping[str, str]) -> None:
        for name in sorted(env):
            if name.startswith(ENV_PREFIX):
                self._apply_prefixed(name, env[name])
        for name, (section, key) in VENDOR_ENV.items():
            text = env.get(name, "").strip()
            if text and (section, key) not in self.origin:
                self.origin[(section, key)] = f"environment {name}"
                self._set(section, key, text)

    def _apply_prefixed(self, name: str, text: str) -> None:
        section, _, key = name[len(ENV_PREFIX):].lower().partition("_")
        if section not in SECTIONS:
            hint = _suggest(section, SECTIONS, lambda s: f"{ENV_PREFIX}{s}_{key}".upper())
            if hint and key:  # looks like a misspelt section; anything else is not ours
                raise ConfigError(f"environment {name}: unknown section [{section}]{hint}")
            return
        kinds = _field_kinds(SECTIONS[section])
        if key not in kinds:
            hint = _suggest(key, kinds, lambda k: f"{ENV_PREFIX}{section}_{k}".upper())
            raise ConfigError(f"environment {name}: [{section}] has no key {key!r}{hint}")
        self.origin[(section, key)] = f"environment {name}"
        self._set(section, key, self._from_env(section, key, text, *kinds[key]))

    def resolve_workspaces(self) -> None:
        """Absolute, ~ expanded, relative to the config file's folder; created and writable."""
        memory = self.config.memory
        path = Path(memory.workspaces_dir).expanduser()
        from_file = self.where("memory", "workspaces_dir") == self.label and self.path
        if not path.is_absolute():
            base = Path(self.path).expanduser().absolute().parent if from_file else Path.cwd()
            path = base / path
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as exc:
            self.fail(
                "memory",
                "workspaces_dir",
                f"is an unreachable path: {path} ({exc.strerror or type(exc).__name__})",
            )
        memory.workspaces_dir = path

    def validate(self) -> None:
        for name, cls in SECTIONS.items():
            section = getattr(self.config, name)
            for key in _field_kinds(cls):
                value = getattr(section, key)
                rule = RULES.get((name, key))
                if rule and value is not None and not rule[1](value):
                    self.fail(name, key, f"must be {rule[0]}, got {value!r}")
                schemes = URL_SCHEMES.get((name, key))
                if schemes and value is not None:
                    self._check_url(name, key, value, schemes)
        for name in self.config.enabled_platforms():
            self._check_platform(name)

    def _check_url(self, section: str, key: str, value: str, schemes: tuple[str, ...]) -> None:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in schemes or not parts.hostname:
            wanted = " or ".join(f"{s}://" for s in schemes)
            self.fail(section, key, f"must be a URL starting with {wanted}, got {value!r}")

    def _check_platform(self, name: str) -> None:
        platform = getattr(self.config, name)
        where = self.where(name, "enabled")
        if not platform.token:
            raise ConfigError(
                f"{where}: [{name}] is enabled but token is missing: set token under [{name}] "
                f"or the {TOKEN_ENV[name]} environment variable"
            )
        if not platform.allow_from:
            raise ConfigError(
                f"{where}: [{name}] is enabled but allow_from is empty, so nobody could talk to "
                f'the bot: list user ids, or "*" for everyone'
            )
        if name == "telegram" and platform.mode == "webhook" and not platform.webhook_url:
            raise ConfigError(f'{where}: [telegram] mode = "webhook" needs webhook_url')
