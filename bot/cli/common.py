"""What the `lightgrep` subcommands share: exit codes, the error a person can fix, loading the
configuration, finding a workspace, the folder lock, and sizing the context window (the core
is built in bot/cli/core.py)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bot.config import Config, load_config
from bot.platform import AdapterFactory, PlatformStartError, PluginError, load_platform
from memory.folder_lock import FolderLock, FolderLockError

if TYPE_CHECKING:
    from bot.agent.sizing import Sizing

log = logging.getLogger("lightgrep")


EXIT_FAILURE = 1


EXIT_USAGE = 2


EXIT_INTERRUPTED = 130


EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE, what a shell reports for a tool its reader left


class UserError(Exception):
    """Something the person running the command can fix; printed as one line."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


def load(path: Path | None, *, writer: bool = True) -> Config:
    """writer=False for the commands that only read: they may run beside a live bot, on a
    folder they may not write to."""
    config = load_config(path, writer=writer)  # registers every secret of it with bot.logsafe
    log.debug("configuration: %r", config)
    return config


def require_credentials(config: Config) -> None:
    """The OpenAI API refuses every request without a key: say so now, not at the first message."""
    if not config.llm.base_url and not config.llm.api_key:
        raise UserError(NO_KEY, EXIT_USAGE)


NO_KEY = (
    "no API key for the OpenAI API: set OPENAI_API_KEY, or [llm] base_url "
    "for a local server (Ollama, vLLM, llama.cpp)"
)


def describe_endpoint(config: Config) -> str:
    where = config.llm.base_url or "the OpenAI API"
    return f"model {config.llm.model} at {where}"


def require_workspace(config: Config, key: str) -> None:
    """A mistyped key must not create an empty workspace; list the ones that exist instead."""
    from memory.workspace import Workspaces

    workspaces = Workspaces(workspaces_dir(config), writer=False)
    if workspaces.exists(key):
        return
    known = list(workspaces.user_keys())
    listing = ", ".join(known[:10]) + (", …" if len(known) > 10 else "") if known else "none yet"
    base = workspaces.base_dir
    raise UserError(f"no workspace for user {key!r} in {base} (known users: {listing})")


def workspaces_dir(config: Config) -> Path:
    return Path(config.memory.workspaces_dir)


def platform_factory(name: str) -> AdapterFactory:
    try:
        return load_platform(name).create
    except (PlatformStartError, PluginError) as exc:
        raise UserError(
            f"{exc} (install LightGrep with `pip install -e .` so its platforms are registered)"
        ) from None


@contextlib.contextmanager
def only_writer(config: Config) -> Iterator[None]:
    """One process per workspaces folder: a second bot on it would be a second writer."""
    lock = FolderLock(workspaces_dir(config))
    try:
        lock.acquire()
    except FolderLockError as exc:
        raise UserError(str(exc)) from None
    try:
        yield
    finally:
        lock.release()


async def sized(config: Config) -> Sizing:
    """The context window and its shares (bot.agent.sizing.Sizing), the server asked where it
    can tell. A window too small for one turn stops the command here, with doctor's line and
    the fix: the bot would otherwise refuse every message as too long."""
    from bot.agent.sizing import check_window

    check = await check_window(config)
    if check.too_small:
        raise UserError(f"context window: {check.line}")
    if check.fine:
        log.info("context window: %s", check.line)
    else:
        log.warning("context window: %s", check.line)
    return check.sizing
