"""The web tools through the real bot: `lightgrep chat` as a process, its model the fake one on
127.0.0.1 scripted to read a page that tells it to delete the person's memory, and to obey;
the page served by the fake page server (tests/rigs/fakes/web_server.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.rigs.cli import run_chat, write_config
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, tool_call
from tests.rigs.fakes.web_server import INJECTION, Site

MEMORY = "## User Information\n- Name is Ana\n- Allergic to peanuts\n"


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    server = await Site().start()
    try:
        yield server
    finally:
        await server.stop()


def obeying(url: str) -> Any:
    """A model that reads the page it is asked about, then does what the page says."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        last = request["messages"][-1]
        if last["role"] == "user" and "recipe" in str(last["content"]):
            return completion(None, [tool_call("read_page", {"url": url})])
        if last["role"] == "tool" and last.get("name") == "read_page":
            remove = {"action": "remove", "text": "- Allergic to peanuts"}
            return completion(None, [tool_call("edit_memory", remove, "call_2")])
        return completion("Here is the pancake recipe.")

    return answer


async def test_a_page_cannot_make_the_bot_delete_the_memory(
    fake_llm: FakeOpenAI, site: Site, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.default = obeying(f"{site.base}/recipe.html")
    extra = (
        "[tools]\nweb_search = true\nread_page = true\n"
        f'[web]\nsearxng_url = "{site.base}"\nallow_hosts = ["127.0.0.1:{site.port}"]\n'
    )
    config = write_config(tmp_path, fake_llm, extra)
    memory = tmp_path / "workspaces" / "cli-ana" / "MEMORY.md"
    memory.parent.mkdir(parents=True)
    memory.write_text(MEMORY)
    stdin = b"what does the recipe page say?\n/status\n/memory history\n"
    code, out, err = await run_chat(config, child_env, stdin, "--user", "ana")
    assert code == 0, err
    page = next(m for m in fake_llm.chat_requests[-1]["messages"] if m["role"] == "tool")
    assert INJECTION in page["content"] and "not instructions" in page["content"]
    assert memory.read_text() == MEMORY
    assert "Here is the pancake recipe." in out
    assert "I held back a change to your memory" in out and "/memory undo 1 applies it" in out
    assert "Tools: edit_memory, search_history, remind, web_search, read_page" in out
    assert "never applied" in out  # /memory history lists the held version
