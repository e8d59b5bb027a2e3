"""Configuration: one TOML file plus secrets from the environment.

The core's sections are declared here; each platform plugin brings its own `[<name>]` section
(bot/platform.py), so this module knows no platform by name. Every key of every section is read
and checked here, through what its field declares (bot/settings.py): the one place a setting is
validated. Every key is documented in config.example.toml. Errors are ConfigError with one line
that names the key, never a traceback.
"""

from __future__ import annotations

import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bot import logsafe
from bot.mcp.settings import McpServer, McpSettingError, read_servers
from bot.platform import PlatformPlugin, PluginError, installed_plugins
from bot.settings import (
    HTTP,
    NON_EMPTY,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    KeySpec,
    Rule,
    Section,
    SettingError,
    key_spec,
    setting,
)
from memory.safefs import make_private_dir

DEFAULT_CONFIG = Path("config.toml")
# Beside the config file: the secrets as KEY=value lines (OPENAI_API_KEY=…, TELEGRAM_BOT_TOKEN=…),
# the same file compose (env_file) and systemd (EnvironmentFile) read; what `lightgrep init`
# writes. Its values count as the environment's, which wins over them.
SECRETS_FILE = "lightgrep.env"
ENV_PREFIX = "LIGHTGREP_"
APP_FOLDER = "lightgrep"


def data_home(env: Mapping[str, str] = os.environ) -> Path:
    """The user's data folder for LightGrep (XDG): $XDG_DATA_HOME/lightgrep, else
    ~/.local/share/lightgrep. Memory defaults to its workspaces/, so it does not depend on the
    folder a command happens to be run from; the terminal keeps its history and log here.
    A relative XDG_DATA_HOME is ignored, as the XDG spec says."""
    base = env.get("XDG_DATA_HOME", "")
    if not base or not Path(base).is_absolute():
        try:
            home = Path(env["HOME"]) if env.get("HOME") else Path.home()
        except RuntimeError:  # no HOME and no passwd entry (a bare container)
            raise ConfigError(
                "no home folder to keep memory in: set XDG_DATA_HOME, HOME or "
                "[memory] workspaces_dir"
            ) from None
        base = str(home / ".local" / "share")
    return Path(base) / APP_FOLDER


class ConfigError(Exception):
    """A configuration problem, worded for the person who wrote the file."""


@dataclass(repr=False)
class LLMConfig(Section):
    # None: the OpenAI API. Vendor variables fill a key only when the file leaves it unset (a key
    # meant for OpenAI must not silently replace the key a config file gives a local server).
    base_url: str | None = setting(None, url=HTTP, env="OPENAI_BASE_URL")
    api_key: str | None = setting(None, secret=True, env="OPENAI_API_KEY")
    model: str = setting("gpt-4o-mini", rule=NON_EMPTY)
    # Unset: automatic (bot/agent/sizing.py): the window the server tells, else a known one for
    # well-known hosted models, else 65,536; the answer an eighth of it, at most 2,048.
    context_window_tokens: int | None = setting(None, rule=POSITIVE_INT)
    max_output_tokens: int | None = setting(None, rule=POSITIVE_INT)
    # Tokens of the window kept free for estimate error; None: about 5 % of the window.
    context_margin_tokens: int | None = setting(None, rule=NON_NEGATIVE_INT)
    temperature: float = setting(0.7, rule=Rule("a number from 0 to 2", lambda v: 0 <= v <= 2))
    timeout_s: float = setting(60.0, rule=Rule("a positive number of seconds", lambda v: v > 0))
    max_retries: int = setting(2, rule=NON_NEGATIVE_INT)
    # Whether the model takes pictures (OpenAI-style image_url parts). Off: pictures are kept, the
    # model is told only that there was one, and the person is told it cannot see them.
    vision: bool = False
    # Pictures of the conversation sent along with each request, the newest first; older ones
    # reach the model as "[image: caption]".
    max_images_in_context: int = setting(4, rule=NON_NEGATIVE_INT)
    # …and their bytes together at most (a request carries each picture as base64 text).
    max_image_bytes_in_context: int = setting(20_000_000, rule=POSITIVE_INT)
    # What one picture counts for in the prompt-size estimate (providers count them differently).
    image_tokens: int = setting(765, rule=POSITIVE_INT)
    # With [[llm.fallback]] endpoints (bot/llm/chain.py): an endpoint failing this many calls in
    # a row is passed over for breaker_cooldown_s, then tried again with one call.
    breaker_failures: int = setting(3, rule=POSITIVE_INT)
    breaker_cooldown_s: float = setting(
        30.0, rule=Rule("a positive number of seconds", lambda v: v > 0)
    )


@dataclass(repr=False)
class MediaConfig(Section):
    """What the bot takes from a person besides text: pictures, files, audio (bytes each)."""

    max_image_bytes: int = setting(10_000_000, rule=POSITIVE_INT)
    max_images_per_message: int = setting(4, rule=POSITIVE_INT)
    max_text_file_bytes: int = setting(100_000, rule=POSITIVE_INT)
    max_pdf_bytes: int = setting(10_000_000, rule=POSITIVE_INT)
    # An export sent with /import (a ChatGPT or Claude zip, docs/import.md); larger: the CLI.
    max_import_bytes: int = setting(20_000_000, rule=POSITIVE_INT)
    # Reading one PDF (in a child process, bot/media/sandbox.py): at most this long, in this much
    # memory; and one person's PDFs at most this many seconds an hour.
    pdf_seconds: float = setting(15.0, rule=Rule("a positive number of seconds", lambda v: v > 0))
    pdf_memory_bytes: int = setting(400_000_000, rule=POSITIVE_INT)
    pdf_seconds_per_hour: float = setting(
        120.0, rule=Rule("a positive number of seconds", lambda v: v > 0)
    )


