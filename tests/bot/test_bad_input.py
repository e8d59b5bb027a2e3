"""Bad input, property-based: whatever a user types or a platform sends, the core answers clearly,
keeps the message intact (or refuses it, saying so), and never writes outside the workspaces folder.

The hypothesis tests run synchronously and drive the async core on one event loop
(asyncio.Runner) so that one agent and one fake provider serve every example.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bot.agent.agent import Agent
from bot.config import Config
from bot.inbound import Inbound
from bot.keys import session_key, user_key
from bot.outbound import Reply
from bot.reminders.desk import PersonReminders, ReminderBook
from bot.tools.tool import ToolTurn
from bot.tools.toolbox import TOOLS, Toolbox
from bot.usage import GLOBAL_USAGE_FILE
from memory.keys import decode_key, encode_key, is_hashed_name
from memory.session import SessionStore
from memory.workspace import Workspaces
from tests.rigs.agent import ask, dm, make_agent
from tests.rigs.fakes.openai_server import FakeOpenAI, Status, completion, tool_call

ANSWER = "fine, noted"
RECALL_PREFIXES = (
    "History entries matching",
    "Your history matching",
    "Your own messages matching",
    "No match for",
    "There is no page",
    "I can't search for that:",
    "Tell me what to look for",
    "`--page` needs",  # --page 0: a clear error, not page 1 in silence
)
# Characters that have broken chat bots before: controls, NUL, bidi overrides, zero-width joiners,
# line separators JSON leaves unescaped, a model's special token, emoji with modifiers.
NASTY = [
    "\x00",
    "\x1b[31m",
    "\r\n",
    "\u2028",
    "\u2029",
    "\x85",
    "\u202e",
    "\u200d",
    "\ufeff",
    "<|endoftext|>",
    "<|im_start|>system",
    "👩🏽‍💻",
    "مرحبا",
    "\\",
    '"',
    "\n\n[2020-01-01 00:00] forged entry",
    '{"_type": "metadata"}',
]
nasty_text = st.lists(
    st.one_of(st.sampled_from(NASTY), st.text(st.characters(exclude_categories=())), st.text()),
    max_size=6,
).map("".join)

REGEX_PIECES = ["(", ")", "[", "]", "{2,}", "*", "+", "?", "|", "^", "$", "\\", ".", "(?i)", "\\b"]
regexish = st.lists(st.one_of(st.sampled_from(REGEX_PIECES), st.text(max_size=4)), max_size=8).map(
    "".join
)


SPLIT_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


@contextmanager
def running(workspaces: Path, window: int = 50_000) -> Iterator[tuple[asyncio.Runner, Agent]]:
    """An agent against a fake provider, on an event loop that lives for the whole test."""
    with asyncio.Runner() as runner:
        fake = runner.run(FakeOpenAI().start())
        fake.default = lambda request: completion(ANSWER)
        agent = make_agent(fake, workspaces, window=window)
        agent.fake = fake  # type: ignore[attr-defined]
        try:
            yield runner, agent
        finally:
            runner.run(agent.aclose())
            runner.run(fake.stop())


def valid_unicode(text: str) -> str:
    """What survives as text: lone surrogates (which UTF-8 cannot hold) become U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def files_under(folder: Path) -> list[Path]:
    return [Path(root) / name for root, dirs, files in os.walk(folder) for name in dirs + files]


HISTORY_ENTRIES = [
    "Ada adopted a cat called Miso (a tabby).",
    "Ada said: use regex like ^a.*b$ and [x-z]+ in grep; price $5.00?",
    "Ada's notes: C:\\path\\to\\file and (nested (parens)) and ***stars***",
    "Unicode: naïve café, Straße, İstanbul, 東京, emoji 🐈, RTL \u202eabc",
    "A\x00NUL and \x1b[31mescape and <|endoftext|> inside an entry",
]


# ---- /recall and search_history -------------------------------------------------------------


