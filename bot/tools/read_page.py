"""`read_page`: the model reads a web page (a link the person gave or a search returned):
fetched within [web]'s limits and never from the host's own network (bot/web/fetch.py), HTML
made readable text (bot/web/text.py), a PDF read by the sandboxed reader the uploads use
(bot/media/sandbox.py, within the person's reading budget), and the text cut to the share of
the window a tool result may take. Off by default: the URL is fetched from the bot's machine.

A tool reaching outside: the toolbox counts its calls, marks what it returns as data and holds
the turn's memory edits (bot/tools/toolbox.py).
"""

from __future__ import annotations

import logging

from bot.media.documents import DocumentError
from bot.tools.tool import Arguments, Offer, Tool, ToolTurn, string_schema
from bot.tools.web_search import WEB
from bot.web.addresses import Allowed
from bot.web.fetch import PDF, Limits, PageError, fetch
from bot.web.text import NoText, page_text

log = logging.getLogger(__name__)

RESULT_SHARE = 8  # a page's text takes at most this fraction of the prompt's tokens…
CHARS_PER_TOKEN = 3  # …counted at this many characters a token (few: text of any language)
MAX_URL = 2000

FULL = Offer(
    string_schema(
        "read_page",
        "Read the text of a web page or PDF at an http(s) link the person gave or a search "
        "returned.",
        "url",
    ),
    "- To read a link (one the person gave, or a search result), call `read_page`.",
)
COMPACT = Offer(string_schema("read_page", "Read a web page.", "url"), "`read_page` reads a link")


def max_chars(turn: ToolTurn) -> int:
    """The most of a page's text a result carries: [web] max_page_chars, and no more than
    its share of the prompt (a small window gets a short page)."""
    share = turn.outside.prompt_tokens // RESULT_SHARE * CHARS_PER_TOKEN if turn.outside else 0
    return max(500, min(turn.config.web.max_page_chars, share or turn.config.web.max_page_chars))


async def run(turn: ToolTurn, args: Arguments) -> str:
    """The page's text with where it was found; errors are results too ("Error: …")."""
    url = args.get("url")
    if not isinstance(url, str) or not url.strip():
        return "Error: `url` must be a non-empty string."
    url = url.strip()[:MAX_URL]
    web = turn.config.web
    limits = Limits(
        timeout_s=web.timeout_s,
        max_bytes=web.max_page_bytes,
        max_pdf_bytes=turn.config.media.max_pdf_bytes,
        max_redirects=web.max_redirects,
        allowed=Allowed.of(web.allow_hosts, web.allow_networks),
    )
    try:
        page = await fetch(url, limits)
    except PageError as exc:
        log.info("read_page refused or failed: %s", exc)
        return f"Error: I could not read {url}: {exc}."
    budget = max_chars(turn)
    try:
        if page.content_type == PDF:
            text, kind = await _pdf(turn, page.body, budget)
        else:
            text, kind = await page_text(page), page.content_type
    except (NoText, DocumentError) as exc:
        return f"Error: I could not read {page.url}: {exc}."
    note = ""
    if len(text) > budget:
        note = f" (cut: the first {budget:,} of {len(text):,} characters)"
        text = text[:budget]
    elif page.cut:
        note = f" (cut: only its first {len(page.body):,} bytes were read)"
    return f"Page {page.url} ({kind}){note}:\n{text}"


async def _pdf(turn: ToolTurn, body: bytes, budget: int) -> tuple[str, str]:
    assert turn.outside is not None  # (not offered without it)
    pdf = await turn.outside.pdfs.read(body, budget + 1, turn.workspace.user_key)
    if not pdf.text.strip():
        raise NoText("it is a PDF with no text I can read (a scan is only pictures)")
    return pdf.text, f"PDF, {pdf.pages} page{'s' * (pdf.pages != 1)}"


READ_PAGE = Tool(
    name="read_page",
    reaches=(WEB,),
    enabled=lambda config: config.tools.read_page,
    run=run,
    full=FULL,
    compact=COMPACT,
    public=FULL,  # in a group only when [tools] web_in_groups says so (in_groups)
    public_compact=Offer(COMPACT.schema),
    in_groups=lambda config: config.tools.web_in_groups,
)