@dataclass(repr=False)
class TranscriptionConfig(Section):
    """Voice messages and audio, turned into text by an OpenAI-compatible
    /v1/audio/transcriptions endpoint (the [llm] endpoint and key unless set here)."""

    enabled: bool = False
    base_url: str | None = setting(None, url=HTTP)
    api_key: str | None = setting(None, secret=True)
    model: str = setting("whisper-1", rule=NON_EMPTY)
    max_seconds: int = setting(600, rule=POSITIVE_INT)
    max_bytes: int = setting(20_000_000, rule=POSITIVE_INT)
    timeout_s: float = setting(120.0, rule=Rule("a positive number of seconds", lambda v: v > 0))


def _mode(value: str) -> bool:
    return value in ("off", "auto", "always")


@dataclass(repr=False)
class VoiceConfig(Section):
    """Answers also spoken, through an OpenAI-compatible /v1/audio/speech endpoint (the [llm]
    endpoint and key unless set here), as OGG/Opus: what Telegram plays as a voice message."""

    enabled: bool = False
    base_url: str | None = setting(None, url=HTTP)
    api_key: str | None = setting(None, secret=True)
    model: str = setting("gpt-4o-mini-tts", rule=NON_EMPTY)
    voice: str = setting("alloy", rule=NON_EMPTY)
    # For whoever chose nothing with /voice: "auto" answers a voice message with a voice too.
    mode: str = setting("auto", rule=Rule('"off", "auto" or "always"', _mode))
    # Characters read aloud at most per answer (OpenAI takes 4,096); the rest stays text.
    max_chars: int = setting(1500, rule=Rule("an integer from 1 to 4096", lambda v: 0 < v <= 4096))
    # Characters a person may have read aloud per UTC day (admins: no limit); 0: no limit.
    chars_per_day: int = setting(20_000, rule=NON_NEGATIVE_INT)
    timeout_s: float = setting(30.0, rule=Rule("a positive number of seconds", lambda v: v > 0))


@dataclass(repr=False)
class SearchConfig(Section):
    """/recall and search_history also ranked by meaning, through an OpenAI-compatible
    /v1/embeddings endpoint (the [llm] endpoint and key unless set here; docs/recall.md)."""

    embeddings: bool = False
    base_url: str | None = setting(None, url=HTTP)
    api_key: str | None = setting(None, secret=True)
    model: str = setting("text-embedding-3-small", rule=NON_EMPTY)  # entries' passages
    query_model: str | None = setting(None, rule=NON_EMPTY)  # questions; unset: `model`
    batch_size: int = setting(32, rule=POSITIVE_INT)
    # A question's embedding: past it, keywords alone (and the endpoint left alone a minute).
    timeout_s: float = setting(2.0, rule=Rule("a positive number of seconds", lambda v: v > 0))


@dataclass(repr=False)
class MemoryConfig(Section):
    # Left unset, load_config puts it in the user's data folder: data_home() / "workspaces".
    workspaces_dir: Path = Path("workspaces")
    keep_memory_versions: int = setting(10, rule=NON_NEGATIVE_INT)
    # MEMORY.md's size budget in tokens; 0: a tenth of the context window, at most 1,500.
    max_memory_tokens: int = setting(0, rule=NON_NEGATIVE_INT)
    # Sessions (with their users' workspaces) kept loaded; the least recently used idle ones
    # beyond it are dropped from RAM and read again from disk when their user comes back.
    max_loaded_sessions: int = setting(1000, rule=POSITIVE_INT)


def _trigger(value: str) -> bool:
    return value in ("mention", "always", "keyword")


def _is_zone(name: str) -> bool:
    from bot.reminders.zones import is_zone  # (zoneinfo: only when the key is checked)

    return is_zone(name)


@dataclass(repr=False)
class AgentConfig(Section):
    max_tool_iterations: int = setting(8, rule=POSITIVE_INT)
    bot_name: str = setting("LightGrep", rule=NON_EMPTY)
    # In a group chat the answer is public: by default the model gets neither MEMORY.md nor the
    # history search there. A person may choose otherwise for themselves (/privacy).
    memory_in_groups: bool = False
    # Show the answer while the model writes it (Telegram drafts or edits, Discord edits, the
    # terminal as it comes); false: the whole answer at once, when it is done.
    stream: bool = True
    # Instructions of the operator for every chat, after the bot's own rules (a chat's /persona
    # follows them). They cannot switch off the privacy of groups or the tools' confinement.
    system_prompt: str = ""
    # When the bot speaks in a group chat that has not chosen (/group trigger): "mention" (an
    # @mention, a reply to the bot, a command), "always" (every message), "keyword" (a message
    # holding one of group_keywords, or a mention).
    group_trigger: str = setting("mention", rule=Rule("mention, always or keyword", _trigger))
    group_keywords: list[str] = setting(default_factory=list)
    # What a reply carries of the message it replies to, at most (characters).
    reply_context_chars: int = setting(1500, rule=POSITIVE_INT)
    # The time zone of reminders for people who have not chosen theirs with /timezone.
    default_timezone: str = setting(
        "UTC", rule=Rule("an IANA time zone name, e.g. Europe/Lisbon", _is_zone)
    )