def test_recall_never_crashes_and_always_answers_clearly(tmp_path: Path) -> None:
    with running(tmp_path / "ws") as (runner, agent):
        memory = agent.workspaces.get(user_key("telegram", "1")).memory
        for entry in HISTORY_ENTRIES * 3:
            memory.append_history(entry)

        @settings(max_examples=120, deadline=None)
        @given(
            query=st.one_of(nasty_text, regexish),
            regex=st.booleans(),
            page=st.sampled_from(["", "--page 2 ", "--page 0 ", "--page 99999999999999999999 "]),
        )
        @example(query="(a+)+$", regex=True, page="")
        @example(query="(.*a){20}", regex=True, page="")
        @example(query="([a-", regex=True, page="")
        @example(query='"unclosed phrase', regex=False, page="")
        @example(query="\x00", regex=False, page="")
        @example(query="-r", regex=False, page="")
        def check(query: str, regex: bool, page: str) -> None:
            runs.append(query)
            flag = "--regex " if regex else ""
            started = time.monotonic()
            reply = runner.run(ask(agent, dm("1", f"/recall {page}{flag}{query}")))
            assert time.monotonic() - started < 2, "a search must not hang"
            assert isinstance(reply, Reply) and reply.private
            assert reply.text.startswith(RECALL_PREFIXES), reply.text

        runs: list[str] = []
        check()
        assert len(runs) >= 100
        assert agent.fake.requests == []  # type: ignore[attr-defined]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("pattern", [".*.*.*.*z", "(a+)+$", "(.*a){20}", "(a|aa)*c"])
def test_recall_answers_a_catastrophic_regex_promptly(tmp_path: Path, pattern: str) -> None:
    # A backtracking engine took 20+ s per entry on `.*.*.*.*z` here and froze every user; the
    # bound only guards against a hang.
    with running(tmp_path / "ws") as (runner, agent):
        memory = agent.workspaces.get(user_key("telegram", "1")).memory
        for _ in range(3):
            memory.append_history("a" * 236)  # with its stamp: a 255-character entry
        reply = runner.run(ask(agent, dm("1", f"/recall --regex {pattern}")))
        other = runner.run(ask(agent, dm("2", "/recall anything")))
    assert reply.private
    assert reply.text.startswith(("History entries matching", "No match for")), reply.text
    assert other.text.startswith("There is no history to search yet")  # B has none of A's
    assert agent.fake.requests == []  # type: ignore[attr-defined]


def test_search_history_tool_never_raises(tmp_path: Path) -> None:
    workspaces = Workspaces(tmp_path / "ws")
    workspace = workspaces.get("telegram-1")
    for entry in HISTORY_ENTRIES:
        workspace.memory.append_history(entry)
    book = ReminderBook(Config(), workspaces, lambda key: False)
    desk = PersonReminders(book, workspace, dm("1", "search"))
    tools = Toolbox(TOOLS, ToolTurn(workspace, desk, Config()))
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | nasty_text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=6,
    )
    arguments = st.one_of(
        st.fixed_dictionaries({"query": st.one_of(nasty_text, regexish), "regex": st.booleans()}),
        st.fixed_dictionaries({"query": json_values, "regex": json_values}),
        json_values.map(json.dumps),
        nasty_text,  # not JSON at all, or truncated
    )

    @settings(max_examples=120, deadline=None)
    @given(arguments=arguments, name=st.sampled_from(["search_history", "edit_memory", "rm -rf"]))
    @example(arguments={"query": "\ud800", "regex": False}, name="edit_memory")
    def check(arguments: Any, name: str) -> None:
        runs.append(name)
        if name == "edit_memory" and isinstance(arguments, dict):
            arguments = {"action": "add", "section": "Notes", "text": arguments.get("query")}
        result = asyncio.run(tools.execute(name, arguments))
        assert isinstance(result, str) and result

    runs: list[str] = []
    check()
    assert len(runs) >= 100
    # Whatever the model sent, MEMORY.md is still readable UTF-8 text.
    if workspace.memory_path.exists():
        workspace.memory_path.read_bytes().decode("utf-8")


# ---- message text ---------------------------------------------------------------------------


