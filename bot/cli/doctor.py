"""`lightgrep doctor`: one line per check of the setup, and how to fix what fails."""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from bot import logsafe
from bot.cli.common import EXIT_FAILURE, NO_KEY, describe_endpoint, load, workspaces_dir
from bot.config import Config, ConfigError, Endpoint

if TYPE_CHECKING:
    from bot.llm.client import LLMClient
    from bot.mcp.settings import McpServer

log = logging.getLogger("lightgrep")

MCP_WAIT_S = 20.0  # a server starting (a Python one, on a loaded machine, takes seconds)


async def cmd_doctor(args: argparse.Namespace) -> int:
    """One line per check; a failure says what is wrong and how to fix it."""
    results: list[bool] = []

    def report(ok: bool, check: str, detail: str) -> None:
        results.append(ok)
        print(f"{'OK  ' if ok else 'FAIL'}  {check}: {detail}", flush=True)

    try:
        # writer=False: a workspaces folder that cannot be written is the next check's finding,
        # on its own line, and must not hide the endpoint's.
        config = load(args.config, writer=False)
    except ConfigError as exc:
        report(False, "config", str(exc))
        return EXIT_FAILURE
    platforms = ", ".join(config.enabled_platforms()) or "none enabled"
    source = config.source or "no config file (defaults + environment)"
    report(True, "config", f"{source}; {describe_endpoint(config)}; platforms: {platforms}")
    report(*_check_workspaces(config))
    report(*await _check_endpoint(config))
    for name, endpoint in _other_endpoints(config):
        report(*await _check_other(name, endpoint, config))
    report(*await _check_window(config))
    report(*_check_tokens())
    if config.tools.read_page:
        report(*_check_read_page())
    if config.search.embeddings:
        report(*_check_embeddings(config))  # (nothing else runs in doctor meanwhile)
    if config.mcp:
        for line in await _check_mcp(config):
            report(*line)
    return 0 if all(results) else EXIT_FAILURE


def _check_embeddings(config: Config) -> tuple[bool, str, str]:
    """[search] embeddings is on: numpy (its extra) is there, and the endpoint embeds a
    question within [search] timeout_s (past it, searches rank by keywords alone)."""
    from bot.llm.embeddings import Embeddings
    from memory.search.meaning import EmbedError

    try:
        import numpy  # noqa: F401
    except ImportError:
        return (
            False,
            "embeddings",
            "on in [search], but numpy is missing: pip install 'lightgrep[embeddings]'",
        )
    embedder = Embeddings.from_config(config)
    assert embedder is not None  # (on)
    where = config.search.base_url or config.llm.base_url or "the OpenAI API"
    started = time.monotonic()
    try:
        got = embedder.embed(["is the endpoint there?"], "query", timeout_s=config.search.timeout_s)
    except EmbedError as exc:
        hint = " (searches rank by keywords alone meanwhile; docs/recall.md)"
        return False, "embeddings", f"{where}: {exc}{hint}"
    finally:
        embedder.close()
    ms = (time.monotonic() - started) * 1000
    dimensions = len(got.vectors[0])
    model = embedder.query_model
    return (
        True,
        "embeddings",
        f"{where} embedded a question with {model} ({dimensions} dimensions) in {ms:.0f} ms",
    )


async def _check_mcp(config: Config) -> list[tuple[bool, str, str]]:
    """Each [[mcp.servers]] entry started as the bot starts it (bot/mcp/hub.py): the allowed
    tools it offers, or why it did not connect (its first warning), within MCP_WAIT_S."""
    import asyncio  # (not at the top: `lightgrep memory` imports this module and no asyncio)

    from bot.mcp.hub import McpHub  # only with MCP servers configured: the SDK is an extra

    heard = _ServerWarnings()
    hub_log = logging.getLogger("bot.mcp.hub")
    hub_log.addHandler(heard)
    hub = McpHub(config.mcp)
    hub.start()
    try:
        for _ in range(int(MCP_WAIT_S / 0.1)):  # the hub tells no event: it is looked at
            if all(hub.offered(name) or name in heard.why for name in hub.started):
                break
            await asyncio.sleep(0.1)
        return [_mcp_line(server, hub.offered(server.name), heard.why) for server in config.mcp]
    finally:
        hub_log.removeHandler(heard)
        await hub.aclose()


def _mcp_line(
    server: McpServer, offered: tuple[str, ...], why: dict[str, str]
) -> tuple[bool, str, str]:
    check = f"MCP {server.name}"
    missing = [tool for tool in server.tools if f"{server.name}_{tool}" not in offered]
    if not server.tools:
        return False, check, "offers no tool: name those it may offer in its tools list"
    if not offered:
        reason = why.get(server.name, f"no answer within {MCP_WAIT_S:g} s")
        return False, check, f"not connected: {reason} (docs/mcp.md)"
    if missing:
        listed = ", ".join(offered)
        return False, check, f"offers {listed}; not listed by the server: {', '.join(missing)}"
    return True, check, f"offers {', '.join(offered)}"


