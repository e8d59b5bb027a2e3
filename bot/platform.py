"""What a platform plugin brings to the core, and how the core finds plugins by name.

Plugins are registered as entry points (group `lightgrep.platforms`, e.g. in pyproject.toml), so
the core loads them without importing adapters/: imports flow adapters → bot → memory only. A
plugin brings its `[<name>]` settings section (a `bot.settings.Section` dataclass whose fields
declare their checks, secrets and environment variables), any cross-key check, and the factory
of its adapter. bot/config.py reads and checks the section; the adapter trusts what it gets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from bot.settings import Section

if TYPE_CHECKING:
    import asyncio

    from bot.inbound import Inbound
    from bot.outbound import Outbound, Reply

ENTRY_POINT_GROUP = "lightgrep.platforms"
OUR_PACKAGES = frozenset({"adapters", "bot", "memory"})  # an entry point into these is ours


class PlatformStartError(Exception):
    """A platform could not start (bad token, missing intent, unreachable API): one clear line."""


class PluginError(Exception):
    """An installed platform plugin is broken (does not load, or is not a PlatformPlugin)."""


class Core(Protocol):
    """What an adapter is given to answer messages: the agent itself in one process, or in
    `lightgrep ingress` bot.cluster.ingress.BrokerCore, which hands the message to a worker
    process's agent through NATS and replays its answer."""

    async def handle(self, inbound: Inbound, out: Outbound) -> None: ...


class PlatformAdapter(Protocol):
    name: str
    ready: asyncio.Event  # set once the adapter is serving

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set (or, for the terminal, until the user quits), then wind down:
        stop receiving, let running turns finish. Raise PlatformStartError if it cannot start."""
        ...


@runtime_checkable
class Resender(Protocol):
    """The port for a message nobody is waiting on: an adapter that can send by plain ids
    alone. Two callers: in `lightgrep ingress` the answer of a message whose handle() call is
    gone (its ingress restarted), by its `Inbound.destination`; and a reminder at its time
    (bot/reminders/scheduler.py), by the `Inbound.place` of the message that set it. The CLI
    registers each adapter that is one with the core that sends through it (`send_with`)."""

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        """Send `reply` (None: the turn failed, say so) there, waiting for the platform to be
        connected; raise if the platform did not take it (it is tried again later)."""
        ...


@runtime_checkable
class OnePerson(Protocol):
    """An adapter that serves one person (the terminal): while it runs, only that person's
    reminders are sent (another's would have nowhere to go)."""

    user_key: str


# `create(config: Config, agent: Core, **options)`: options are the command's own (the terminal
# takes `user=`); `lightgrep run` passes none.
AdapterFactory = Callable[..., PlatformAdapter]


@dataclass(frozen=True)
class PlatformPlugin:
    """One platform, as its package registers it.

    `settings` is the type of its `[name]` section (None: it has none, like the terminal); it
    must have an `enabled` key, which `lightgrep run` reads. `check` runs on an enabled section
    after every key passed its own checks, for rules across keys; it raises
    bot.settings.SettingError. `create(config, agent, **options)` builds the adapter; it finds
    its section in `config.platforms[name]`.
    """

    name: str
    create: AdapterFactory
    settings: type[Section] | None = None
    check: Callable[[Any], None] | None = None


def installed_plugins() -> dict[str, PlatformPlugin]:
    """Every registered plugin by name, in registration order; the first of a name wins."""
    plugins: dict[str, PlatformPlugin] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in plugins:
            plugins[ep.name] = _load(ep.name, ep.value, ep.load)
    return plugins


def load_platform(name: str) -> PlatformPlugin:
    """The plugin registered for a platform name."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return _load(ep.name, ep.value, ep.load)
    raise PlatformStartError(f"no adapter is installed for platform {name!r}")


def _load(name: str, target: str, load: Callable[[], Any]) -> PlatformPlugin:
    where = f"platform plugin {name!r} ({target})"
    try:
        plugin = load()
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in OUR_PACKAGES:  # our code moved since install
            raise PluginError(
                f"{where} names a module that no longer exists ({exc.name}): LightGrep was "
                "installed from an older version; re-run `pip install -e .` in its folder"
            ) from None
        raise PluginError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # a third-party package may fail in any way; say which one
        raise PluginError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
    if not isinstance(plugin, PlatformPlugin):
        raise PluginError(
            f"{where} is not a PlatformPlugin (an old install? re-run `pip install -e .`)"
        )
    if plugin.name != name:
        raise PluginError(f"{where} calls itself {plugin.name!r}")
    settings = plugin.settings
    if settings is not None:
        if not (dataclasses.is_dataclass(settings) and issubclass(settings, Section)):
            raise PluginError(f"{where}: its settings must be a bot.settings.Section dataclass")
        if "enabled" not in {f.name for f in dataclasses.fields(settings)}:
            raise PluginError(f"{where}: its settings have no 'enabled' key")
        if settings.__repr__ is not Section.__repr__:
            raise PluginError(f"{where}: declare its settings with @dataclass(repr=False)")
    return plugin