def test_any_message_text_is_persisted_intact_and_reloads(tmp_path: Path) -> None:
    base = tmp_path / "ws"
    sent: list[str] = []
    with running(base) as (runner, agent):
        fake = agent.fake  # type: ignore[attr-defined]

        @settings(max_examples=80, deadline=None)
        @given(text=nasty_text.filter(lambda t: not t.lstrip().startswith("/")))
        @example(text="a\ud800b\udfff")  # lone surrogates, as JSON "\ud800" decodes
        @example(text="\x00")
        @example(text="<|endoftext|>")
        @example(text="\u202eevil.exe\u202c 🐈‍⬛ " * 50)
        def check(text: str) -> None:
            before = len(fake.requests)
            reply = runner.run(ask(agent, dm("1", text)))
            if not text.strip():
                assert reply.text == "(That message was empty.)"
                assert len(fake.requests) == before
                return
            assert reply.text == ANSWER
            stored = valid_unicode(text)
            sent.append(stored)
            assert fake.requests[-1]["messages"][-1]["content"].endswith("\n" + stored)

        check()
    # A fresh process sees exactly the messages that were sent, in order, byte for byte.
    session = (
        Workspaces(base)
        .get(user_key("telegram", "1"))
        .sessions.get(session_key("telegram", "dm", "1"))
    )
    users = [m["content"] for m in session.messages if m["role"] == "user"]
    assert len(users) == len(sent)
    for content, text in zip(users, sent, strict=True):
        assert content == text  # stored as written: the time line is added when it is sent
    assistants = [m["content"] for m in session.messages if m["role"] == "assistant"]
    assert assistants == [ANSWER] * len(sent)


def test_the_session_store_reloads_any_text_intact(tmp_path: Path) -> None:
    """Below the agent too: any string, lone surrogates included, round-trips through the JSONL."""
    sessions_dir = tmp_path / "sessions"
    store = SessionStore(sessions_dir)
    session = store.get("telegram:dm:1")
    written: list[str] = []

    @settings(max_examples=100, deadline=None)
    # Not a high surrogate followed by a low one: that pair is one character in JSON, so no
    # decoder (nor a terminal's surrogateescape) can hand us the two halves as separate ones.
    @given(
        text=st.one_of(nasty_text, st.text(st.characters(categories=["Cs"]), min_size=1)).filter(
            lambda t: not SPLIT_PAIR.search(t)
        )
    )
    def check(text: str) -> None:
        store.append(session, {"role": "user", "content": text})
        written.append(text)

    check()
    reloaded = SessionStore(sessions_dir).get("telegram:dm:1")
    assert [m["content"] for m in reloaded.messages] == written
    assert any("\ud800" <= ch <= "\udfff" for text in written for ch in text)


def test_lone_surrogates_from_the_model_never_break_a_turn(tmp_path: Path) -> None:
    """A model can write "\\ud83d" in its JSON; the files and the next request stay valid."""
    base = tmp_path / "ws"
    args = '{"action": "add", "section": "Preferences", "text": "likes \\ud83d cats"}'
    body = completion(None, [tool_call("edit_memory", args)])
    with running(base) as (runner, agent):
        fake = agent.fake  # type: ignore[attr-defined]
        raw = json.dumps(completion("half an emoji: \ud83d!"))  # "\ud83d" as a JSON escape
        fake.queue(body, Status(200, raw))
        first = runner.run(ask(agent, dm("1", "remember I like cats")))
        second = runner.run(ask(agent, dm("1", "thanks")))
        requests = list(fake.requests)
    assert first.text == "half an emoji: \ufffd!" and second.text == ANSWER
    assert len(requests) == 3
    home = base / "telegram-1"
    assert "likes \ufffd cats" in (home / "MEMORY.md").read_bytes().decode("utf-8")
    session = Workspaces(base).get("telegram-1").sessions.get("telegram:dm:1")
    assert [m["role"] for m in session.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]


def test_a_hand_edited_session_with_a_lone_surrogate_does_not_poison_it(tmp_path: Path) -> None:
    """People may edit their files; a "\\udc80" escape in the JSONL must not fail every turn."""
    base = tmp_path / "ws"
    store = Workspaces(base).get("telegram-1").sessions
    session = store.get("telegram:dm:1")
    store.append(session, {"role": "user", "content": "caf\udce9 (edited by hand)"})
    store.append(session, {"role": "assistant", "content": "noted"})
    assert "\\udce9" in session.path.read_text("ascii")
    with running(base) as (runner, agent):
        reply = runner.run(ask(agent, dm("1", "still there?")))
        sent = agent.fake.requests[-1]["messages"]  # type: ignore[attr-defined]
    assert reply.text == ANSWER
    # Sent after the time line the prompt adds from the message's timestamp.
    assert sent[1]["content"].split("\n", 1)[1] == "caf\ufffd (edited by hand)"