@dataclass(repr=False)
class ToolsConfig(Section):
    """Which tools the model may call (bot/tools/). A tool switched off is not offered, not
    named in the system prompt and not counted in its fixed part; the commands stay (/remind,
    /recall, /memory)."""

    edit_memory: bool = True
    search_history: bool = True
    remind: bool = True
    # The tools that reach the web ([web] sets them up): off, as what they send leaves the
    # machine; and offered in group chats only when web_in_groups says so.
    web_search: bool = False
    read_page: bool = False
    web_in_groups: bool = False
    # The tools of MCP servers ([[mcp.servers]], docs/mcp.md) offered in group chats too.
    mcp_in_groups: bool = False


def _search_backend(value: str) -> bool:
    return value in ("searxng", "brave", "ddgs")


def _networks(value: list[str]) -> bool:
    import ipaddress

    try:
        for net in value:
            ipaddress.ip_network(net.strip(), strict=False)
    except ValueError:
        return False
    return True


SECONDS = Rule("a positive number of seconds", lambda v: v > 0)
NON_NEGATIVE = Rule("a number of 0 or more", lambda v: v >= 0)


@dataclass(repr=False)
class WebConfig(Section):
    """What web_search and read_page use (docs/web.md): the search backend, and the bounds of
    a page read. The host's own network is never fetched, but what these lists allow."""

    search: str = setting("searxng", rule=Rule("searxng, brave or ddgs", _search_backend))
    searxng_url: str | None = setting(None, url=HTTP)
    brave_api_key: str | None = setting(None, secret=True, env="BRAVE_API_KEY")
    brave_url: str = setting("https://api.search.brave.com/res/v1/web/search", url=HTTP)
    max_results: int = setting(5, rule=Rule("an integer from 1 to 20", lambda v: 0 < v <= 20))
    timeout_s: float = setting(15.0, rule=SECONDS)
    max_page_bytes: int = setting(2_000_000, rule=POSITIVE_INT)
    max_redirects: int = setting(5, rule=NON_NEGATIVE_INT)
    max_page_chars: int = setting(12_000, rule=POSITIVE_INT)
    allow_hosts: list[str] = setting(default_factory=list)
    allow_networks: list[str] = setting(
        default_factory=list, rule=Rule("a list of networks like 10.0.0.0/8", _networks)
    )


@dataclass(repr=False)
class LimitsConfig(Section):
    """What one person may cost a public bot (0: no limit). Off by default, but for the heavy
    commands (/export, /forget, /wipe, /memory history and undo: files read, rewritten or
    zipped whole), which have a small budget of their own."""

    messages_per_minute: int = setting(0, rule=NON_NEGATIVE_INT)
    heavy_commands_per_hour: int = setting(10, rule=NON_NEGATIVE_INT)
    tokens_per_day: int = setting(0, rule=NON_NEGATIVE_INT)
    global_tokens_per_day: int = setting(0, rule=NON_NEGATIVE_INT)
    # User keys ("telegram-42", "discord-8123", "cli-alice"): one key names one person on one
    # platform, where a bare id could name someone else on another platform.
    admins: list[str] = setting(default_factory=list)
    # Reminders one person may have waiting (0: no limit), and the shortest repeat allowed.
    reminders_per_person: int = setting(100, rule=NON_NEGATIVE_INT)
    # Reminders waiting in one group, whoever set them (0: no limit): each is posted there.
    reminders_per_group: int = setting(50, rule=NON_NEGATIVE_INT)
    reminder_min_repeat_s: int = setting(3600, rule=POSITIVE_INT)
    # /remind and /reminders one person may give in any 60 seconds (0: no limit): each writes
    # their reminders file, so a flood of them has a budget of its own, on by default.
    reminder_commands_per_minute: int = setting(20, rule=NON_NEGATIVE_INT)
    # Calls of the tools that reach outside the bot (web_search, read_page) one person's turns
    # may make in any hour (0: no limit); their tokens count towards tokens_per_day as any.
    outside_calls_per_hour: int = setting(60, rule=NON_NEGATIVE_INT)
    # What one person's calls, and everyone's, may cost per UTC day and month at [prices]
    # (0: no limit); a cap needs [llm] model priced.
    cost_per_day: float = setting(0.0, rule=NON_NEGATIVE)
    cost_per_month: float = setting(0.0, rule=NON_NEGATIVE)
    global_cost_per_day: float = setting(0.0, rule=NON_NEGATIVE)
    global_cost_per_month: float = setting(0.0, rule=NON_NEGATIVE)

    def cost_caps(self) -> dict[str, float]:
        """The cost caps that are set, by key."""
        caps = {
            "cost_per_day": self.cost_per_day,
            "cost_per_month": self.cost_per_month,
            "global_cost_per_day": self.global_cost_per_day,
            "global_cost_per_month": self.global_cost_per_month,
        }
        return {key: cap for key, cap in caps.items() if cap}


@dataclass(frozen=True)
class Price:
    """What a model's tokens cost, per million, in the currency the operator reads prices in.
    `cached_input`: prompt tokens the server read from its cache; None: as `input`."""

    input: float
    output: float
    cached_input: float | None = None


PRICE_KEYS = ("input", "output", "cached_input")


