"""Configuration as a person writes it: the example file works, mistakes are one clear line."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from bot.config import Config, ConfigError, load_config, section_types
from tests.rigs import REPO

EXAMPLE = REPO / "config.example.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def error_of(path: Path | None, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, env or {})
    message = str(info.value)
    assert "\n" not in message
    return message


def test_example_file_loads_with_platforms_disabled(tmp_path: Path, private_home: Path) -> None:
    copy = write(tmp_path, EXAMPLE.read_text())
    config = load_config(copy, {})
    assert config.enabled_platforms() == []
    data = private_home / ".local" / "share" / "lightgrep"
    assert config.memory.workspaces_dir == data / "workspaces"
    assert config.memory.workspaces_dir.is_dir()
    assert config.llm == Config().llm  # the example shows the defaults


def test_example_file_documents_every_key() -> None:
    text = EXAMPLE.read_text()
    tomllib.loads(text)
    for section, cls in section_types().items():
        assert f"[{section}]" in text
        for f in fields(cls):
            line = re.search(rf"^(# )?{f.name} = ", text, re.M)
            assert line, f"[{section}] {f.name} is not in config.example.toml"
            before = text[: line.start()].rstrip("\n").splitlines()[-1]
            assert before.startswith("#"), f"[{section}] {f.name} has no comment above it"


def test_values_are_read_with_their_types(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[llm]
base_url = "http://127.0.0.1:11434/v1"
model = "qwen2.5:7b"
context_window_tokens = 8192
temperature = 1
[telegram]
enabled = true
token = "123:abc"
allow_from = [42, "alice"]
[discord]
sync_guild_id = 7
""",
    )
    config = load_config(path, {})
    assert config.llm.base_url == "http://127.0.0.1:11434/v1"
    assert config.llm.model == "qwen2.5:7b"
    assert config.llm.context_window_tokens == 8192
    assert config.llm.temperature == 1.0 and isinstance(config.llm.temperature, float)
    assert config.platforms["telegram"].allow_from == ["42", "alice"]
    assert config.enabled_platforms() == ["telegram"]
    assert config.platforms["discord"].sync_guild_id == 7


def test_secrets_come_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, '[telegram]\nenabled = true\nallow_from = ["*"]\n')
    env = {"OPENAI_API_KEY": "sk-env", "TELEGRAM_BOT_TOKEN": "123:env", "DISCORD_BOT_TOKEN": "d"}
    config = load_config(path, env)
    assert config.llm.api_key == "sk-env"
    assert config.platforms["telegram"].token == "123:env"
    assert config.platforms["discord"].token == "d"


def test_vendor_variable_does_not_replace_a_key_in_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[llm]\napi_key = "local-key"\n')
    assert load_config(path, {"OPENAI_API_KEY": "sk-openai"}).llm.api_key == "local-key"


def test_lightgrep_variables_override_the_file_with_types(tmp_path: Path) -> None:
    path = write(tmp_path, '[llm]\nmodel = "from-file"\n')
    env = {
        "LIGHTGREP_LLM_MODEL": "from-env",
        "LIGHTGREP_LLM_BASE_URL": "http://127.0.0.1:8000/v1",
        "LIGHTGREP_LLM_CONTEXT_WINDOW_TOKENS": "4096",
        "LIGHTGREP_LLM_TIMEOUT_S": "2.5",
        "LIGHTGREP_TELEGRAM_ENABLED": "yes",
        "LIGHTGREP_TELEGRAM_TOKEN": "123:x",
        "LIGHTGREP_TELEGRAM_ALLOW_FROM": "42, alice",
        "LIGHTGREP_DISCORD_SYNC_GUILD_ID": "",
        "LIGHTGREP_HOME": "/elsewhere",  # not a section of ours: ignored
    }
    config = load_config(path, env)
    assert config.llm.model == "from-env"
    assert config.llm.base_url == "http://127.0.0.1:8000/v1"
    assert config.llm.context_window_tokens == 4096
    assert config.llm.timeout_s == 2.5
    telegram = config.platforms["telegram"]
    assert telegram.enabled is True
    assert telegram.token == "123:x"
    assert telegram.allow_from == ["42", "alice"]
    assert config.platforms["discord"].sync_guild_id is None


