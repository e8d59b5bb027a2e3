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

Nothing is left half-written: the config is checked (it must load) before anything is written,
then lightgrep.env and config.toml are each replaced atomically, lightgrep.env put back as it
was if config.toml cannot be written. A config folder that is a symbolic link is followed (it
is where the person keeps it); a link AT config.toml or lightgrep.env is refused with one line:
following it would write the secrets wherever it points and chmod that file, and an atomic
replace would turn the link into a file; `--config <its target>` writes there instead.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import re
import sys
from collections.abc import Callable
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
TOO_LARGE = object()  # the body of an answer too large to be a list of models (not read)


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
    """Asking the person at the terminal (or reading answers piped in); with --yes, nothing.

    A wrong answer is said and asked again (`until`), so nothing typed before it is lost."""

    def __init__(self, ask: bool) -> None:
        self.ask = ask

    def text(self, question: str, default: str = "") -> str:
        if not self.ask:
            return default
        shown = f" [{default}]" if default else ""
        return self._read(f"{question}{shown}", secret=False) or default

    def secret(self, question: str) -> str:
        """Typed without being shown (piped in: read as a line)."""
        if not self.ask:
            return ""
        return self._read(question, secret=True) or ""

    def yes(self, question: str) -> bool:
        return self.text(f"{question} [y/N]").lower() in ("y", "yes")

    def until(
        self,
        question: str,
        fine: Callable[[str], bool],
        wrong: str,
        unanswered: str,
        *,
        secret: bool = False,
    ) -> str:
        """The first answer that is `fine`; after any other, `wrong` is said and the question
        comes again. No answer left (the input ended), or --yes: UserError(`unanswered`), 2."""
        while self.ask:
            answer = self._read(question, secret=secret)
            if answer is None:
                break
            if fine(answer):
                return answer
            print(wrong, flush=True)
        raise UserError(unanswered, EXIT_USAGE)

    @staticmethod
    def _read(question: str, *, secret: bool) -> str | None:
        """One answer, stripped; None once there are no more (end of the input)."""
        try:
            if secret and sys.stdin.isatty():
                return getpass.getpass(f"{question} (hidden): ").strip()
            return input(f"{question}: ").strip()
        except EOFError:
            return None


async def _get(url: str, key: str | None, wait_s: float = LIST_TIMEOUT_S) -> tuple[int, Any]:
    """(HTTP status, JSON body or None); status 0 when nothing answered. An answer larger than
    bot.agent.window.ANSWER_MAX_BYTES is not read on (no list of models is that large): its body
    is TOO_LARGE."""
    import aiohttp

    from bot.agent.window import TooLarge, json_within

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = aiohttp.ClientTimeout(total=wait_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers) as response,
        ):
            try:
                return response.status, await json_within(response)
            except ValueError:
                return response.status, None
            except TooLarge:
                return response.status, TOO_LARGE
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
        if status == 200 and _model_ids(body):  # (TOO_LARGE lists none)
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
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_string(str(v)) for v in value) + "]"
    return _toml_string(str(value))


_TOML_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_TOML_ESCAPED = re.compile(r'["\\\x00-\x1f\x7f]')