@dataclass(frozen=True, repr=False)
class Endpoint:
    """One more OpenAI-compatible endpoint of a chain: a `[[llm.fallback]]` (tried in order when
    the ones before it fail) or a `[[consolidation.endpoints]]`. Its key is read from the
    environment variable `api_key_env` names, never written in the file; its price is the
    [prices] entry of its model."""

    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None  # read from api_key_env
    context_window_tokens: int | None = None  # None: as large as the prompt [llm] is sized for
    max_output_tokens: int | None = None
    vision: bool = False
    timeout_s: float = 60.0
    max_retries: int = 2

    def __repr__(self) -> str:
        return f"Endpoint(model={self.model!r}, base_url={self.base_url!r})"


# An endpoint's keys: (kind, what a valid value is, the check).
ENDPOINT_KEYS: dict[str, tuple[type, str, typing.Callable[[Any], bool]]] = {
    "model": (str, "a non-empty string", lambda v: bool(v.strip())),
    "base_url": (str, "a URL starting with http:// or https://", lambda v: _is_http(v)),
    "api_key_env": (
        str,
        "an environment variable's name",
        lambda v: re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) is not None,
    ),
    "context_window_tokens": (int, "a positive integer", lambda v: v > 0),
    "max_output_tokens": (int, "a positive integer", lambda v: v > 0),
    "vision": (bool, "true or false", lambda v: True),
    "timeout_s": (float, "a positive number of seconds", lambda v: v > 0),
    "max_retries": (int, "an integer of 0 or more", lambda v: v >= 0),
}


def _is_http(value: str) -> bool:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return False
    return parts.scheme in HTTP and bool(parts.hostname)


def parse_endpoints(where: str, items: Any, env: Mapping[str, str]) -> list[Endpoint]:
    """`[[…]]` tables of endpoints, checked key by key (errors name the table, its number and
    the key); each key read from the variable its api_key_env names."""
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ConfigError(f"{where} must be tables: [[{where.strip('[]')}]] with model = …")
    endpoints = []
    for number, item in enumerate(items, 1):
        here = f"{where} #{number}"
        for key, value in item.items():
            if key not in ENDPOINT_KEYS:
                hint = _suggest(key, ENDPOINT_KEYS, repr)
                raise ConfigError(f"{here}: unknown key {key!r}{hint}")
            kind, text, check = ENDPOINT_KEYS[key]
            fits = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                fits, value = True, float(value)
            if not fits or not check(value):
                raise ConfigError(f"{here} {key} must be {text}, got {value!r}")
            item = {**item, key: value}
        if "model" not in item:
            raise ConfigError(f"{here} has no model")
        name = item.get("api_key_env")
        key_value = env.get(name, "").strip() or None if name else None
        if name and key_value is None:
            raise ConfigError(f"{here} api_key_env: the environment has no {name}")
        endpoints.append(Endpoint(**item, api_key=key_value))
    return endpoints


def is_host_port(value: str) -> bool:
    """ "host:port" (an IPv6 host in brackets), port 1-65535."""
    host, _, port = value.rpartition(":")
    return bool(host.strip("[]")) and port.isdigit() and 0 < int(port) < 65536


@dataclass(repr=False)
class MetricsConfig(Section):
    # Where /metrics (Prometheus) and /healthz listen, e.g. "127.0.0.1:9464"; unset: off.
    listen: str | None = setting(None, rule=Rule('host:port, e.g. "127.0.0.1:9464"', is_host_port))


NATS_SCHEMES = ("nats", "tls", "ws", "wss")


def _nats_urls(urls: list[str]) -> bool:
    """Several URLs (the servers of one NATS cluster), each with a host and no credentials:
    a password in a URL would be logged with the URL, so credentials have their own keys."""
    try:
        parts = [urlsplit(url) for url in urls]
        for part in parts:
            part.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return False
    return bool(parts) and all(
        p.scheme in NATS_SCHEMES and p.hostname and p.username is None for p in parts
    )