def test_no_file_means_defaults_and_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, {"LIGHTGREP_LLM_MODEL": "m", "XDG_DATA_HOME": str(tmp_path / "d")})
    assert config.source is None
    assert config.llm.model == "m"
    # Memory is in the user's data folder, not in whatever folder the command was run from.
    assert config.memory.workspaces_dir == tmp_path / "d" / "lightgrep" / "workspaces"
    assert not (tmp_path / "workspaces").exists()


def test_the_data_folder_follows_xdg(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path / "h")}
    default = tmp_path / "h" / ".local" / "share" / "lightgrep" / "workspaces"
    assert load_config(None, home, writer=False).memory.workspaces_dir == default
    relative = {**home, "XDG_DATA_HOME": "rel/data"}  # the XDG spec: a relative one is ignored
    assert load_config(None, relative, writer=False).memory.workspaces_dir == default
    env = {**home, "LIGHTGREP_MEMORY_WORKSPACES_DIR": str(tmp_path / "ws")}
    assert load_config(None, env, writer=False).memory.workspaces_dir == tmp_path / "ws"


def test_default_path_is_config_toml_in_the_current_folder(tmp_path: Path, monkeypatch) -> None:
    write(tmp_path, '[llm]\nmodel = "here"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(None, {}).llm.model == "here"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[llm]\ncontext_window_tokens = "big"\n',
            "config.toml: [llm] context_window_tokens must be a positive integer, got 'big'",
        ),
        (
            "[llm]\ncontext_window_tokens = 0\n",
            "config.toml: [llm] context_window_tokens must be a positive integer, got 0",
        ),
        ("[llm]\ntemperature = true\n", "[llm] temperature must be a number from 0 to 2, got True"),
        ('[llm]\nmodle = "x"\n', "config.toml: [llm] unknown key 'modle' (did you mean 'model'?)"),
        ("[telegramm]\nenabled = true\n", "unknown section [telegramm] (did you mean [telegram]?)"),
        ('model = "x"\n', "unknown key 'model' outside any section"),
        ('llm = "x"\n', "[llm] must be a section"),
        ("[telegram]\nenabled = 1\n", "[telegram] enabled must be true or false, got 1"),
        ("[telegram]\nallow_from = 42\n", "[telegram] allow_from must be a list of strings"),
        (
            '[llm]\nbase_url = "localhost:11434"\n',
            "[llm] base_url must be a URL starting with http:// or https://, got 'localhost:11434'",
        ),
        ('[discord]\ngateway_url = "http://x"\n', "[discord] gateway_url must be a URL starting"),
        ('[telegram]\nmode = "push"\n', '[telegram] mode must be "polling" or "webhook"'),
        (
            '[telegram]\nenabled = true\nallow_from = ["*"]\n',
            "[telegram] is enabled but token is missing: set token under [telegram] or the "
            "TELEGRAM_BOT_TOKEN environment variable",
        ),
        (
            '[discord]\nenabled = true\ntoken = "t"\n',
            "config.toml: [discord] is enabled but allow_from is empty, so nobody could talk to "
            'the bot: list user ids, or "*" for everyone',
        ),
        (
            '[telegram]\nenabled = true\ntoken = "t"\nallow_from = [" "]\n',
            "[telegram] is enabled but allow_from is empty, so nobody could talk to the bot: "
            "list numeric user ids or @usernames",
        ),
        (
            '[telegram]\nenabled = true\ntoken = " \\n"\nallow_from = ["*"]\n',
            "[telegram] is enabled but token is missing",
        ),
        (
            '[discord]\nenabled = true\nallow_from = ["1"]\n',
            "config.toml: [discord] is enabled but token is missing: set token under [discord] "
            "or the DISCORD_BOT_TOKEN environment variable",
        ),
        (
            '[telegram]\nenabled = true\ntoken = "t"\nallow_from = ["*"]\nmode = "webhook"\n',
            'config.toml: [telegram] mode = "webhook" needs webhook_url',
        ),
        ('[discord]\ntokn = "x"\n', "[discord] unknown key 'tokn' (did you mean 'token'?)"),
        (
            "[discord]\nsync_guild_id = 0\n",
            "[discord] sync_guild_id must be a positive integer (a guild id), got 0",
        ),
        ("[telegram]\nwebhook_port = 0\n", "[telegram] webhook_port must be a port number"),
        ("[llm]\nmodel = \n", "config.toml: not valid TOML: Invalid value (at line 2, column 9)"),
    ],
)
def test_mistakes_are_one_line_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_of(write(tmp_path, text))


