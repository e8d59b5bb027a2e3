"""What the server says about its context window.

Several servers can tell their real window: llama.cpp's server (`/props`), vLLM (`/v1/models`,
`max_model_len`) and Ollama (`/api/show`; beyond its `num_ctx` Ollama silently cuts the
prompt's beginning, which is the system prompt holding MEMORY.md). bot/agent/sizing.py sizes
the bot from it when the config does not say, and `doctor` compares the two when it does.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from bot.media.rules import TooLarge, read_within

log = logging.getLogger(__name__)

__all__ = ["ANSWER_MAX_BYTES", "ServerWindow", "TooLarge", "json_within", "server_window"]

PROBE_TIMEOUT_S = 3.0
# The most of a server's answer read (/props, /v1/models, /api/show): a list of a few hundred
# models with their descriptions is well under it; a 200 MB one (a hostile or broken server)
# took 608 MB of RAM, read whole.
ANSWER_MAX_BYTES = 4 * 1024 * 1024
OLLAMA_DEFAULT_NUM_CTX = 2048  # the smallest default of the versions in use; unset means this


@dataclass(frozen=True)
class ServerWindow:
    tokens: int
    source: str  # e.g. "llama.cpp /props n_ctx"
    note: str = ""


def _root(base_url: str) -> str:
    """http://host:port/v1 → http://host:port (where /props and /api/show live)."""
    parts = urlsplit(base_url)
    path = re.sub(r"/v1/?$", "", parts.path.rstrip("/"))
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


async def json_within(response: aiohttp.ClientResponse, limit: int = ANSWER_MAX_BYTES) -> Any:
    """The answer's JSON, read only while it stays within `limit` bytes (TooLarge past them,
    or at once when its Content-Length says more); ValueError when it is not JSON."""
    body = await read_within(response.content.iter_chunked(65536), limit, response.content_length)
    return json.loads(body)


async def _get_json(session: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> Any:
    try:
        async with session.request(method, url, **kw) as response:
            if response.status != 200:
                return None
            return await json_within(response)
    except TooLarge:
        log.warning("%s answered more than %d bytes; not read", url, ANSWER_MAX_BYTES)
        return None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def _from_props(body: Any) -> ServerWindow | None:
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    for holder in (body, settings if isinstance(settings, dict) else {}):
        n = holder.get("n_ctx")
        if isinstance(n, int) and n > 0:
            return ServerWindow(n, "llama.cpp /props n_ctx")
    return None


def _from_models(body: Any, model: str) -> ServerWindow | None:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    entries = [d for d in data if isinstance(d, dict)]
    entries.sort(key=lambda d: d.get("id") != model)  # the configured model first
    for entry in entries:
        n = entry.get("max_model_len")
        if isinstance(n, int) and n > 0:
            return ServerWindow(n, "vLLM /v1/models max_model_len")
    return None


def _from_ollama(body: Any) -> ServerWindow | None:
    if not isinstance(body, dict):
        return None
    parameters = body.get("parameters")
    if isinstance(parameters, str):
        match = re.search(r"^\s*num_ctx\s+(\d+)", parameters, re.M)
        if match:
            return ServerWindow(int(match.group(1)), "Ollama /api/show num_ctx")
    info = body.get("model_info")
    if not isinstance(info, dict):
        return None
    trained = next(
        (v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)), None
    )
    if trained is None:
        return None
    return ServerWindow(
        min(trained, OLLAMA_DEFAULT_NUM_CTX),
        "Ollama /api/show (num_ctx not set)",
        f"the model could take {trained:,}, but Ollama cuts prompts at its default num_ctx "
        f"unless it is set (Modelfile PARAMETER num_ctx, or OLLAMA_CONTEXT_LENGTH)",
    )


async def server_window(base_url: str, model: str) -> ServerWindow | None:
    """The window the server at `base_url` reports for `model`, or None if it does not say."""
    root = _root(base_url)
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        found = _from_props(await _get_json(session, "GET", f"{root}/props"))
        if found is None:
            models = await _get_json(session, "GET", f"{base_url.rstrip('/')}/models")
            found = _from_models(models, model)
        if found is None:
            show = await _get_json(session, "POST", f"{root}/api/show", json={"model": model})
            found = _from_ollama(show)
    return found