@dataclass(repr=False)
class ClusterConfig(Section):
    """`lightgrep ingress` and `lightgrep worker` (bot/cluster/); `lightgrep run` ignores it."""

    nats_url: list[str] = setting(
        default_factory=lambda: ["nats://127.0.0.1:4222"],
        rule=Rule(
            "a list of nats:// (or tls://, ws://, wss://) URLs without credentials in them "
            "(use token or creds_file)",
            _nats_urls,
        ),
        env="NATS_URL",
    )
    # Fixed for the life of a cluster: a user's partition is a hash of their key modulo this.
    partitions: int = setting(16, rule=Rule("an integer from 1 to 1024", lambda v: 0 < v <= 1024))
    subject_prefix: str = setting(
        "lightgrep",
        rule=Rule(
            "letters, digits, '-' or '_' (one NATS subject token)",
            lambda v: bool(re.fullmatch(r"[A-Za-z0-9_-]+", v)),
        ),
    )
    # Without credentials (and a signing key), and with a NATS that lets anyone in, ingresses
    # and workers refuse to start unless this says nothing but the cluster can reach NATS.
    private_network: bool = False
    # The key every ingress and worker signs and checks each message with (bot/cluster/signing.py),
    # or a list of keys while one replaces another: the first signs, every one is accepted.
    signing_key: list[str] = setting(
        default_factory=list,
        secret=True,
        single=True,
        rule=Rule(
            "at least 32 characters (e.g. the output of `openssl rand -hex 32`), or a list of "
            "such keys",
            lambda v: all(len(k) >= 32 for k in v),
        ),
    )
    # A signed message is refused when NATS stored it more than this long after it was signed
    # (a replay), or this long before (a clock that is off); seen ids are kept twice this long.
    max_message_age_s: float = setting(60.0, rule=Rule("at least 1 second", lambda v: v >= 1))
    # One way to authenticate (bot/cluster/connection.py says which NATS refused): a token, a
    # user and password, an nkey seed file, or a .creds file (a user JWT and its seed).
    token: str | None = setting(None, secret=True, env="NATS_TOKEN")
    user: str | None = setting(None, env="NATS_USER")
    password: str | None = setting(None, secret=True, env="NATS_PASSWORD")
    creds_file: Path | None = setting(None, env="NATS_CREDS")  # a user JWT + nkey seed file
    nkey_seed_file: Path | None = setting(None, env="NATS_NKEY_SEED")
    replicas: int = setting(1, rule=Rule("an integer from 1 to 5", lambda v: 0 < v <= 5))
    ack_wait_s: float = setting(30.0, rule=Rule("a positive number of seconds", lambda v: v > 0))
    lease_ttl_s: float = setting(15.0, rule=Rule("at least 1 second", lambda v: v >= 1))
    # A message or answer JetStream delivered this many times and still not done with is
    # dropped, logged and counted (a message that cannot be handled must not come back forever).
    max_deliveries: int = setting(20, rule=POSITIVE_INT)


CORE_SECTIONS: dict[str, type[Section]] = {
    "llm": LLMConfig,
    "memory": MemoryConfig,
    "agent": AgentConfig,
    "tools": ToolsConfig,
    "web": WebConfig,
    "limits": LimitsConfig,
    "metrics": MetricsConfig,
    "media": MediaConfig,
    "transcription": TranscriptionConfig,
    "voice": VoiceConfig,
    "search": SearchConfig,
    "cluster": ClusterConfig,
}