def test_environment_mistakes_name_the_variable(tmp_path: Path) -> None:
    message = error_of(None, {"LIGHTGREP_LLM_CONTEXT_WINDOW_TOKENS": "big"})
    assert message == (
        "environment LIGHTGREP_LLM_CONTEXT_WINDOW_TOKENS: [llm] context_window_tokens "
        "must be a positive integer, got 'big'"
    )
    message = error_of(None, {"LIGHTGREP_LLM_MODLE": "x"})
    assert "[llm] has no key 'modle' (did you mean LIGHTGREP_LLM_MODEL?)" in message
    assert "did you mean LIGHTGREP_LLM_MODEL" in error_of(None, {"LIGHTGREP_LMM_MODEL": "x"})
    assert "enabled must be true or false, got 'maybe'" in error_of(
        None, {"LIGHTGREP_DISCORD_ENABLED": "maybe"}
    )
    message = error_of(None, {"LIGHTGREP_TELEGRAM_TOKN": "x"})
    assert "[telegram] has no key 'tokn' (did you mean LIGHTGREP_TELEGRAM_TOKEN?)" in message
    message = error_of(None, {"LIGHTGREP_TELEGRAM_ENABLED": "true", "TELEGRAM_BOT_TOKEN": "1:x"})
    assert message.startswith("environment LIGHTGREP_TELEGRAM_ENABLED: [telegram] is enabled but ")
    assert "allow_from is empty" in message


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    assert "no such config file" in error_of(tmp_path / "nope.toml")
    assert "cannot read the config file" in error_of(tmp_path)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    assert "not UTF-8" in error_of(binary)


