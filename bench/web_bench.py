"""Another person's answers while one person's turns read huge, slow pages (issue 34).

    python bench/web_bench.py [--samples 40]

The real agent (its openai client against the fake model, read_page's aiohttp client against
the fake page server, both on 127.0.0.1). Person A's turns call read_page on a 50 MB HTML page
sent slowly (cut at [web] max_page_bytes, 2 MB, then made text by trafilatura in a media
thread) and on a 50 MB text page, one after another, for as long as B talks. Person B's
turns are plain. Printed: B's answer time alone and beside A's reading (median, slowest), A's
pages read meanwhile, and what a turn with a search costs against one without (the prompt
tokens the model was sent). Goal: B's slowest beside A within 0.5 s of B's slowest alone
(exit 1 if not).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bot.agent.agent import Agent  # noqa: E402
from bot.config import load_config  # noqa: E402
from memory.tokens import TokenEstimator  # noqa: E402
from tests.rigs.agent import ask, dm  # noqa: E402
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, tool_call  # noqa: E402
from tests.rigs.fakes.web_server import Site  # noqa: E402

GOAL_S = 0.5


def model(request: dict[str, Any]) -> dict[str, Any]:
    """A reads the page its message names (once per turn); everyone else is answered at once."""
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "user" and "READ " in str(last["content"]):
        url = str(last["content"]).split("READ ", 1)[1].split()[0]
        return completion(None, [tool_call("read_page", {"url": url})])
    if last["role"] == "user" and "SEARCH" in str(last["content"]):
        return completion(None, [tool_call("web_search", {"query": "lisbon weather"})])
    return completion("ok")


def agent_for(folder: Path, fake: FakeOpenAI, site: Site) -> Agent:
    path = folder / "config.toml"
    path.write_text(
        f'[llm]\nbase_url = "{fake.base_url}"\napi_key = "sk-test"\nmodel = "fake-model"\n'
        "max_retries = 0\ncontext_window_tokens = 50000\nmax_output_tokens = 2048\n"
        f"[memory]\nworkspaces_dir = {json.dumps(str(folder / 'workspaces'))}\n"
        "[tools]\nweb_search = true\nread_page = true\n"
        f'[web]\nsearxng_url = "{site.base}"\ntimeout_s = 60\n'
        f'allow_hosts = ["127.0.0.1:{site.port}"]\n'
        "[limits]\noutside_calls_per_hour = 0\n"
    )
    return Agent(load_config(path, env={}))


async def b_times(agent: Agent, samples: int) -> list[float]:
    times = []
    for n in range(samples):
        started = time.perf_counter()
        await ask(agent, dm("2", f"hello {n}"))
        times.append(time.perf_counter() - started)
        await asyncio.sleep(0.2)  # spread over several of A's pages
    return times


async def main(samples: int) -> int:
    fake = await FakeOpenAI().start()
    site = await Site().start()
    fake.default = model
    with tempfile.TemporaryDirectory() as tmp:
        agent = agent_for(Path(tmp), fake, site)
        try:
            await ask(agent, dm("2", "warm up"))
            alone = await b_times(agent, samples)
            done = asyncio.Event()
            pages = 0

            async def reader() -> None:
                nonlocal pages
                urls = [f"{site.base}/big.html", f"{site.base}/big.txt"]
                while not done.is_set():
                    await ask(agent, dm("1", f"READ {urls[pages % 2]} please"))
                    pages += 1

            reading = asyncio.create_task(reader())
            await asyncio.sleep(1.0)  # A's first page under way
            beside = await b_times(agent, samples)
            done.set()
            await reading
            cost = await search_cost(agent, fake)
        finally:
            await agent.aclose()
    await site.stop()
    await fake.stop()
    worst = max(beside) - max(alone)
    for name, times in (("B alone:    ", alone), ("B beside A: ", beside)):
        median, slowest = statistics.median(times) * 1000, max(times) * 1000
        print(f"{name} median {median:6.1f} ms, slowest {slowest:6.1f} ms")
    print(f"A's pages read meanwhile: {pages}; B's slowest added: {worst * 1000:.0f} ms (goal 500)")
    print(cost)
    return 0 if worst <= GOAL_S else 1


async def search_cost(agent: Agent, fake: FakeOpenAI) -> str:
    """The prompt tokens of a turn with a search (two requests) against one without."""
    estimator = TokenEstimator()
    fake.requests.clear()
    await ask(agent, dm("3", "hello"))
    plain = [
        estimator.count_text(json.dumps(r["messages"]) + json.dumps(r.get("tools")))
        for r in fake.requests
    ]
    fake.requests.clear()
    await ask(agent, dm("4", "SEARCH the weather"))
    searched = [
        estimator.count_text(json.dumps(r["messages"]) + json.dumps(r.get("tools")))
        for r in fake.requests
    ]
    return (
        f"A turn without a search: {len(plain)} request, {sum(plain):,} prompt tokens; with one: "
        f"{len(searched)} requests, {sum(searched):,} tokens ({' + '.join(map(str, searched))})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40)
    sys.exit(asyncio.run(main(parser.parse_args().samples)))
