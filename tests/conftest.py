"""Shared fixtures: fake far ends on 127.0.0.1 and a fresh workspaces folder per test."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.llm import habits
from tests.rigs import REPO
from tests.rigs.fakes.openai_server import FakeOpenAI
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.nats_server import NatsServer

# The fixtures the test folders share, each defined once in its rig (tests/rigs/): `tg`,
# `discord_fake`, `guarded` (a nats-server that asks for a token), `llm` (a real LLMClient on
# the fake provider).
pytest_plugins = [
    "tests.rigs.agent",
    "tests.rigs.cluster",
    "tests.rigs.discord",
    "tests.rigs.telegram",
]

# Bytecode cached, as in any installed copy: with PYTHONDONTWRITEBYTECODE set (some shells and
# images set it), every `lightgrep` child a test starts compiled our ~150 modules again, about
# 0.4 s of a 1.7 s cold start. Popped here, before pytest-xdist starts its workers, so they and
# every child inherit it; the bytecode goes to __pycache__ (ignored by git and by the sdist).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# The files tests write (configs, lightgrep.env) are 0644 whatever the machine's umask: under
# 0002 (many desktops' default) they were group-writable, which the config loader refuses as ssh
# does (bot/config.py, _owned_by_us). Set before the workers start, so they and children inherit it.
os.umask(0o022)


@pytest.fixture(autouse=True)
def private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and XDG_DATA_HOME in a fresh folder: no test (nor a child process it starts, which
    inherits the environment) reads or writes the real home, where memory lives by default."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    return home


@pytest.fixture(autouse=True)
def tasks_shown_before_a_timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test about to run into its timeout prints where each asyncio task waits: pytest-timeout
    shows the threads only, and in an async test the main thread just waits in the selector
    (seen: a cluster test that timed out once in CI, with nothing to say where)."""
    marker = request.node.get_closest_marker("timeout")
    given = marker.args[0] if marker and marker.args else request.config.getini("timeout")
    limit = float(given or 0)
    if limit <= 4:
        yield
        return
    timer = threading.Timer(limit - 2, _print_tasks)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _print_tasks() -> None:
    loops = [o for o in gc.get_objects() if issubclass(type(o), asyncio.AbstractEventLoop)]
    for loop in loops:
        if not loop.is_running():
            continue
        for task in asyncio.all_tasks(loop):
            print(f"--- task {task.get_name()}: {task.get_coro()!r}", file=sys.stderr)
            task.print_stack(file=sys.stderr)
    sys.stderr.flush()


@pytest.fixture(scope="session")
def entry_points_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's entry points as pip would register them, so a checkout works uninstalled."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    platforms = project["project"]["entry-points"]["lightgrep.platforms"]
    folder = tmp_path_factory.mktemp("site")
    info = folder / "lightgrep-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lightgrep\nVersion: 0.0\n")
    lines = [f"{name} = {target}" for name, target in platforms.items()]
    (info / "entry_points.txt").write_text("[lightgrep.platforms]\n" + "\n".join(lines) + "\n")
    return folder


@pytest.fixture
def child_env(entry_points_dir: Path, private_home: Path) -> dict[str, str]:
    """For a child process: no secrets of the machine, a private home, the checkout's code."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LIGHTGREP_", "OPENAI_", "TELEGRAM_", "DISCORD_", "BRAVE_"))
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), str(entry_points_dir)]),
        USER="tester",
        LOGNAME="tester",
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",  # a child sent SIGABRT (a test's last resort) shows its stacks
    )
    return env


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()
        habits.forget_all()  # what it taught: not for the next test's server on its port


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    server = await FakeTelegram().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def workspaces_dir(tmp_path: Path) -> Path:
    path = tmp_path / "workspaces"
    path.mkdir()
    return path


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    """A real nats-server with JetStream on 127.0.0.1, storage in the test's folder."""
    server = await NatsServer(tmp_path / "nats", tmp_path / "nats.log").start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, entry_points_dir: Path) -> None:
    """In-process runs of the CLI: no secrets or overrides from the machine running the tests."""
    for key in list(os.environ):
        if key.startswith(("LIGHTGREP_", "OPENAI_", "TELEGRAM_", "DISCORD_")):
            monkeypatch.delenv(key)
    monkeypatch.syspath_prepend(str(entry_points_dir))


OUR_LOGGERS = ("bot", "adapters", "memory", "lightgrep")


@pytest.fixture(autouse=True)
def keep_logging() -> Iterator[None]:
    """main() configures logging (bot.cli.main.setup_logging: the root's handlers and level,
    and the levels of our own loggers, WARNING for a brief command such as doctor); give the
    next test what it had, so a test that reads INFO lines (caplog) never depends on which
    test ran before it in the same worker. Autouse: a test need not know it runs main()."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    ours = {name: logging.getLogger(name).level for name in OUR_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in ours.items():
        logging.getLogger(name).setLevel(was)