def test_workspaces_dir_is_relative_to_the_config_folder(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "etc"
    folder.mkdir()
    path = folder / "bot.toml"
    path.write_text('[memory]\nworkspaces_dir = "data/ws"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(Path("etc/bot.toml"), {}).memory.workspaces_dir == folder / "data" / "ws"


def test_workspaces_dir_expands_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = write(tmp_path, '[memory]\nworkspaces_dir = "~/lg"\n')
    assert load_config(path, {}).memory.workspaces_dir == tmp_path / "lg"


def test_unreachable_workspaces_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = write(tmp_path, f'[memory]\nworkspaces_dir = "{blocker}/ws"\n')
    message = error_of(path)
    assert "config.toml: [memory] workspaces_dir is an unreachable path: " in message
    assert "Not a directory" in message
    if os.geteuid() != 0:  # root can write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        path = write(tmp_path, f'[memory]\nworkspaces_dir = "{locked}"\n')
        assert "unreachable path" in error_of(path)


def test_secrets_never_show_in_repr_or_redacted(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[llm]\napi_key = "sk-SECRET1"\n[telegram]\ntoken = "SECRET2"\n'
        '[discord]\ntoken = "SECRET3"\n',
    )
    config = load_config(path, {})
    telegram = config.platforms["telegram"]
    shown = repr(config) + str(config.redacted()) + repr(telegram) + str(config)
    assert "SECRET" not in shown
    assert config.redacted()["llm"]["api_key"] == "***"
    assert config.redacted()["llm"]["model"] == "gpt-4o-mini"
    assert config.redacted()["discord"]["token"] == "***"
    assert config.llm.api_key == "sk-SECRET1"  # the real value is still there for the client
    assert telegram.token == "SECRET2"


def test_a_reader_resolves_the_workspaces_dir_without_creating_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[memory]\nworkspaces_dir = "ws"\n')
    assert load_config(path, {}, writer=False).memory.workspaces_dir == tmp_path / "ws"
    assert not (tmp_path / "ws").exists()
    assert load_config(path, {}).memory.workspaces_dir == tmp_path / "ws"
    assert (tmp_path / "ws").is_dir()


# ---- lightgrep.env beside the config file (what `lightgrep init` writes) -------------------------


def test_the_secrets_file_beside_the_config_fills_what_the_environment_leaves_unset(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, '[telegram]\nenabled = true\nallow_from = ["42"]\n')
    secrets = tmp_path / "lightgrep.env"
    secrets.write_text(
        "# the bot's secrets\nTELEGRAM_BOT_TOKEN='123:from-the-file'\n\n"
        "export LIGHTGREP_LLM_MODEL=qwen2.5:7b\nOPENAI_API_KEY=sk-file\n"
    )
    secrets.chmod(0o600)
    config = load_config(path, env={"OPENAI_API_KEY": "sk-environment"})
    assert config.platforms["telegram"].token == "123:from-the-file"
    assert config.llm.model == "qwen2.5:7b"
    assert config.llm.api_key == "sk-environment"  # the environment wins


def test_a_bad_line_in_the_secrets_file_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "[llm]\n")
    (tmp_path / "lightgrep.env").write_text("OPENAI_API_KEY=sk-1\nthis is not a setting\n")
    message = error_of(path, {})
    assert message.endswith("lightgrep.env, line 2: not a KEY=value line")
    assert "sk-1" not in message


def test_fallbacks_and_memory_endpoints_are_read_with_keys_from_the_environment(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """
[llm]
model = "local"
[[llm.fallback]]
base_url = "https://api.example.com/v1"
api_key_env = "HOSTED_KEY"
model = "hosted"
context_window_tokens = 2048
timeout_s = 5
[[consolidation.endpoints]]
model = "careful"
""",
    )
    config = load_config(path, {"HOSTED_KEY": "sk-hosted-secret"})
    [hosted] = config.fallbacks
    assert (hosted.model, hosted.api_key, hosted.context_window_tokens) == (
        "hosted",
        "sk-hosted-secret",
        2048,
    )
    assert hosted.timeout_s == 5.0 and hosted.max_retries == 2
    assert [one.model for one in config.consolidation] == ["careful"]
    assert "sk-hosted-secret" in config.secrets()  # masked in logs
    assert "sk-hosted-secret" not in repr(config.fallbacks)


@pytest.mark.parametrize(
    ("table", "env", "expected"),
    [
        (
            '[[llm.fallback]]\nmodel = "b"\nwindow = 2',
            {},
            "[llm.fallback] #1: unknown key 'window'",
        ),
        ('[[llm.fallback]]\nbase_url = "http://x/v1"', {}, "[llm.fallback] #1 has no model"),
        (
            '[[llm.fallback]]\nmodel = "b"\napi_key_env = "NOPE"',
            {},
            "[llm.fallback] #1 api_key_env: the environment has no NOPE",
        ),
        (
            '[[llm.fallback]]\nmodel = "b"\nbase_url = "ftp://x"',
            {},
            "[llm.fallback] #1 base_url must be a URL starting with http:// or https://",
        ),
        (
            '[[consolidation.endpoints]]\nmodel = "c"\ncontext_window_tokens = 0',
            {},
            "[consolidation.endpoints] #1 context_window_tokens must be a positive integer",
        ),
        ('[consolidation]\nmodel = "c"', {}, "[consolidation] holds only"),
    ],
)
def test_an_endpoint_that_is_wrong_is_named_in_one_line(
    tmp_path: Path, table: str, env: dict[str, str], expected: str
) -> None:
    path = write(tmp_path, f'[llm]\nmodel = "a"\n{table}\n')
    assert expected in error_of(path, env)
