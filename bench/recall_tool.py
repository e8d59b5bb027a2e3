"""The search tool as the model calls it: does the tool's answer hold the entry asked about?

For every question of bench/recall_table.py's sets (life, eval, talk, friends), a real Agent,
with its real openai client, talks to the fake provider (tests/rigs/fakes/openai_server.py), which
is scripted the way the tool's description and the system prompt tell a model to ask: one
`search_history` call with the question's dates as said and its keywords (filler words
dropped; names, numbers and rare words kept), then an answer. What the tool returned (the tool
message of the provider's second request) is checked for the entry meant. The clock is each
set's "now", so "last week" means what it meant when the set was asked.

Run: python bench/recall_tool.py [tune|held|all]   (about a minute)
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import recall_life  # noqa: E402
import recall_table  # noqa: E402

from memory import clock  # noqa: E402
from memory.search.dates import extract_dates  # noqa: E402
from tests.rigs.agent import ask, dm, make_agent  # noqa: E402
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, tool_call  # noqa: E402


def keywords(question: str, s: recall_table.EvalSet) -> str:
    """What the tool's description asks a model to send: the dates of the question as said
    ("in March", "last week"), then its names, numbers and other words, filler dropped."""
    rest, spans = extract_dates(question, s.now)
    words = recall_life.keywords(rest)
    return " ".join([span.label for span in spans] + words) or question


async def run_set(s: recall_table.EvalSet, folder: Path, part: str) -> tuple[int, int, int]:
    """(questions, answers holding the entry meant, answers with no entry at all)."""
    llm = await FakeOpenAI().start()
    agent = make_agent(llm, folder / s.name, window=50_000_000)
    real_now = clock.now
    clock.now = lambda: s.now  # type: ignore[assignment]
    try:
        history = agent.workspaces.get("telegram-1").history_path
        history.parent.mkdir(parents=True, exist_ok=True)
        history.write_text("\n\n".join(s.entries) + "\n", encoding="utf-8")
        found = empty = 0
        questions = recall_table.half(s.questions, part)
        for q in questions:
            query = keywords(q.text, s)
            llm.requests.clear()
            llm.queue(
                completion(None, [tool_call("search_history", {"query": query})]),
                completion("Here is what I found."),
            )
            await ask(agent, dm("1", q.text))
            # this turn's tool answer: the last tool message of the provider's second request
            result = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"][-1]
            found += f"[{q.target}]" in result["content"]
            empty += result["content"].startswith("No entry")
        return len(questions), found, empty
    finally:
        clock.now = real_now  # type: ignore[assignment]
        await agent.aclose()
        await llm.stop()


async def main() -> None:
    part = sys.argv[1] if len(sys.argv) > 1 else "held"
    print(f"search_history as the fake model calls it, {part} half: the entry meant in the answer")
    with tempfile.TemporaryDirectory(prefix="lightgrep-tool-") as tmp:
        folder = Path(tmp)
        for s in recall_table.load_sets(folder):
            n, found, empty = await run_set(s, folder, part)
            print(f"  {s.name:5} {n:4d} questions: {found / n:6.1%} found, {empty / n:5.1%} none")


if __name__ == "__main__":
    asyncio.run(main())