class _ServerWarnings(logging.Handler):
    """The first warning of each server ("MCP server NAME: why"), as the hub logs it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.why: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        name, colon, why = record.getMessage().removeprefix("MCP server ").partition(": ")
        if colon and " " not in name:
            self.why.setdefault(name, why)


def _check_workspaces(config: Config) -> tuple[bool, str, str]:
    import tempfile

    path = workspaces_dir(config)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return False, "workspaces", f"{path} is not writable ({exc.strerror or exc})"
    return True, "workspaces", f"{path} is writable"


async def _check_endpoint(config: Config) -> tuple[bool, str, str]:
    from bot.llm.client import LLMClient

    where = config.llm.base_url or "https://api.openai.com/v1"
    if not config.llm.base_url and not config.llm.api_key:
        return False, "endpoint", NO_KEY
    log.info("sending a tiny chat request to %s", describe_endpoint(config))
    # A quick, honest answer: no retries (a retry would hide the failure), at most 30 s.
    client = LLMClient.from_config(
        config.llm, timeout_s=min(config.llm.timeout_s, 30.0), max_retries=0
    )
    return await _probe("endpoint", client, where, config.llm.model)


def _other_endpoints(config: Config) -> list[tuple[str, Endpoint]]:
    """[[llm.fallback]] and [[consolidation.endpoints]], each with the name of its check."""
    fallbacks = [(f"fallback {n}", one) for n, one in enumerate(config.fallbacks, 1)]
    memory = [(f"memory endpoint {n}", one) for n, one in enumerate(config.consolidation, 1)]
    return fallbacks + memory


async def _check_other(name: str, endpoint: Endpoint, config: Config) -> tuple[bool, str, str]:
    """A chain's endpoint asked as [llm]'s is: one tiny request, no retries."""
    from bot.llm.breaker import Breaker
    from bot.llm.chain import link_of

    where = endpoint.base_url or "https://api.openai.com/v1"
    client = link_of(replace(endpoint, max_retries=0), config.llm, Breaker()).client
    return await _probe(name, client, where, endpoint.model)


async def _probe(check: str, client: LLMClient, where: str, model: str) -> tuple[bool, str, str]:
    """One tiny chat request to `client`: whether it answered, and how long it took."""
    from memory.llm import LLMError

    started = time.monotonic()
    try:
        await client.chat([{"role": "user", "content": "Reply with the word OK."}], max_tokens=16)
    except LLMError as exc:
        reason = logsafe.mask(str(exc))  # the provider may quote a key, ours or another
        return False, check, f"{where}: {reason}{_endpoint_hint(reason)}"
    finally:
        await client.aclose()
    took = (time.monotonic() - started) * 1000
    return True, check, f"{where} answered with model {model} in {took:.0f} ms"


async def _check_window(config: Config) -> tuple[bool, str, str]:
    from bot.agent.sizing import check_window

    check = await check_window(config)
    return check.fine, "context window", check.line


def _endpoint_hint(reason: str) -> str:
    if "401" in reason or "403" in reason:
        return " (check [llm] api_key or OPENAI_API_KEY)"
    if "404" in reason:
        return " (check [llm] model, and that base_url ends in /v1)"
    if "could not be reached" in reason:
        return " (is the server running, and is [llm] base_url right?)"
    return ""


def _check_read_page() -> tuple[bool, str, str]:
    """read_page is on: its HTML reader is an extra, which a default image leaves out."""
    from bot.web.text import INSTALL

    try:
        import trafilatura  # noqa: F401  (a few hundred ms: only when read_page is on)
    except ImportError:
        return False, "read_page", f"on in [tools], but HTML pages cannot be read without {INSTALL}"
    return True, "read_page", "reads HTML pages (trafilatura), plain text and PDFs"


def _check_tokens() -> tuple[bool, str, str]:
    from memory.tokens import TokenEstimator

    try:
        estimator = TokenEstimator()
        count = estimator.count_text("LightGrep remembers what matters.")
    except Exception as exc:  # a broken tokenizer install is exactly what doctor is for
        return False, "token counter", f"{type(exc).__name__}: {exc}"
    if count <= 0:
        return False, "token counter", f"{estimator.method} counted {count} tokens for a sentence"
    approximate = estimator.method == "chars/4"
    note = " (approximate: tiktoken's data is not available)" if approximate else ""
    return True, "token counter", f"{estimator.method}, works offline{note}"
