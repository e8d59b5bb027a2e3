"""A platform added by another package: registered the way pip registers one (a *.dist-info with an
entry point in group `lightgrep.platforms`), with nothing in bot/ naming it. Its section loads and
is checked through the plugin, `lightgrep run` starts it, and its secrets never reach a log."""

from __future__ import annotations

import json
import logging
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli.main import main
from bot.config import ConfigError, LLMConfig, load_config
from bot.llm.client import LLMClient

pytestmark = pytest.mark.usefixtures("keep_logging")

SECRET = "echo-SECRET-4242"

PLUGIN_MODULE = '''
"""A third-party LightGrep platform, as small as one can be."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from bot.platform import PlatformPlugin
from bot.settings import HTTP, NON_EMPTY, Section, SettingError, setting

log = logging.getLogger("echo_platform")


@dataclass(repr=False)
class EchoConfig(Section):
    enabled: bool = False
    token: str | None = setting(None, secret=True, env="ECHO_TOKEN", required=True)
    allow_from: list[str] = setting(default_factory=list, required=True)
    greeting: str = setting("hello", rule=NON_EMPTY)
    relay_url: str | None = setting(None, url=HTTP)
    relay: bool = False
    report: Path | None = None


def check(settings: EchoConfig) -> None:
    if settings.relay and not settings.relay_url:
        raise SettingError("relay = true needs relay_url", key="relay")


class EchoAdapter:
    name = "echo"

    def __init__(self, settings: EchoConfig) -> None:
        self.settings = settings
        self.ready = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        # A careless plugin: it logs its token, and a traceback that quotes it.
        log.warning("echo: logging in with token %s", self.settings.token)
        try:
            raise RuntimeError(f"the relay refused token {self.settings.token}")
        except RuntimeError:
            log.exception("echo: relay failed")
        if self.settings.report is not None:
            self.settings.report.write_text(json.dumps({"greeting": self.settings.greeting}))
        self.ready.set()  # then it stops on its own: `lightgrep run` has nothing left to serve


def create(config, agent) -> EchoAdapter:
    return EchoAdapter(config.platforms["echo"])


PLUGIN = PlatformPlugin(name="echo", create=create, settings=EchoConfig, check=check)
'''


@pytest.fixture
def echo_installed(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> Iterator[Path]:
    """The `echo` plugin installed as a separate distribution on sys.path."""
    site = tmp_path_factory.mktemp("third-party-site")
    (site / "echo_platform.py").write_text(PLUGIN_MODULE)
    info = site / "lightgrep_echo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lightgrep-echo\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lightgrep.platforms]\necho = echo_platform:PLUGIN\n")
    for key in list(os.environ):
        if key.startswith(("LIGHTGREP_", "OPENAI_", "TELEGRAM_", "DISCORD_", "ECHO_")):
            monkeypatch.delenv(key)
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("echo_platform", None)


def write(folder: Path, text: str) -> Path:
    path = folder / "config.toml"
    path.write_text(textwrap.dedent(text))
    return path


def error_of(path: Path, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, env or {})
    return str(info.value)


def test_its_section_loads_and_is_checked_through_the_plugin(
    echo_installed: Path, tmp_path: Path
) -> None:
    path = write(tmp_path, '[echo]\nenabled = true\nallow_from = ["*"]\ngreeting = "hi"\n')
    config = load_config(path, {"ECHO_TOKEN": SECRET, "LIGHTGREP_ECHO_RELAY_URL": "http://x"})
    echo = config.platforms["echo"]
    assert (echo.token, echo.greeting, echo.relay_url) == (SECRET, "hi", "http://x")
    assert config.enabled_platforms() == ["echo"]
    assert config.redacted()["echo"]["token"] == "***"
    assert SECRET not in repr(config)

    assert error_of(path) == (
        f"{path}: [echo] is enabled but token is missing: set token under [echo] or the "
        "ECHO_TOKEN environment variable"
    )
    write(tmp_path, '[echo]\nenabled = true\ntoken = "t1234"\n')
    assert "[echo] is enabled but allow_from is empty" in error_of(path)
    write(tmp_path, '[echo]\ngreting = "hi"\n')
    assert "[echo] unknown key 'greting' (did you mean 'greeting'?)" in error_of(path)
    write(tmp_path, "[ecko]\nenabled = true\n")
    assert "unknown section [ecko] (did you mean [echo]?)" in error_of(path)
    write(tmp_path, '[echo]\ngreeting = " "\n')
    assert "[echo] greeting must be a non-empty string, got ' '" in error_of(path)
    write(tmp_path, '[echo]\nrelay_url = "ftp://x"\n')
    assert "[echo] relay_url must be a URL starting with http:// or https://" in error_of(path)
    write(tmp_path, '[echo]\nenabled = true\ntoken = "t1234"\nallow_from = ["*"]\nrelay = true\n')
    assert error_of(path) == f"{path}: [echo] relay = true needs relay_url"
    write(tmp_path, "[echo]\nrelay = true\n")
    assert load_config(path, {}).platforms["echo"].relay  # a disabled platform is not checked


def test_lightgrep_run_starts_it_and_masks_its_secrets(
    echo_installed: Path, tmp_path: Path, capsys
) -> None:
    report = tmp_path / "report.json"
    path = write(
        tmp_path,
        f"""
        [llm]
        base_url = "http://127.0.0.1:9/v1"  # never asked: the echo platform hands over no turn
        [echo]
        enabled = true
        token = "{SECRET}"
        allow_from = ["*"]
        greeting = "from the file"
        report = "{report}"
        """,
    )
    assert main(["run", "--config", str(path)]) == 0
    err = capsys.readouterr().err
    assert json.loads(report.read_text()) == {"greeting": "from the file"}
    assert "starting echo" in err and "echo is ready" in err
    assert "echo: logging in with token ***" in err
    assert "RuntimeError: the relay refused token ***" in err  # the traceback, masked
    assert SECRET not in err


async def test_the_llm_api_key_is_masked_without_the_cli(caplog: pytest.LogCaptureFixture) -> None:
    """An embedder (or a test) building the client from a hand-made config gets the same mask."""
    client = LLMClient.from_config(LLMConfig(api_key="sk-hand-made-77", base_url="http://x"))
    try:
        with caplog.at_level(logging.INFO):
            logging.getLogger("somewhere.else").info("sending with %s", "sk-hand-made-77")
    finally:
        await client.aclose()
    assert "sending with ***" in caplog.text and "hand-made" not in caplog.text


def test_a_broken_plugin_is_one_line(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    info = site / "broken-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lightgrep.platforms]\nbroken = no_such_module:X\n")
    monkeypatch.syspath_prepend(str(site))
    message = error_of(write(tmp_path, ""))
    assert message.startswith("platform plugin 'broken' (no_such_module:X) failed to load: ")
    assert "ModuleNotFoundError" in message and "\n" not in message


def test_a_stale_editable_install_says_to_reinstall(tmp_path: Path, monkeypatch) -> None:
    """An editable install made before the platforms became packages still names
    adapters.telegram_config in its entry points: one line says what to do."""
    site = tmp_path / "site"
    info = site / "lightgrep_old-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lightgrep-old\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[lightgrep.platforms]\nstale = adapters.telegram_config:PLUGIN\n"
    )
    monkeypatch.syspath_prepend(str(site))
    message = error_of(write(tmp_path, ""))
    assert "adapters.telegram_config" in message and "re-run `pip install -e .`" in message
    assert "\n" not in message
