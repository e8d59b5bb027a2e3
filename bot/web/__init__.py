"""Reaching past the person's memory: fetching a page (`fetch`) with the host's own network
refused (`addresses`), its text made readable (`text`), and the web search backends
(`search`). The tools that use them are bot/tools/read_page.py and bot/tools/web_search.py;
docs/web.md says what leaves the machine and what is refused."""

__all__ = ["addresses", "fetch", "search", "text"]