def test_a_huge_message_is_refused_clearly_and_nothing_is_saved(tmp_path: Path) -> None:
    base = tmp_path / "ws"
    with running(base, window=8000) as (runner, agent):
        huge = ("lorem ipsum 🐈 \x00 <|endoftext|> " * 20_000)[:400_000]
        reply = runner.run(ask(agent, dm("1", huge)))
        ok = runner.run(ask(agent, dm("1", "a normal message")))
        assert agent.fake.requests[-1]["messages"][-1]["content"].endswith("a normal message")  # type: ignore[attr-defined]
        assert len(agent.fake.requests) == 1  # type: ignore[attr-defined]
    assert "too long" in reply.text and "Nothing was saved" in reply.text
    assert ok.text == ANSWER
    session_file = next(base.rglob("*.jsonl"))
    assert "lorem ipsum" not in session_file.read_text("utf-8")
    assert session_file.stat().st_size < 2000


# ---- platform ids ---------------------------------------------------------------------------

ODD_IDS = [
    "..",
    ".",
    "../..",
    "../../etc/passwd",
    "/",
    "/etc",
    "\x00",
    "a\x00b",
    "",
    " ",
    "-1001",
    "-42",
    "42",
    "~",
    "%2F",
    "%",
    "a/b",
    "a\\b",
    "C:",
    "CON",
    "ユーザー",
    "x" * 5000,
    "../" * 300,
    "é" * 300,
]
platform_id = st.one_of(
    st.sampled_from(ODD_IDS),
    st.integers(),
    st.text(max_size=40),  # not lone surrogates: see the report (bot.keys raises on them)
    st.text(alphabet="./\\%~-:\x00", max_size=300),
)


def check_tree(base: Path, outside: Path) -> None:
    """Everything lives in base/<one encoded folder>/… (but the bot's usage file); nothing beside
    base; no links."""
    assert sorted(p.name for p in outside.iterdir()) == [base.name]
    for path in files_under(base):
        assert not path.is_symlink()
        assert path.resolve().is_relative_to(base.resolve())
        top = path.relative_to(base).parts[0]
        if top == GLOBAL_USAGE_FILE:  # the bot's own file, a name no key encodes to
            continue
        assert top not in (".", "..") and (decode_key(top) is not None or is_hashed_name(top))


def test_platform_ids_never_escape_and_never_share_a_workspace(tmp_path: Path) -> None:
    outside = tmp_path / "outer"
    base = outside / "workspaces"
    workspaces = Workspaces(base)
    owners: dict[Path, str] = {}
    session_files: dict[Path, str] = {}

    @settings(max_examples=150, deadline=None)
    @given(platform=st.sampled_from(["telegram", "discord", "cli"]), raw=platform_id)
    def check(platform: str, raw: object) -> None:
        key = user_key(platform, raw)
        runs.append(key)
        workspace = workspaces.get(key)
        assert owners.setdefault(workspace.root.resolve(), key) == key, "two ids, one workspace"
        skey = session_key(platform, "group", raw, raw)
        session = workspace.sessions.get(skey)
        workspace.sessions.append(session, {"role": "user", "content": f"hi from {raw!r}"})
        assert session_files.setdefault(session.path.resolve(), skey) == skey
        assert workspace.root.parent.resolve() == base.resolve()
        assert workspace.sessions.keys().count(skey) == 1

    runs: list[str] = []
    check()
    assert len(runs) >= 100
    check_tree(base, outside)
    # Distinct keys always get distinct folder names, also when they are shortened.
    names = [encode_key(key) for key in owners.values()]
    assert len(set(names)) == len(names)
    assert all(len(name) <= 255 for name in names)


def test_odd_ids_through_the_agent_stay_inside_and_apart(tmp_path: Path) -> None:
    outside = tmp_path / "outer"
    base = outside / "workspaces"
    ids = ODD_IDS
    with running(base) as (runner, agent):
        for i, raw in enumerate(ids):
            inbound = Inbound(
                "telegram",
                session_key("telegram", "group", raw, raw),
                user_key("telegram", raw),
                f"secret number {i}",
                is_private=False,
            )
            assert runner.run(ask(agent, inbound)).text == ANSWER
            memory = runner.run(ask(agent, replace(inbound, text="/memory")))
            assert "secret number" not in memory.text
        requests = agent.fake.requests  # type: ignore[attr-defined]
    check_tree(base, outside)
    # Each id's conversation holds its own message and no other id's.
    for i, request in enumerate(requests):
        numbers = re.findall(r"secret number (\d+)", json.dumps(request["messages"]))
        assert numbers == [str(i)], (ids[i], numbers)
