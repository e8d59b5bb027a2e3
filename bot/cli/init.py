"""`lightgrep init`: a first config.toml that works, asked for step by step or given by flags.

It finds a model server on this machine (Ollama on 11434, llama.cpp on 8080, vLLM on 8000) or
asks for a base URL and key, lists the server's models (/v1/models), reads its window, asks
which platforms to serve and their tokens (typed hidden), writes config.toml from
config.example.toml (every key stays documented) and the secrets to lightgrep.env beside it
(private: the config loader, compose and systemd read that file), then runs doctor. The
context window and the shares of it are left automatic (bot/agent/sizing.py). --yes asks
nothing: the flags, the environment and what it finds decide. Platforms are asked about by
what their settings declare (their required keys, which are secret), so a plugin installed
from another package is asked about too.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

from bot.cli.common import EXIT_USAGE, UserError
from bot.config import (
    CORE_SECTIONS,
    DEFAULT_CONFIG,
    SECRETS_FILE,
    ConfigError,
    load_config,
    read_secrets_file,
    section_types,
)
from bot.settings import key_spec

LOCAL_SERVERS = {11434: "Ollama", 8080: "llama.cpp", 8000: "vLLM"}
PROBE_TIMEOUT_S = 2.0  # a port with no server answers at once
LIST_TIMEOUT_S = 20.0  # a busy local server (generating for someone) answers slowly
OPENAI_API = "https://api.openai.com/v1"
OPENAI_DEFAULT_MODEL = "gpt-4o-mini"


def add_command(sub: Any, common: argparse.ArgumentParser) -> None:
    init = sub.add_parser("init", parents=[common], help="write a first config.toml, then check it")
    init.add_argument("--base-url", metavar="URL", help="the model server (default: look for one)")
    init.add_argument("--model", metavar="NAME", help="default: the first the server lists")
    init.add_argument(
        "--ports",
        metavar="LIST",
        default=",".join(map(str, LOCAL_SERVERS)),
        help="ports on 127.0.0.1 to look for a server on (default: %(default)s)",
    )
    init.add_argument(
        "--enable", action="append", default=[], metavar="PLATFORM", help="e.g. telegram"
    )
    init.add_argument(
        "--allow-from",
        action="append",
        default=[],
        metavar="PLATFORM=IDS",
        help='who may talk to the bot there, e.g. telegram=42,@alice or discord="*"',
    )
    init.add_argument("--yes", action="store_true", help="ask nothing (secrets from the env)")
    init.add_argument("--force", action="store_true", help="replace an existing config file")
    init.add_argument("--no-doctor", action="store_true", help="do not run doctor at the end")
    init.set_defaults(func=cmd_init)


class Questions:
    """Asking the person at the terminal (or reading answers piped in); with --yes, nothing."""

    def __init__(self, ask: bool) -> None:
        self.ask = ask

    def text(self, question: str, default: str = "") -> str:
        if not self.ask:
            return default
        shown = f" [{default}]" if default else ""
        try:
            answer = input(f"{question}{shown}: ").strip()
        except EOFError:
            answer = ""
        return answer or default

    def secret(self, question: str) -> str:
        """Typed without being shown (piped in: read as a line)."""
        if not self.ask:
            return ""
        try:
            if sys.stdin.isatty():
                return getpass.getpass(f"{question} (hidden): ").strip()
            return input(f"{question}: ").strip()
        except EOFError:
            return ""

    def yes(self, question: str) -> bool:
        return self.text(f"{question} [y/N]").lower() in ("y", "yes")


async def _get(url: str, key: str | None, wait_s: float = LIST_TIMEOUT_S) -> tuple[int, Any]:
    """(HTTP status, JSON body or None); status 0 when nothing answered."""
    import aiohttp

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = aiohttp.ClientTimeout(total=wait_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers) as response,
        ):
            try:
                return response.status, await response.json(content_type=None)
            except ValueError:
                return response.status, None
    except (aiohttp.ClientError, TimeoutError):
        return 0, None


def _model_ids(body: Any) -> list[str]:
    data = body.get("data") if isinstance(body, dict) else None
    ids = [d.get("id") for d in data or [] if isinstance(d, dict)]
    return [i for i in ids if isinstance(i, str) and i]


async def find_local_server(ports: list[int]) -> str | None:
    """The base URL of the first OpenAI-compatible server listing its models on one of
    `ports` of 127.0.0.1, or None."""
    import asyncio

    urls = [f"http://127.0.0.1:{port}/v1" for port in ports]
    answers = await asyncio.gather(*(_get(f"{url}/models", None, PROBE_TIMEOUT_S) for url in urls))
    for url, (status, body) in zip(urls, answers, strict=True):
        if status == 200 and _model_ids(body):
            return url
    return None


def example_config() -> str:
    """config.example.toml: the installed package's copy, else the checkout's."""
    try:
        return (resources.files("bot") / "config.example.toml").read_text("utf-8")
    except (FileNotFoundError, OSError):
        pass
    checkout = Path(__file__).resolve().parents[2] / "config.example.toml"
    try:
        return checkout.read_text("utf-8")
    except OSError:
        raise UserError("config.example.toml is missing from this installation") from None


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(str(v)) for v in value) + "]"
    return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's


def with_setting(text: str, section: str, key: str, value: Any) -> str:
    """`text` (a config file) with `key = value` in [section]: the key's line replaced, or its
    commented example (`# key = …`), else added under the header; the section added if
    missing. Everything else, the comments too, stays."""
    lines = text.split("\n")
    header = re.compile(rf"^\[{re.escape(section)}\]\s*(#.*)?$")
    start = next((i for i, line in enumerate(lines) if header.match(line.strip())), None)
    setting = f"{key} = {_toml(value)}"
    if start is None:
        return text.rstrip("\n") + f"\n\n[{section}]\n{setting}\n"
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
        len(lines),
    )
    own = re.compile(rf"^\s*{re.escape(key)}\s*=")
    example = re.compile(rf"^\s*#\s*{re.escape(key)}\s*=")
    for pattern in (own, example):
        for i in range(start + 1, end):
            if pattern.match(lines[i]):
                lines[i] = setting
                return "\n".join(lines)
    lines.insert(start + 1, setting)
    return "\n".join(lines)


def write_secrets(path: Path, secrets: dict[str, str]) -> None:
    """`secrets` into the KEY=value file at `path` (others' lines kept), readable by its owner
    only."""
    from memory.atomic import atomic_write_text

    kept = [
        line
        for line in (path.read_text("utf-8").splitlines() if path.exists() else [])
        if line.partition("=")[0].strip().removeprefix("export ") not in secrets
    ]
    body = "\n".join([*kept, *(f"{key}={value}" for key, value in secrets.items())]) + "\n"
    atomic_write_text(path, body)
    os.chmod(path, 0o600)


def _allow_lists(given: list[str]) -> dict[str, list[str]]:
    lists: dict[str, list[str]] = {}
    for item in given:
        name, equals, ids = item.partition("=")
        if not equals:
            raise UserError(f"--allow-from {item!r}: write PLATFORM=IDS, e.g. telegram=42", 2)
        lists[name.strip()] = [i.strip() for i in ids.split(",") if i.strip()]
    return lists


def cmd_init(args: argparse.Namespace) -> int:
    import asyncio

    path = Path(args.config or DEFAULT_CONFIG)
    if path.exists() and not args.force:
        raise UserError(f"{path} exists already: --force replaces it", EXIT_USAGE)
    ask = Questions(not args.yes)
    secrets: dict[str, str] = {}  # typed here: written to lightgrep.env
    known = {**os.environ, **read_secrets_file(path.parent / SECRETS_FILE)}
    base_url, model, keyless = asyncio.run(_the_model(args, ask, known, secrets))

    text = example_config()
    if base_url:
        text = with_setting(text, "llm", "base_url", base_url)
    text = with_setting(text, "llm", "model", model)
    if keyless:
        text = with_setting(text, "llm", "api_key", "")
    allow = _allow_lists(args.allow_from)
    enabled = _platforms(ask, args.enable, allow, known, secrets)
    for name, settings in enabled.items():
        text = with_setting(text, name, "enabled", True)
        for field_name, value in settings.items():
            text = with_setting(text, name, field_name, value)
    _write(path, text, secrets)
    try:
        load_config(path)  # what was written must load
    except ConfigError as exc:
        raise UserError(f"the config written does not load: {exc}") from None
    what = "run" if enabled else "chat"
    print(f"Start it with: lightgrep {what} --config {path}")
    if args.no_doctor:
        return 0
    print("Checking it with lightgrep doctor:", flush=True)
    from bot.cli.doctor import cmd_doctor

    return asyncio.run(cmd_doctor(argparse.Namespace(config=path)))


async def _the_model(
    args: argparse.Namespace, ask: Questions, known: dict[str, str], secrets: dict[str, str]
) -> tuple[str | None, str, bool]:
    """(base URL, None for the OpenAI API; the model; whether it is a server found by probing,
    to be sent no key): found, listed, and its window told."""
    base_url = args.base_url
    probed = False  # a server found by probing ports, which the person did not name
    if base_url is None:
        ports = [int(p) for p in args.ports.split(",") if p.strip().isdigit()]
        print(f"Looking for a model server on 127.0.0.1 (ports {args.ports})…", flush=True)
        base_url = await find_local_server(ports)
        probed = base_url is not None
        if probed:
            print(f"Found one at {base_url}.")
        else:
            question = "None found. Base URL of an OpenAI-compatible server (empty: the OpenAI API)"
            base_url = ask.text(question) or None
    base_url = base_url.rstrip("/") if base_url else None
    where = base_url or OPENAI_API
    # OPENAI_API_KEY goes only where the person pointed (--base-url, the URL typed, the OpenAI
    # API): whatever program listens on a probed port is not sent it (it was found because it
    # lists its models without one), nor later by doctor or the bot: its config says
    # api_key = "", which the variable does not fill.
    key = None if probed else known.get("OPENAI_API_KEY")
    status, body = await _get(f"{where}/models", key)
    if status in (401, 403) or (base_url is None and not key):
        key = ask.secret("API key for it") or key
        if not key:
            raise UserError(f"{where} needs an API key: set OPENAI_API_KEY")
        secrets["OPENAI_API_KEY"] = key
        status, body = await _get(f"{where}/models", key)
    if status == 0:
        raise UserError(f"nothing answers at {where}: is the server running?")
    if status != 200:
        raise UserError(f"{where}/models answered HTTP {status}: is it an OpenAI-compatible URL?")
    model = args.model or _choose_model(ask, _model_ids(body), base_url)

    from bot.agent.sizing import NOT_TOLD, describe, plan
    from bot.agent.window import server_window
    from bot.config import Config, LLMConfig

    found = await server_window(base_url, model) if base_url else None
    sizing = plan(Config(llm=LLMConfig(base_url=base_url, model=model)), found)
    print(f"Context window: {describe(sizing)} (left automatic in the config).")
    if base_url and found is None:
        print(f"Note: {NOT_TOLD}.")
    return base_url, model, probed and "OPENAI_API_KEY" not in secrets


def _choose_model(ask: Questions, models: list[str], base_url: str | None) -> str:
    if not models:
        return ask.text("Model name (the server lists none)") or OPENAI_DEFAULT_MODEL
    default = OPENAI_DEFAULT_MODEL if base_url is None and OPENAI_DEFAULT_MODEL in models else ""
    default = default or models[0]
    if ask.ask and len(models) > 1:
        shown = models[:20]
        for number, name in enumerate(shown, 1):
            print(f"  {number}) {name}")
        picked = ask.text("Model (number or name)", default)
        if picked.isdigit() and 0 < int(picked) <= len(shown):
            return shown[int(picked) - 1]
        return picked
    return default


def _platforms(
    ask: Questions,
    enable: list[str],
    allow: dict[str, list[str]],
    known: dict[str, str],
    secrets: dict[str, str],
) -> dict[str, dict[str, Any]]:
    """{platform: its settings to write} for the platforms to serve; the secrets they need
    typed here go into `secrets` (by their environment variable), never into the config."""
    types = section_types()
    plugins = {name: cls for name, cls in types.items() if name not in CORE_SECTIONS}
    unknown = sorted(set(enable) - set(plugins))
    if unknown:
        raise UserError(f"--enable {unknown[0]}: no such platform ({', '.join(plugins)})", 2)
    chosen: dict[str, dict[str, Any]] = {}
    for name, cls in plugins.items():
        names = {f.name for f in fields(cls)}
        if "enabled" not in names:
            continue
        if name not in enable and not ask.yes(f"Serve {name}?"):
            continue
        settings: dict[str, Any] = {}
        for field in fields(cls):
            spec = key_spec(field)
            if not spec.required:
                continue
            about = f" ({spec.hint})" if spec.hint else ""
            if spec.secret:
                variable = spec.env or f"LIGHTGREP_{name.upper()}_{field.name.upper()}"
                value = known.get(variable) or ask.secret(f"{name} {field.name}{about}")
                if known.get(variable):
                    print(f"{name} {field.name}: {variable} from the environment.")
                if not value:
                    raise UserError(f"{name} needs its {field.name}: set {variable}")
                if value != known.get(variable):
                    secrets[variable] = value
            elif name in allow and field.name == "allow_from":
                settings[field.name] = allow[name]
            else:
                typed = ask.text(f"{name} {field.name}, comma-separated{about}")
                listed = [part.strip() for part in typed.split(",") if part.strip()]
                if not listed:
                    raise UserError(f"{name} needs {field.name}: --allow-from {name}=IDS", 2)
                settings[field.name] = listed
        chosen[name] = settings
    return chosen


def _write(path: Path, text: str, secrets: dict[str, str]) -> None:
    from memory.atomic import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    os.chmod(path, 0o644)  # no secret in it: they are in lightgrep.env
    note = ""
    if secrets:
        write_secrets(path.parent / SECRETS_FILE, secrets)
        note = f"; the secrets ({', '.join(secrets)}) to {path.parent / SECRETS_FILE}, which only"
        note += " you can read"
    print(f"Wrote {path}{note}.")
