"""One page fetched for the model, within limits: time, size, redirects, content types, and
never from the host's own network (bot/web/addresses.py).

Each hop of a redirect chain is a request of its own: its URL checked (http or https, no
user:password), its host resolved and every address checked, then the connection made to
those addresses only (`_Pinned`: aiohttp asks it, and it answers nothing else). Redirects are
followed by hand, at most `max_redirects`. The body is read up to `max_bytes` (decompressed:
gzip and deflate are inflated within the same bound), the rest left unread (a PDF, which cannot
be read in part, up to `max_pdf_bytes`, or refused); the whole fetch,
every hop and the body together, stops at `timeout_s`. No proxy from the environment is used.
"""

from __future__ import annotations

import asyncio
import socket
import zlib
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from bot.web.addresses import Allowed, RefusedAddress, Resolved, resolve_checked

REDIRECTS = (301, 302, 303, 307, 308)
HTML = ("text/html", "application/xhtml+xml")
PDF = "application/pdf"
TEXT = (
    "text/plain",
    "text/markdown",
    "text/csv",
    "application/json",
    "text/xml",
    "application/xml",
)
TYPES = (*HTML, PDF, *TEXT)
USER_AGENT = "LightGrep/0.1 (a chat bot reading a page a person asked about)"
ACCEPT = "text/html, application/xhtml+xml, text/plain, application/pdf;q=0.9, */*;q=0.1"
CHUNK = 64 * 1024


class PageError(Exception):
    """The page could not be had; the message says why, in words for the model to pass on."""


@dataclass(frozen=True)
class Limits:
    """What one fetch may take."""

    timeout_s: float
    max_bytes: int  # of an HTML or text page: more is cut
    max_pdf_bytes: int  # of a PDF: more is refused (a cut PDF cannot be read)
    max_redirects: int
    allowed: Allowed


@dataclass(frozen=True)
class Page:
    url: str  # where it was found, after the redirects
    content_type: str  # "text/html", … (one of TYPES)
    charset: str | None
    body: bytes
    cut: bool  # longer than max_bytes: the rest was not read


async def fetch(url: str, limits: Limits) -> Page:
    """The page at `url` (PageError: refused, failed, too slow, of a type not read)."""
    try:
        async with asyncio.timeout(limits.timeout_s):
            return await _follow(url, limits)
    except TimeoutError:
        raise PageError(f"the page took longer than {limits.timeout_s:g} s, so I stopped") from None


async def _follow(url: str, limits: Limits) -> Page:
    for _ in range(limits.max_redirects + 1):
        target = await _checked(url, limits.allowed)
        page, location = await _get(url, target, limits)
        if page is not None:
            return page
        url = urljoin(url, location)
    raise PageError(f"the page redirected more than {limits.max_redirects} times")


async def _checked(url: str, allowed: Allowed) -> Resolved:
    """The URL's host, resolved and checked (PageError if refused)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise PageError("only http and https addresses can be read")
    if parts.username is not None or parts.password is not None:
        raise PageError("addresses with a user name or password are not read")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise PageError("the address has an invalid port") from None
    if not parts.hostname:
        raise PageError("the address names no host")
    try:
        return await resolve_checked(parts.hostname, port, allowed)
    except RefusedAddress as exc:
        raise PageError(f"refused: {exc}") from None


async def _get(url: str, target: Resolved, limits: Limits) -> tuple[Page | None, str]:
    """One hop: the page, or (None, where it redirects to)."""
    connector = aiohttp.TCPConnector(resolver=_Pinned(target), use_dns_cache=False, limit=1)
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate", "Accept": ACCEPT}
    try:
        async with (
            aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=False) as s,
            s.get(url, headers=headers, allow_redirects=False) as response,
        ):
            if response.status in REDIRECTS:
                location = response.headers.get("Location")
                if not location:
                    raise PageError(f"the page answered HTTP {response.status} without a Location")
                return None, location
            if response.status >= 400:
                raise PageError(f"the page answered HTTP {response.status}")
            kind = response.content_type.lower()
            if kind not in TYPES:
                raise PageError(f"it is {kind or 'of no stated type'}, which I don't read")
            if kind == PDF:
                if (response.content_length or 0) > limits.max_pdf_bytes:
                    raise PageError(f"it is a PDF larger than {limits.max_pdf_bytes:,} bytes")
                body, cut = await _body(response, limits.max_pdf_bytes)
                if cut:
                    raise PageError(f"it is a PDF larger than {limits.max_pdf_bytes:,} bytes")
            else:
                body, cut = await _body(response, limits.max_bytes)
            return Page(str(response.url), kind, response.charset, body, cut), ""
    except (aiohttp.ClientError, OSError) as exc:
        raise PageError(f"the page could not be fetched ({type(exc).__name__})") from None


async def _body(response: aiohttp.ClientResponse, max_bytes: int) -> tuple[bytes, bool]:
    """Up to `max_bytes` of the body, inflated; and whether there was more."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
        raise PageError(f"it came encoded as {encoding!r}, which I don't read")
    inflate = (
        None
        if encoding in ("identity", "")
        else zlib.decompressobj(zlib.MAX_WBITS | 32 if "gzip" in encoding else zlib.MAX_WBITS)
    )
    out = bytearray()
    async for chunk in response.content.iter_chunked(CHUNK):
        if inflate is not None:
            try:
                chunk = inflate.decompress(chunk, max_bytes + 1 - len(out))
            except zlib.error:
                raise PageError("its compressed body is damaged") from None
        out += chunk
        if len(out) > max_bytes:
            return bytes(out[:max_bytes]), True
    return bytes(out), False


class _Pinned(AbstractResolver):
    """Answers for the checked host with its checked addresses, and for nothing else: the
    connection cannot go anywhere a second resolution would say."""

    def __init__(self, target: Resolved) -> None:
        self._target = target

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host.strip("[]").lower() != self._target.host.strip("[]").lower():
            raise OSError(f"{host} was not checked")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=fam,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for fam, address in self._target.addresses
            if family in (socket.AF_UNSPEC, fam)
        ] or _none(host)

    async def close(self) -> None:
        return None


def _none(host: str) -> list[ResolveResult]:
    raise OSError(f"{host} has no checked address of that family")