def _toml_string(text: str) -> str:
    """A TOML basic string holding `text`, any Unicode as it is (JSON's \\u escapes of an emoji
    are a surrogate pair, which TOML refuses): only the quote, the backslash and the control
    characters escaped, as TOML requires. A lone surrogate is no character: refused."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise UserError(f"{shown!r} is not valid text (it holds a lone surrogate)") from None
    escaped = _TOML_ESCAPED.sub(
        lambda m: _TOML_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04X}"), text
    )
    return f'"{escaped}"'


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


def secrets_text(path: Path, secrets: dict[str, str]) -> str:
    """The KEY=value file at `path` with `secrets` in it (others' lines kept)."""
    kept = [
        line
        for line in (path.read_text("utf-8").splitlines() if path.exists() else [])
        if line.partition("=")[0].strip().removeprefix("export ") not in secrets
    ]
    return "\n".join([*kept, *(f"{key}={value}" for key, value in secrets.items())]) + "\n"


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

    path = config_target(Path(args.config or DEFAULT_CONFIG))
    if path.exists() and not args.force:
        raise UserError(f"{path} exists already: --force replaces it", EXIT_USAGE)
    secrets_path = path.parent / SECRETS_FILE
    ask = Questions(not args.yes)
    secrets: dict[str, str] = {}  # typed here: written to lightgrep.env
    known = {**os.environ, **read_secrets_file(secrets_path)}
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
    env_text = None
    if secrets:  # a link there is refused before anything is written
        _refuse_link(secrets_path, f"a --config FILE in the folder where {SECRETS_FILE} really is")
        env_text = secrets_text(secrets_path, secrets)
    _check_loads(path, text, {**known, **secrets})  # before anything is written
    _write(path, text, env_text, secrets)
    what = "run" if enabled else "chat"
    print(f"Start it with: lightgrep {what} --config {args.config or DEFAULT_CONFIG}")
    if args.no_doctor:
        return 0
    print("Checking it with lightgrep doctor:", flush=True)
    from bot.cli.doctor import cmd_doctor

    return asyncio.run(cmd_doctor(argparse.Namespace(config=path)))


def config_target(path: Path) -> Path:
    """Where init writes the config: in its folder as that folder really is (a folder that is a
    link is followed: the person keeps their config there), never through a link at the file
    itself (refused, module docstring)."""
    folder = path.expanduser().absolute().parent.resolve()
    target = folder / path.name
    _refuse_link(target, "--config FILE")
    return target


def _refuse_link(path: Path, fix: str) -> None:
    if path.is_symlink():
        raise UserError(
            f"{path} is a symbolic link (to {os.readlink(path)}), which init does not write "
            f"through: give {fix} where the real file is, or remove the link",
            EXIT_USAGE,
        )


def _check_loads(path: Path, text: str, env: dict[str, str]) -> None:
    """The config as it would be written must load (with the secrets it will have beside
    it); checked in a folder of its own, so a config that does not is never written."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lightgrep-init-") as folder:
        trial = Path(folder) / path.name
        trial.write_text(text, "utf-8")
        trial.chmod(0o600)  # (under any umask: the loader refuses a file others can change)
        try:
            load_config(trial, env=env, writer=False)
        except ConfigError as exc:
            told = str(exc).replace(str(trial), str(path))
            raise UserError(
                f"the config init made does not load, so nothing is written: {told}"
            ) from None


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
            base_url = await _typed_server(ask)
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
        status, body = await _get(f"{where}/models", key)
        while status in (401, 403) and ask.ask:  # a key mistyped or pasted short: again
            print(f"{where} refused that key (HTTP {status}).", flush=True)
            key = ask.until(
                "API key for it",
                bool,
                "It needs a key.",
                f"{where} refused the API key (HTTP {status})",
                secret=True,
            )
            status, body = await _get(f"{where}/models", key)
        secrets["OPENAI_API_KEY"] = key
    if status == 0:
        raise UserError(f"nothing answers at {where}: is the server running?")
    if status != 200:
        raise UserError(f"{where}/models answered HTTP {status}: is it an OpenAI-compatible URL?")
    if body is TOO_LARGE:
        from bot.agent.window import ANSWER_MAX_BYTES

        too_large = f"{where}/models answered more than {ANSWER_MAX_BYTES // 2**20} MB"
        if not args.model:
            raise UserError(f"{too_large}, far more than a list of models: name one with --model")
        print(f"Note: {too_large}; not read (the model is --model {args.model}).")
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


async def _typed_server(ask: Questions) -> str | None:
    """The base URL typed (None, nothing typed: the OpenAI API), asked again while nothing
    OpenAI-like answers there: a typing slip is said, not the end of init."""
    question = "None found. Base URL of an OpenAI-compatible server (empty: the OpenAI API)"
    while typed := ask.text(question).rstrip("/"):
        status, _ = await _get(f"{typed}/models", None)
        if status in (200, 401, 403):  # a server of models (the key is asked next if need be)
            return typed
        what = f"answers HTTP {status}" if status else "answers nothing"
        print(f"{typed}/models {what}: is the server running, and is it its /v1 URL?", flush=True)
        question = "Base URL of an OpenAI-compatible server (empty: the OpenAI API)"
    return None


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
        while picked.isdigit() and not 0 < int(picked) <= len(shown) and picked not in models:
            print(f"No number {picked} above: type one from 1 to {len(shown)}, or a name.")
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
                value = known.get(variable)
                if value:
                    print(f"{name} {field.name}: {variable} from the environment.")
                else:
                    value = ask.until(
                        spec.question or f"{name} {field.name}{about}",
                        bool,
                        f"{name} needs its {field.name}"
                        + (f": {spec.hint}." if spec.hint else "."),
                        f"{name} needs its {field.name}: set {variable}",
                        secret=True,
                    )
                    secrets[variable] = value
            elif name in allow and field.name == "allow_from":
                settings[field.name] = allow[name]
            else:
                typed = ask.until(
                    spec.question or f"{name} {field.name}, comma-separated{about}",
                    lambda typed: bool(_listed(typed)),
                    f"That leaves {name} {field.name} empty"
                    + (f", {spec.hint}." if spec.hint else "."),
                    f"{name} needs {field.name}: --allow-from {name}=IDS",
                )
                settings[field.name] = _listed(typed)
        chosen[name] = settings
    return chosen


def _listed(typed: str) -> list[str]:
    """The items of a comma-separated answer, blanks left out."""
    return [part.strip() for part in typed.split(",") if part.strip()]


def _write(path: Path, text: str, env_text: str | None, secrets: dict[str, str]) -> None:
    """lightgrep.env (readable by its owner only), then config.toml, each replaced atomically;
    lightgrep.env put back as it was if config.toml cannot be written, so init leaves both
    files as they were or both new."""
    from memory.atomic import atomic_write_text

    env_path = path.parent / SECRETS_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        before = env_path.read_bytes() if env_text is not None and env_path.exists() else None
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        if env_text is not None:
            atomic_write_text(env_path, env_text)
            os.chmod(env_path, 0o600)
    except OSError as exc:
        raise UserError(
            f"cannot write {env_path}, so nothing is written: {exc.strerror or exc}"
        ) from None
    try:
        atomic_write_text(path, text)
        os.chmod(path, 0o644)  # no secret in it: they are in lightgrep.env
    except OSError as exc:
        if env_text is not None:
            with contextlib.suppress(OSError):
                if before is None:
                    env_path.unlink()
                else:
                    atomic_write_text(env_path, before)
        raise UserError(
            f"cannot write {path}, so nothing is written: {exc.strerror or exc}"
        ) from None
    note = ""
    if secrets:
        note = f"; the secrets ({', '.join(secrets)}) to {env_path}, which only you can read"
    print(f"Wrote {path}{note}.")
