"""Configuration: one TOML file plus secrets from the environment (DESIGN.md §8).

Every key is documented in config.example.toml. Errors are ConfigError with one line that names
the key, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(Exception):
    """A configuration problem, worded for the person who wrote the file."""


@dataclass
class LLMConfig:
    base_url: str | None = None  # None: the OpenAI API
    api_key: str | None = None
    model: str = "gpt-4o-mini"
    context_window_tokens: int = 65536
    max_output_tokens: int = 2048
    temperature: float = 0.7
    timeout_s: float = 60.0
    max_retries: int = 2


@dataclass
class MemoryConfig:
    workspaces_dir: Path = Path("workspaces")
    keep_memory_versions: int = 10


@dataclass
class AgentConfig:
    max_tool_iterations: int = 8
    bot_name: str = "LightGrep"


@dataclass
class TelegramConfig:
    enabled: bool = False
    token: str | None = None
    allow_from: list[str] = field(default_factory=list)  # ids or usernames; "*" for everyone
    api_base: str | None = None  # self-hosted Bot API server, e.g. "http://127.0.0.1:8081"
    mode: str = "polling"  # "polling" or "webhook"
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = 8443
    poll_timeout_s: int = 30


@dataclass
class DiscordConfig:
    enabled: bool = False
    token: str | None = None
    allow_from: list[str] = field(default_factory=list)  # user ids; "*" for everyone
    api_base: str | None = None  # REST proxy, e.g. "http://127.0.0.1:9000/api/v10"
    gateway_url: str | None = None  # gateway proxy, e.g. "ws://127.0.0.1:9000/"
    message_content_intent: bool = False  # privileged; DMs and mentions work without it
    sync_guild_id: int | None = None  # sync slash commands to one guild only (fast iteration)


@dataclass
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    telegram: TelegramConfig = field(default_factory=TelegramConfig)
    discord: DiscordConfig = field(default_factory=DiscordConfig)
