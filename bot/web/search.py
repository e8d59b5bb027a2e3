"""Web search through the backend the operator chose ([web] search): SearXNG's JSON API (a
self-hosted metasearch), the Brave Search API (a key), or ddgs (no key: an optional package).

Only the query leaves the machine, never who asked: it is logged without the person's key.
The backend's URL is the operator's own choice (a SearXNG on the local network is usual), so
it is not held to read_page's refusal of private addresses. Results come back as title, URL
and snippet, at most [web] max_results, each field cut to a few hundred characters.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from html import unescape
from html.parser import HTMLParser
from typing import Any

import aiohttp

from bot.config import WebConfig
from bot.media.threads import off_loop

log = logging.getLogger(__name__)

MAX_TITLE = 200
MAX_URL = 500
MAX_SNIPPET = 400


class SearchError(Exception):
    """The search failed; the message says why, for the model to pass on."""


@dataclass(frozen=True)
class Result:
    title: str
    url: str
    snippet: str


async def search(query: str, web: WebConfig) -> list[Result]:
    """The best results for `query` from the configured backend (SearchError if it fails)."""
    log.info("web search via %s: %r", web.search, query[:200])  # no person named: see above
    try:
        async with asyncio.timeout(web.timeout_s):
            if web.search == "brave":
                raw = await _brave(query, web)
            elif web.search == "ddgs":
                raw = await _ddgs(query, web)
            else:
                raw = await _searxng(query, web)
    except TimeoutError:
        raise SearchError(f"the search engine did not answer within {web.timeout_s:g} s") from None
    return [r for r in (_result(item) for item in raw) if r.url][: web.max_results]


async def _searxng(query: str, web: WebConfig) -> list[tuple[Any, Any, Any]]:
    if not web.searxng_url:
        raise SearchError("web search is not set up ([web] searxng_url is empty)")
    url = web.searxng_url.rstrip("/") + "/search"
    data = await _get_json(url, {"q": query, "format": "json"}, {})
    items = data.get("results") if isinstance(data, dict) else None
    return [(i.get("title"), i.get("url"), i.get("content")) for i in _dicts(items)]


async def _brave(query: str, web: WebConfig) -> list[tuple[Any, Any, Any]]:
    if not web.brave_api_key:
        raise SearchError("web search is not set up (no Brave API key: BRAVE_API_KEY)")
    headers = {"X-Subscription-Token": web.brave_api_key, "Accept": "application/json"}
    params = {"q": query, "count": str(web.max_results)}
    data = await _get_json(web.brave_url, params, headers)
    found = data.get("web") if isinstance(data, dict) else None
    items = found.get("results") if isinstance(found, dict) else None
    return [(i.get("title"), i.get("url"), i.get("description")) for i in _dicts(items)]


async def _ddgs(query: str, web: WebConfig) -> list[tuple[Any, Any, Any]]:
    try:
        from ddgs import DDGS  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise SearchError(
            'web search is not set up ([web] search = "ddgs" needs the ddgs package: '
            "pip install 'lightgrep[ddgs]')"
        ) from None

    def ask() -> list[dict[str, Any]]:
        found = DDGS(timeout=int(web.timeout_s)).text(query, max_results=web.max_results)
        return list(found or [])

    try:
        items = await off_loop(ask)
    except Exception as exc:  # its engines' failures are many and change: one sentence
        log.info("ddgs search failed: %s", type(exc).__name__)
        raise SearchError("the search engines did not answer") from None
    return [(i.get("title"), i.get("href"), i.get("body")) for i in _dicts(items)]


async def _get_json(url: str, params: dict[str, str], headers: dict[str, str]) -> Any:
    try:
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.get(url, params=params, headers=headers) as response,
        ):
            if response.status != 200:
                raise SearchError(f"the search engine answered HTTP {response.status}")
            body = await response.content.read(2_000_000)
    except aiohttp.ClientError as exc:
        why = type(exc).__name__
        raise SearchError(f"the search engine could not be reached ({why})") from None

    try:
        return json.loads(body)
    except ValueError:
        raise SearchError("the search engine's answer was not JSON") from None


def _dicts(items: Any) -> list[dict[str, Any]]:
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _result(item: tuple[Any, Any, Any]) -> Result:
    title, url, snippet = (value if isinstance(value, str) else "" for value in item)
    if not url.startswith(("http://", "https://")):
        url = ""
    return Result(_plain(title)[:MAX_TITLE], url[:MAX_URL], _plain(snippet)[:MAX_SNIPPET])


class _Text(HTMLParser):
    """The words of a snippet whose engine marked matches up (<strong>, <b>)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def _plain(text: str) -> str:
    parser = _Text()
    parser.feed(text)
    parser.close()
    return " ".join(unescape("".join(parser.parts)).split())
