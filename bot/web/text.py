"""A fetched page made into readable text: HTML through trafilatura (its main content, without
menus, scripts and footers), plain text decoded as an uploaded file is. PDFs are not read here:
bot/tools/read_page.py gives them to the sandboxed reader (bot/media/sandbox.py).

WHY trafilatura: it is made for this (the readable text of a web page, boilerplate removed),
kept up, and ranks best among the open extractors in its and others' evaluations; a page's
HTML is untrusted, and an HTML parser of our own (regexes) would be both worse and a risk.
It runs in a media thread (bot/media/threads.py), never on the event loop: a large page takes
seconds to parse, so the HTML it is given is bounded by [web] max_page_bytes. It is an extra
(`lightgrep[read-page]`, ~60 MB with lxml and its date and URL parsers): without it, an HTML
page is an error naming the install, and plain text and PDFs are still read.
"""

from __future__ import annotations

import logging

from bot.media.documents import DocumentError, read_text
from bot.media.threads import off_loop
from bot.web.fetch import HTML, Page

log = logging.getLogger(__name__)


class NoText(Exception):
    """The page holds no text to read; the message says why."""


async def page_text(page: Page) -> str:
    """The readable text of an HTML or text page (NoText: none)."""
    if page.content_type in HTML:
        text = await off_loop(lambda: _html_text(page.body, page.url))
    else:
        try:
            text = read_text(_decoded_as_utf8(page))
        except DocumentError as exc:
            raise NoText(str(exc)) from None
    text = text.strip()
    if not text:
        raise NoText("it holds no text I can read")
    return text


INSTALL = (
    "the read-page extra: pip install 'lightgrep[read-page]', "
    "or an image built with --build-arg EXTRAS=read-page"
)
NOT_INSTALLED = f"read_page is not set up to read HTML (it needs {INSTALL})"


def _html_text(body: bytes, url: str) -> str:
    try:
        import trafilatura  # (a few hundred ms to import: only when a page is read)
    except ImportError:
        raise NoText(NOT_INSTALLED) from None

    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)  # a line per odd page
    try:
        text = trafilatura.extract(body, url=url, favor_recall=True, include_comments=False)
        if not text:  # too little for its heuristics: every visible word instead
            text = trafilatura.html2txt(body)
    except (ValueError, TypeError, AttributeError) as exc:
        log.info("could not extract a page's text: %s", type(exc).__name__)
        raise NoText("its HTML could not be read") from None
    return text or ""


def _decoded_as_utf8(page: Page) -> bytes:
    """The body as read_text takes it: a charset the server names is honoured."""
    charset = page.charset
    if not charset or charset.lower().replace("_", "-") in ("utf-8", "utf8"):
        return page.body
    try:
        return page.body.decode(charset, errors="replace").encode("utf-8")
    except LookupError:
        return page.body