@dataclass(repr=False)
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    web: WebConfig = field(default_factory=WebConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    media: MediaConfig = field(default_factory=MediaConfig)
    transcription: TranscriptionConfig = field(default_factory=TranscriptionConfig)
    voice: VoiceConfig = field(default_factory=VoiceConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    # The `[<name>]` section of each platform plugin, by name (load_config fills in every
    # installed one); an adapter reads its own as config.platforms[name].
    platforms: dict[str, Any] = field(default_factory=dict)
    # [prices]: a model's name (as [llm] model names it) → what its tokens cost.
    prices: dict[str, Price] = field(default_factory=dict)
    # [[llm.fallback]]: the endpoints tried in order after [llm]'s (bot/llm/chain.py).
    fallbacks: list[Endpoint] = field(default_factory=list)
    # [[consolidation.endpoints]]: the chain consolidation asks; empty: the chat's.
    consolidation: list[Endpoint] = field(default_factory=list)
    # [[mcp.servers]]: the MCP servers whose allowed tools the model may call (bot/mcp/).
    mcp: tuple[McpServer, ...] = ()
    source: Path | None = None  # the file it was loaded from; None: defaults + environment

    def sections(self) -> dict[str, Section]:
        core = {"llm": self.llm, "memory": self.memory, "agent": self.agent, "tools": self.tools}
        extra = {"web": self.web, "limits": self.limits, "metrics": self.metrics}
        more = {"media": self.media, "transcription": self.transcription, "voice": self.voice}
        last = {"search": self.search, "cluster": self.cluster}
        return {**core, **extra, **more, **last, **self.platforms}

    def redacted(self) -> dict[str, dict[str, Any]]:
        """Every setting by section, secrets replaced by '***' (or None when unset): safe to log."""
        return {name: section.redacted() for name, section in self.sections().items()}

    def secrets(self) -> list[str]:
        """Every secret value set in any section (API key, plugins' tokens), for the redactor."""
        sections = [value for section in self.sections().values() for value in section.secrets()]
        keys = [e.api_key for e in (*self.fallbacks, *self.consolidation) if e.api_key]
        return sections + keys + [value for server in self.mcp for value in server.secrets()]

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={section!r}" for name, section in self.sections().items())
        return f"Config({shown}, source={self.source!r})"

    def enabled_platforms(self) -> list[str]:
        """Names of the chat platforms switched on, in the order their plugins are registered."""
        return [name for name, section in self.platforms.items() if section.enabled]


PRICES = "prices"  # [prices]: keyed by model name, so not a Section (Loader._prices reads it)
FALLBACK = "fallback"  # [[llm.fallback]]: tables in [llm], read by parse_endpoints
CONSOLIDATION = "consolidation"  # [[consolidation.endpoints]], read by parse_endpoints
MCP = "mcp"  # [[mcp.servers]]: a list of tables (bot/mcp/settings.py reads it)


def section_types(plugins: Mapping[str, PlatformPlugin] | None = None) -> dict[str, type[Section]]:
    """Every section a config file may have: the core's, then each installed plugin's."""
    if plugins is None:
        plugins = _plugins()
    own = {name: p.settings for name, p in plugins.items() if p.settings is not None}
    return {**CORE_SECTIONS, **own}


def _plugins() -> dict[str, PlatformPlugin]:
    try:
        plugins = installed_plugins()
    except PluginError as exc:
        raise ConfigError(str(exc)) from None
    for name in plugins:
        if name in CORE_SECTIONS:
            raise ConfigError(f"platform plugin {name!r} takes the name of the [{name}] section")
    return plugins


_KIND_WORDS = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    Path: "a path (a string)",
    list: "a list of strings",
}


def load_config(
    path: Path | None = None, env: Mapping[str, str] = os.environ, *, writer: bool = True
) -> Config:
    """The configuration from `path` (default ./config.toml if present) and the environment.

    Precedence: LIGHTGREP_<SECTION>_<KEY> variables, then the file, then vendor variables
    (OPENAI_API_KEY, and those the plugins declare for their secrets), then the defaults. The
    variables come from the environment, else from lightgrep.env beside the file (SECRETS_FILE).
    Raises ConfigError (one line). Every secret it holds is masked in logs from now on.
    writer=False (a command that only reads, maybe beside a live bot): the workspaces folder is
    resolved but neither created nor written to, so it may be read-only.
    """
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    if path is not None:
        env = {**read_secrets_file(Path(path).expanduser().parent / SECRETS_FILE), **env}
    loader = _Loader(path, _plugins())
    if path is not None:
        loader.apply_file(_read_toml(path))
    loader.apply_env(env)
    loader.read_endpoints(env)
    loader.resolve_mcp(env)
    loader.resolve_workspaces(env, check_writable=writer)
    loader.validate()
    logsafe.hide(*loader.config.secrets())
    return loader.config


def read_secrets_file(path: Path) -> dict[str, str]:
    """The KEY=value lines of a secrets file (# comments and blank lines skipped, quotes around
    a value taken off); {} when there is none. A file others may read is used, with a warning
    (its own group may: a service's, below); one others may change is refused (_owned_by_us)."""
    try:
        with open(path, "rb") as file:
            mode = _owned_by_us(path, file.fileno(), "secrets file")
            group = os.fstat(file.fileno()).st_gid
            text = file.read().decode("utf-8")
    except FileNotFoundError:
        return {}
    except PermissionError:
        raise ConfigError(_not_readable(path, "secrets file")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the secrets file: {exc}") from None
    # Readable by others: everyone, or a group other than the bot's own. A root-owned 640 file
    # of the service's group (docs/running.md's systemd recipe: systemd reads it as root, the
    # bot as its group) is the bot's own.
    if mode & 0o007 or (mode & 0o070 and group != os.getegid()):
        import logging  # (only for this warning)

        logging.getLogger(__name__).warning("%s can be read by others: chmod 600 %s", path, path)
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.removeprefix("export ").partition("=")
        key, value = key.strip(), value.strip()
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"{path}, line {number}: not a KEY=value line")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        found[key] = value
    return found


def _owned_by_us(path: Path, fd: int, what: str) -> int:
    """The mode of the open file `fd`, refused (ConfigError, one line) when someone other than
    the person running the bot could change it: a group- or world-writable file, or one owned
    by another user than them or root. The rule ssh keeps for its own files, and for the same
    reason: one line such as LIGHTGREP_TELEGRAM_ALLOW_FROM=* opens the bot to everyone. A file
    on a read-only mount (a container's `config.toml:ro`) may keep the host's owner: no one
    here can change it, and the host's user ids mean nothing here."""
    info = os.fstat(fd)
    if info.st_mode & 0o022:
        raise ConfigError(
            f"{path}: others can change this {what} (mode {info.st_mode & 0o777:o}), so it is "
            f"not used: chmod go-w {path}"
        )
    me = os.geteuid()
    if info.st_uid not in (0, me) and not os.fstatvfs(fd).f_flag & os.ST_RDONLY:
        raise ConfigError(
            f"{path}: this {what} belongs to user id {info.st_uid}, not to you ({me}) or root, "
            f"so it is not used: chown {me} {path}"
        )
    return info.st_mode


def _not_readable(path: Path, what: str) -> str:
    """The one line for a file this user may not read, with the fix: the usual case is the
    container's own user (uid 10001) and a file of mode 600 from the host. The fix passes
    _owned_by_us too: on a read-only mount (the container's `:ro`) a config readable by all
    will do; elsewhere the file must be this user's (or root's, as the systemd recipe has it)."""
    me = os.geteuid()
    try:
        info = os.stat(path)
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return (
            f"{path}: user id {me} cannot reach this {what}: a folder above it is closed to "
            f"that user (let it through with chmod o+x, or run as the folder's owner)"
        )
    fix = f"chown {me} {path}"
    if what == "secrets file":
        fix += " (and keep it chmod 600)"
    elif read_only:
        fix = f"chmod 644 {path}, or {fix} (where it is mounted from)"
    return (
        f"{path}: this {what} is not readable by this user (user id {me}; the file is user id "
        f"{info.st_uid}'s, mode {info.st_mode & 0o777:o}): {fix}"
    )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(Path(path).expanduser(), "rb") as file:
            _owned_by_us(path, file.fileno(), "config file")
            data = file.read()
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such config file (copy config.example.toml to start)"
        ) from None
    except PermissionError:
        raise ConfigError(_not_readable(path, "config file")) from None
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
    import difflib  # only for a mistake: not on every start-up

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {show(close[0])}?)" if close else ""


