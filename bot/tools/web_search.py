"""`web_search`: the model looks something up on the web through the operator's search backend
([web] search, bot/web/search.py). Off by default: the query leaves the machine.

A tool reaching outside (its `Reach` is not the person's own): the toolbox counts its calls,
marks what it returns as data and holds the turn's memory edits (bot/tools/toolbox.py).
"""

from __future__ import annotations

from bot.tools.tool import Arguments, Offer, Reach, Tool, ToolTurn, string_schema
from bot.web.search import SearchError, search

WEB = Reach("the web", own=False)
MAX_QUERY = 300

FULL = Offer(
    string_schema(
        "web_search",
        "Search the web for current facts and news you do not know: a few keywords. Gives "
        "titles, links and snippets; read_page reads a link.",
        "query",
    ),
    "- For current facts or news you do not know, call `web_search` with a few keywords.",
)
COMPACT = Offer(
    string_schema("web_search", "Search the web.", "query"), "`web_search` searches the web"
)


async def run(turn: ToolTurn, args: Arguments) -> str:
    """The results as a numbered list; errors are results too ("Error: …")."""
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return "Error: `query` must be a non-empty string."
    query = " ".join(query.split())[:MAX_QUERY]
    try:
        results = await search(query, turn.config.web)
    except SearchError as exc:
        return f"Error: {exc}."
    if not results:
        return f"No web results for {query!r}."
    lines = [f"Web results for {query!r}:"]
    for n, result in enumerate(results, 1):
        lines.append(f"{n}. {result.title or '(no title)'}\n   {result.url}")
        if result.snippet:
            lines.append(f"   {result.snippet}")
    return "\n".join(lines)


WEB_SEARCH = Tool(
    name="web_search",
    reaches=(WEB,),
    enabled=lambda config: config.tools.web_search,
    run=run,
    full=FULL,
    compact=COMPACT,
    public=FULL,  # in a group only when [tools] web_in_groups says so (in_groups)
    public_compact=Offer(COMPACT.schema),
    in_groups=lambda config: config.tools.web_in_groups,
)