class _Loader:
    """Builds one Config, remembering where each value came from so errors can say so."""

    def __init__(self, path: Path | None, plugins: dict[str, PlatformPlugin]) -> None:
        self.path = path
        self.plugins = plugins
        self.types = section_types(plugins)
        platforms = {name: cls() for name, cls in self.types.items() if name not in CORE_SECTIONS}
        self.config = Config(source=path, platforms=platforms)
        self.sections = self.config.sections()
        self.label = str(path) if path is not None else "configuration"
        self.kinds = {name: self._kinds_of(name, cls) for name, cls in self.types.items()}
        # (section, key) → where its value came from, for error messages.
        self.origin: dict[tuple[str, str], str] = {}
        self.endpoint_tables: dict[str, Any] = {}  # [[llm.fallback]], [[consolidation.…]]
        self.mcp_table: Any = None  # [mcp] as written; read with the environment (resolve_mcp)

    def _kinds_of(self, name: str, cls: type) -> dict[str, tuple[Any, bool]]:
        kinds = _field_kinds(cls)
        for key, (kind, _) in kinds.items():
            if kind not in _KIND_WORDS:
                raise ConfigError(
                    f"platform plugin {name!r}: [{name}] {key} has a type the config file cannot "
                    f"hold ({kind!r})"
                )
        return kinds

    def spec(self, section: str, key: str) -> KeySpec:
        return self.specs(section)[key]

    def specs(self, section: str) -> dict[str, KeySpec]:
        return {f.name: key_spec(f) for f in fields(self.types[section])}

    def where(self, section: str, key: str) -> str:
        return self.origin.get((section, key), self.label)

    def fail(self, section: str, key: str, problem: str) -> typing.NoReturn:
        raise ConfigError(f"{self.where(section, key)}: [{section}] {key} {problem}")

    def describe(self, section: str, key: str, kind: Any) -> str:
        spec = self.spec(section, key)
        if spec.rule:
            return spec.rule.text
        if spec.url:
            return "a URL"
        return _KIND_WORDS[kind]

    def apply_file(self, raw: dict[str, Any]) -> None:
        for name, table in raw.items():
            if name == PRICES:
                self.config.prices = self._prices(table)
                continue
            if name == CONSOLIDATION:
                unknown = (
                    [key for key in table if key != "endpoints"] if isinstance(table, dict) else []
                )
                if not isinstance(table, dict) or unknown:
                    raise ConfigError(
                        f"{self.label}: [consolidation] holds only [[consolidation.endpoints]]"
                    )
                self.endpoint_tables["[consolidation.endpoints]"] = table.get("endpoints", [])
                continue
            if name == "llm" and isinstance(table, dict) and FALLBACK in table:
                self.endpoint_tables["[llm.fallback]"] = table[FALLBACK]
                table = {key: value for key, value in table.items() if key != FALLBACK}
            if name == MCP:
                self.mcp_table = table
                continue
            if name not in self.types:
                if isinstance(table, dict):
                    hint = _suggest(name, [*self.types, PRICES, MCP], "[{}]".format)
                    raise ConfigError(f"{self.label}: unknown section [{name}]{hint}")
                raise ConfigError(
                    f"{self.label}: unknown key {name!r} outside any section "
                    f"(settings belong under a section such as [llm])"
                )
            if not isinstance(table, dict):
                raise ConfigError(
                    f"{self.label}: [{name}] must be a section (a table), got {table!r}"
                )
            kinds = self.kinds[name]
            for key, value in table.items():
                if key not in kinds:
                    raise ConfigError(
                        f"{self.label}: [{name}] unknown key {key!r}{_suggest(key, kinds, repr)}"
                    )
                self.origin[(name, key)] = self.label
                self._set(name, key, self._from_toml(name, key, value, *kinds[key]))

    def read_endpoints(self, env: Mapping[str, str]) -> None:
        """The chains' other endpoints, their keys from `env`."""
        for where, items in self.endpoint_tables.items():
            found = parse_endpoints(f"{self.label}: {where}", items, env)
            if where.startswith("[llm"):
                self.config.fallbacks = found
            else:
                self.config.consolidation = found

    def _prices(self, table: Any) -> dict[str, Price]:
        """[prices]: a table per model, `"gpt-4o-mini" = { input = 0.15, output = 0.6 }` or
        `[prices."gpt-4o-mini"]`; numbers of 0 or more, input and output required."""
        where = f"{self.label}: [prices]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a section (a table), got {table!r}")
        prices = {}
        for model, price in table.items():
            if not isinstance(price, dict):
                raise ConfigError(
                    f"{where} {model!r} must be a table such as {{ input = 0.15, output = 0.6 }} "
                    f"(per million tokens), got {price!r}"
                )
            for key, value in price.items():
                if key not in PRICE_KEYS:
                    raise ConfigError(
                        f"{where} {model!r}: unknown key {key!r}{_suggest(key, PRICE_KEYS, repr)}"
                    )
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise ConfigError(
                        f"{where} {model!r} {key} must be a number of 0 or more (per million "
                        f"tokens), got {value!r}"
                    )
            missing = [key for key in ("input", "output") if key not in price]
            if missing:
                raise ConfigError(f"{where} {model!r} has no {' and no '.join(missing)} price")
            cached = price.get("cached_input")
            prices[model] = Price(
                float(price["input"]),
                float(price["output"]),
                None if cached is None else float(cached),
            )
        return prices

    def _set(self, section: str, key: str, value: Any) -> None:
        if isinstance(value, str) and self.spec(section, key).secret:
            value = value.strip() or None  # a pasted token often ends in a newline
        elif isinstance(value, list) and self.spec(section, key).secret:
            value = [v.strip() for v in value if v.strip()]
        setattr(self.sections[section], key, value)

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
            if isinstance(value, str) and self.spec(section, key).single:
                value = [value]
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
            words = {
                "true": True,
                "1": True,
                "yes": True,
                "on": True,
                "false": False,
                "0": False,
                "no": False,
                "off": False,
            }
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
        for section in self.types:
            for key, spec in self.specs(section).items():
                text = env.get(spec.env, "").strip() if spec.env else ""
                if text and (section, key) not in self.origin:
                    self.origin[(section, key)] = f"environment {spec.env}"
                    kind = self.kinds[section][key]
                    self._set(section, key, self._from_env(section, key, text, *kind))

    def _apply_prefixed(self, name: str, text: str) -> None:
        rest = name[len(ENV_PREFIX) :].lower()
        # The longest section name that fits, so a plugin may have "_" in its name.
        fits = [s for s in self.types if rest.startswith(f"{s}_")]
        if not fits:
            section, _, key = rest.partition("_")
            hint = _suggest(section, self.types, lambda s: f"{ENV_PREFIX}{s}_{key}".upper())
            if hint and key:  # looks like a misspelt section; anything else is not ours
                raise ConfigError(f"environment {name}: unknown section [{section}]{hint}")
            return
        section = max(fits, key=len)
        key = rest[len(section) + 1 :]
        kinds = self.kinds[section]
        if key not in kinds:
            hint = _suggest(key, kinds, lambda k: f"{ENV_PREFIX}{section}_{k}".upper())
            raise ConfigError(f"environment {name}: [{section}] has no key {key!r}{hint}")
        self.origin[(section, key)] = f"environment {name}"
        self._set(section, key, self._from_env(section, key, text, *kinds[key]))

    def resolve_mcp(self, env: Mapping[str, str]) -> None:
        """[[mcp.servers]], their env and headers read from the environment (secrets)."""
        if self.mcp_table is None:
            return
        try:
            self.config.mcp = read_servers(self.mcp_table, env)
        except McpSettingError as exc:
            raise ConfigError(f"{self.label}: {exc}") from None

    def resolve_workspaces(self, env: Mapping[str, str], check_writable: bool = True) -> None:
        """Absolute, ~ expanded, relative to the config file's folder; unset: the data folder's
        workspaces/ (see data_home). Created and writable when `check_writable`."""
        memory = self.config.memory
        if ("memory", "workspaces_dir") not in self.origin:
            memory.workspaces_dir = data_home(env) / "workspaces"
        path = Path(memory.workspaces_dir).expanduser()
        from_file = self.where("memory", "workspaces_dir") == self.label
        if not path.is_absolute():
            if from_file and self.path is not None:
                base = Path(self.path).expanduser().absolute().parent
            else:
                base = Path.cwd()
            path = base / path
        memory.workspaces_dir = path
        if not check_writable:
            return
        import tempfile  # (not for the commands that only read)

        try:
            make_private_dir(path)  # private at every level, whatever the umask
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as exc:
            self.fail(
                "memory",
                "workspaces_dir",
                f"is an unreachable path: {path} ({exc.strerror or type(exc).__name__})",
            )

    def validate(self) -> None:
        for name, section in self.sections.items():
            for key, spec in self.specs(name).items():
                value = getattr(section, key)
                if value is None:
                    continue
                if spec.rule and not spec.rule.check(value):
                    self.fail(name, key, f"must be {spec.rule.text}, got {value!r}")
                if spec.url:
                    self._check_url(name, key, value, spec.url)
        for name in self.config.enabled_platforms():
            self._check_platform(name)
        self._check_caps()

    def _check_caps(self) -> None:
        """A cost cap counts at [prices]: without a price for the bot's model it would hold
        nothing, so it is refused rather than silently never reached."""
        model = self.config.llm.model
        for key in self.config.limits.cost_caps():
            if model not in self.config.prices:
                self.fail(
                    "limits",
                    key,
                    f"needs a price for [llm] model {model!r}: add "
                    f'[prices] "{model}" = {{ input = …, output = … }} (per million tokens)',
                )

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
        """What an enabled platform needs: its required keys, then its plugin's own check."""
        section = self.sections[name]
        where = self.where(name, "enabled")
        for key, spec in self.specs(name).items():
            if spec.required and _blank(getattr(section, key)):
                missing = _missing(name, key, spec, listed=self.kinds[name][key][0] is list)
                raise ConfigError(f"{where}: [{name}] is enabled but {missing}")
        check = self.plugins[name].check
        if check is None:
            return
        try:
            check(section)
        except SettingError as exc:
            raise ConfigError(f"{self.where(name, exc.key)}: [{name}] {exc.problem}") from None


def _blank(value: Any) -> bool:
    if isinstance(value, list):
        return not [entry for entry in value if str(entry).strip()]
    return value is None or (isinstance(value, str) and not value.strip())


def _missing(section: str, key: str, spec: KeySpec, *, listed: bool) -> str:
    """How a required key is missing and how to set it: "token is missing: set token …"."""
    hint = spec.hint
    if listed:
        return f"{key} is empty" + (f", {hint}" if hint else "")
    how = f"set {key} under [{section}]"
    if spec.env:
        how += f" or the {spec.env} environment variable"
    return f"{key} is missing: {how}" + (f" ({hint})" if hint else "")
