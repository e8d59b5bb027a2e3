"""Memory control in the core: /memory undo and history, /forget, /export, /wipe, answered by the
real Agent (real files, the real openai client against the fake provider) through the reply port.
The platforms' side (buttons, documents, privacy in groups) is in test_memory_control_platforms."""

from __future__ import annotations

import asyncio
import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from bot.agent.agent import Agent
from bot.commands.confirm import Confirmations
from bot.usage import GLOBAL_USAGE_FILE
from memory.control.export import write_archive
from memory.control.forget import forget
from memory.session import SessionStore
from memory.workspace import Workspace, Workspaces
from tests.rigs.agent import ask, dm, group, make_agent, user_home
from tests.rigs.fakes.openai_server import (
    Delay,
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)
from tests.rigs.memory_control import MEMORY_WITH_SECRET, SECRET, all_bytes, files_holding, fill

# ---- the memory layer ----------------------------------------------------------------------


def test_forget_leaves_no_file_holding_the_phrase_and_keeps_the_rest(tmp_path: Path) -> None:
    workspace = Workspaces(tmp_path).get("telegram-42")
    fill(workspace)
    assert len(files_holding(workspace.root, SECRET)) >= 6

    removed = forget(workspace, "elm street")

    assert files_holding(workspace.root, SECRET) == []
    assert removed.memory_lines == ["- Lives at 12 elm street, Springfield"]
    assert len(removed.history_entries) == 2 and removed.versions == 2
    assert (removed.messages, removed.sessions) == (3, 1)
    assert removed.media == ["caption.txt", "note-elm-street.txt"]
    # What does not match stays, word for word.
    assert workspace.memory.read() == MEMORY_WITH_SECRET.replace(
        "- Lives at 12 elm street, Springfield\n", ""
    )
    assert "green tea in Kyoto" in workspace.history_path.read_text()
    assert (workspace.root / "media" / "tea.txt").exists()
    # The transcript reloads from disk as the session in memory now is; the cursor moved back by
    # the two consolidated messages removed.
    session = workspace.sessions.get("telegram:dm:42")
    store = SessionStore(workspace.sessions_dir)
    reloaded = store.get("telegram:dm:42")
    contents = [m["content"] for m in store.read_all(reloaded)]
    assert contents == ["What tea should I try?", "Sencha.", "Nice."]
    assert [m["content"] for m in workspace.sessions.read_all(session)] == contents
    assert session.messages == reloaded.messages and session.total == reloaded.total == 3
    assert reloaded.last_consolidated == session.last_consolidated == 2
    assert [m["content"] for m in reloaded.unconsolidated()] == ["Nice."]
    # Forgetting again finds nothing and changes nothing.
    before = all_bytes(workspace.root)
    assert forget(workspace, SECRET).total == 0
    assert all_bytes(workspace.root) == before


def test_forget_refuses_a_phrase_too_short_to_mean_anything(tmp_path: Path) -> None:
    from memory.control.forget import ForgetError

    workspace = Workspaces(tmp_path).get("telegram-42")
    fill(workspace)
    with pytest.raises(ForgetError):
        forget(workspace, " e  ")


def test_the_archive_unpacks_to_the_workspace_files(tmp_path: Path) -> None:
    workspace = Workspaces(tmp_path).get("telegram-42")
    fill(workspace)
    (workspace.root / ".MEMORY.md.abc.tmp").write_text("an interrupted write")
    buffer = io.BytesIO()
    info = write_archive(workspace.root, buffer)
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        archive.extractall(unpacked)
    expected = all_bytes(workspace.root)
    del expected[".MEMORY.md.abc.tmp"]
    assert all_bytes(unpacked / workspace.root.name) == expected
    assert info.files == len(expected) and "HISTORY.md" in expected
    assert any(name.startswith(".memory_versions/") for name in expected)


# ---- /memory history and /memory undo ------------------------------------------------------


async def test_undo_restores_exactly_the_previous_file_and_can_itself_be_undone(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    memory = agent.workspaces.get("telegram-42").memory
    first = "## Preferences\n\n- Likes green tea\n- Café ☕ every morning\n"
    second = "## Preferences\n\n- Likes coffee\n"
    memory.write(first)
    memory.write(second)

    listed = await ask(agent, dm("42", "/memory history"))
    assert listed.private
    assert "1. replaced" in listed.text and "UTC" in listed.text
    assert f"{len(first.encode()):,} bytes" in listed.text and "(+4 −0)" in listed.text

    undone = await ask(agent, dm("42", "/memory undo"))
    assert memory.memory_path.read_bytes() == first.encode()
    assert "-- Likes coffee" in undone.text
    assert "+- Likes green tea" in undone.text

    again = await ask(agent, dm("42", "/memory undo"))  # the undone text was kept: redo
    assert memory.memory_path.read_bytes() == second.encode()
    assert "Brought back version 1" in again.text
    assert "no version 9" in (await ask(agent, dm("42", "/memory undo 9"))).text
    await agent.aclose()


class LongestPause:
    """The longest time the event loop went without running a task of ours, measured by a
    ticker that asks to run every 10 ms: what another person's message would wait at least."""

    async def __aenter__(self) -> LongestPause:
        self.longest = 0.0
        self._last = asyncio.get_running_loop().time()
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        return self

    def _note(self) -> None:
        now = asyncio.get_running_loop().time()
        self.longest = max(self.longest, now - self._last - 0.01)
        self._last = now

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self._note()

    async def __aexit__(self, *exc: object) -> None:
        self._note()  # a block that ended just now: the ticker has not run since
        self._task.cancel()


def line_counts(diff: str) -> tuple[int, int]:
    """(+ lines, − lines) of a diff as the person reads it."""
    lines = [line for line in diff.splitlines() if not line.startswith("@@")]
    return sum(line.startswith("+") for line in lines), sum(line.startswith("-") for line in lines)


async def test_history_and_undo_of_a_memory_of_many_equal_lines_hold_nobody_up(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Issue 22, 5: an edit wrote thousands of "- x" lines; /memory history took 13 s on the
    event loop (another person waited 8.9 s) and /memory undo said "+1 −1" while it printed
    every line as changed."""
    agent = make_agent(fake_llm, workspaces_dir)
    memory = agent.workspaces.get("telegram-42").memory
    small = "## User Information\n\n- Name: Ana\n"
    big = small + "".join("- x\n" for _ in range(4000))
    lines = big.splitlines(keepends=True)
    lines[2000] = "- likes tea\n"
    for text in (small, big, big + "- likes coffee\n", "".join(lines)):
        memory.write(text)

    async with LongestPause() as pause:
        listed = await ask(agent, dm("42", "/memory history"))
        undone = await ask(agent, dm("42", "/memory undo"))
    assert pause.longest < 1.0, f"the loop was held {pause.longest:.1f} s"
    assert "4004 lines (+1 −0)" in listed.text, listed.text
    assert "4003 lines (+4000 −0)" in listed.text
    assert memory.read() == big + "- likes coffee\n"
    assert "(+2 −1 lines)" in undone.text, undone.text
    shown = undone.text.split("What changed:\n\n", 1)[1].split("\n\nThe text it replaced", 1)[0]
    assert line_counts(shown) == (2, 1), shown  # the summary is what is printed
    assert "-- likes tea" in shown and "+- likes coffee" in shown
    await agent.aclose()


async def test_undo_with_no_versions_says_so(fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    assert "no earlier version" in (await ask(agent, dm("42", "/memory undo"))).text
    assert "no earlier versions" in (await ask(agent, dm("42", "/memory history"))).text
    await agent.aclose()


async def test_after_undo_the_model_sees_the_restored_memory(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    memory = agent.workspaces.get("telegram-42").memory
    memory.write("## Preferences\n\n- Likes green tea\n")
    await ask(agent, dm("42", "hello"))  # the system prompt is now frozen with green tea
    memory.write("## Preferences\n\n- Hates tea\n")  # (a consolidation elsewhere)
    await ask(agent, dm("42", "/memory undo"))
    await ask(agent, dm("42", "and now?"))
    system = fake_llm.chat_requests[-1]["messages"][0]["content"]
    assert "Likes green tea" in system and "Hates tea" not in system
    await agent.aclose()


# ---- /forget -------------------------------------------------------------------------------


async def test_forget_asks_first_then_removes_on_confirmation(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")
    fill(workspace)
    before = all_bytes(workspace.root)

    asked = await ask(agent, dm("42", "/forget Elm Street"))
    assert asked.private
    assert "Lives at 12 elm street" in asked.text
    assert "moved to Elm Street, Springfield" in asked.text
    assert "3 messages in 1 conversation" in asked.text
    assert "/forget confirm" in asked.text  # what to type where there are no buttons
    assert [b.label for b in asked.buttons] == ["Forget it", "Keep it"]
    assert all_bytes(workspace.root) == before  # nothing removed yet

    done = await ask(agent, dm("42", "/forget confirm"))
    assert "Removed 1 line of MEMORY.md; 2 entries of HISTORY.md" in done.text
    assert "3 messages in 1 conversation; 2 media files" in done.text
    assert files_holding(workspace.root, SECRET) == []
    again = await ask(agent, dm("42", "/forget confirm"))
    assert "nothing waiting" in again.text

    # The next prompt carries neither the forgotten line nor the forgotten messages.
    await ask(agent, dm("42", "what do you know?"))
    request = json.dumps(fake_llm.chat_requests[-1]).lower()
    assert "elm street" not in request and "green tea" in request
    await agent.aclose()


OLD_TIME_LINE = "[Current time: 2026-01-05 09:30 UTC]\n"


def write_old_session(workspace: Workspace, key: str, texts: list[str]) -> None:
    """A transcript as files were written before issue 22: every user message began with the
    time line the model was told."""
    store = workspace.sessions
    session = store.get(key)
    for text in texts:
        store.append(session, {"role": "user", "content": OLD_TIME_LINE + text,
                               "timestamp": "2026-01-05T09:30:00+00:00"})  # fmt: skip
        store.append(session, {"role": "assistant", "content": "Noted."})
    store.evict(key)


async def test_forget_matches_what_was_said_not_the_record_around_it(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Issue 22, 10: /forget time removed every message (it matched "timestamp" and the
    "[Current time: …]" line each stored user message began with), /forget user each user
    message ("role": "user"). Now a message goes only if its text says the words."""
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")
    write_old_session(workspace, "telegram:group:-100:42", ["an old hello", "what time is it"])
    for text in ("hello there", "I have no time today", "see you"):
        await ask(agent, dm("42", text))

    asked = await ask(agent, dm("42", "/forget time"))
    assert "2 messages in 2 conversations" in asked.text, asked.text
    assert "nothing matching" in (await ask(agent, dm("42", "/forget user"))).text
    assert "nothing matching" in (await ask(agent, dm("42", "/forget Current"))).text
    assert "nothing matching" in (await ask(agent, dm("42", "/forget 2026"))).text
    assert "nothing matching" in (await ask(agent, dm("42", "/forget assistant"))).text
    await ask(agent, dm("42", "/forget time"))
    done = await ask(agent, dm("42", "/forget confirm"))
    assert "2 messages in 2 conversations" in done.text
    left = [
        m["content"]
        for key in list(workspace.sessions.keys())  # a SessionStore, not a dict
        for m in workspace.sessions.read_all(workspace.sessions.get(key))
        if m["role"] == "user"
    ]
    assert sorted(left) == ["an old hello", "hello there", "see you"]  # shown clean, too
    await agent.aclose()


async def test_an_old_transcript_is_exported_and_filed_as_the_person_wrote_it(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Issue 22, 10: a file from before keeps its time lines on disk (nothing is rewritten),
    but /export and consolidation carry only what the person wrote."""
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")
    write_old_session(workspace, "telegram:dm:42", ["my bike is red", "and blue"])
    on_disk = workspace.sessions.path_for("telegram:dm:42").read_bytes()
    assert on_disk.count(OLD_TIME_LINE.strip().encode()) == 2

    [file] = (await ask(agent, dm("42", "/export"))).files
    with zipfile.ZipFile(io.BytesIO(file.read())) as archive:
        [name] = [n for n in archive.namelist() if "/sessions/" in n]
        exported = archive.read(name)
    records = [json.loads(line) for line in exported.splitlines()]
    users = [r["content"] for r in records if r.get("role") == "user"]
    assert users == ["my bike is red", "and blue"]
    others = [line for line in on_disk.splitlines() if b'"role": "user"' not in line]
    assert [line for line in exported.splitlines() if b'"role": "user"' not in line] == others

    fake_llm.default = lambda request: (
        save_memory_call("[2026-01-05 09:30] Bike colours.", "## User Information\n- Has a bike\n")
        if is_consolidation(request)
        else completion("ok")
    )
    await ask(agent, dm("42", "/new"))
    await ask(agent, dm("42", "hi again"))  # waits for the filing
    [request] = fake_llm.consolidation_requests
    sent = request["messages"][1]["content"]
    assert "USER: my bike is red" in sent and "Current time" not in sent
    assert workspace.sessions.path_for("telegram:dm:42").read_bytes().startswith(on_disk)
    await agent.aclose()


async def test_forget_cancel_and_nothing_found(fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")
    fill(workspace)
    before = all_bytes(workspace.root)
    assert "nothing matching" in (await ask(agent, dm("42", "/forget submarine"))).text
    await ask(agent, dm("42", "/forget Elm Street"))
    assert "Cancelled" in (await ask(agent, dm("42", "/forget cancel"))).text
    assert "nothing waiting" in (await ask(agent, dm("42", "/forget confirm"))).text
    assert "at least 3 characters" in (await ask(agent, dm("42", "/forget a"))).text
    assert all_bytes(workspace.root) == before
    await agent.aclose()


async def test_a_confirmation_expires_and_belongs_to_its_user(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir, confirmations=Confirmations(ttl_s=0.2))
    alice, bob = agent.workspaces.get("telegram-42"), agent.workspaces.get("telegram-7")
    fill(alice)
    fill(bob)
    before_alice, before_bob = all_bytes(alice.root), all_bytes(bob.root)

    asked = await ask(agent, dm("42", "/forget Elm Street"))
    token = asked.buttons[0].command.split()[-1]
    # Bob cannot confirm Alice's question, not even with her button's token.
    assert "nothing waiting" in (await ask(agent, dm("7", f"/forget confirm {token}"))).text
    await asyncio.sleep(0.3)
    late = await ask(agent, dm("42", f"/forget confirm {token}"))
    assert "expired" in late.text
    assert all_bytes(alice.root) == before_alice and all_bytes(bob.root) == before_bob

    # An older question's button cannot confirm a newer one (answered in the usual time).
    await agent.aclose()
    agent = make_agent(fake_llm, workspaces_dir)
    old = (await ask(agent, dm("42", "/forget Springfield"))).buttons[0].command
    await ask(agent, dm("42", "/forget green tea"))
    assert "older question" in (await ask(agent, dm("42", old))).text
    await agent.aclose()


def test_unanswered_questions_leave_memory_and_are_bounded() -> None:
    """Every /forget question nobody answered stayed in RAM for good, with its words: 1,000
    people asking once and never again kept 1,000 of them. Now one is dropped a TTL after it
    expired, a person holds one per action, and everyone together at most max_open."""
    now = [0.0]
    confirmations = Confirmations(ttl_s=300, clock=lambda: now[0], max_open=100)
    for n in range(100):
        confirmations.ask(f"telegram-{n}", "forget", "my old address " * 30)
    now[0] = 400.0  # expired, but within the next TTL: a late "confirm" is told so
    assert confirmations.take("telegram-0", "forget").problem == "expired"
    now[0] = 601.0
    confirmations.ask("telegram-late", "forget", "green tea")
    assert len(confirmations) == 1  # the rest left RAM
    for _ in range(50):  # one person asking again and again holds one question
        question = confirmations.ask("telegram-late", "forget", "green tea")
    assert len(confirmations) == 1
    for n in range(150):  # more people at once than max_open: the oldest questions go
        confirmations.ask(f"telegram-{n}", "wipe")
    assert len(confirmations) == 100
    assert confirmations.take("telegram-late", "forget", question.token).problem == "none"
    assert confirmations.take("telegram-149", "wipe").question is not None


async def test_a_phrase_too_long_to_forget_is_refused_before_anything_is_asked(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Its question would keep the whole text in RAM until it expires."""
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")
    pasted = "I once lived on Elm Street. " * 40  # 1,120 characters, and it is in the files
    workspace.sessions.append(
        workspace.sessions.get("telegram:dm:42"), {"role": "user", "content": pasted}
    )
    reply = await ask(agent, dm("42", "/forget " + pasted))
    assert "at most 500 characters" in reply.text and not reply.buttons
    assert len(agent.confirmations) == 0
    await agent.aclose()


async def test_one_users_commands_never_touch_anothers_files(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    bob = agent.workspaces.get("telegram-7")
    fill(agent.workspaces.get("telegram-42"))
    fill(bob)
    bobs = all_bytes(bob.root)
    for text in ("/forget Elm Street", "/forget confirm", "/memory undo", "/export", "/wipe"):
        reply = await ask(agent, dm("42", text))
        for file in reply.files:
            with zipfile.ZipFile(io.BytesIO(file.read())) as archive:
                assert all(n.startswith("telegram-42/") for n in archive.namelist())
    await ask(agent, dm("42", "/wipe confirm"))
    assert not user_home(workspaces_dir, "42").exists()
    assert all_bytes(bob.root) == bobs
    await agent.aclose()


# ---- /export -------------------------------------------------------------------------------


async def test_export_answers_with_the_archive(fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")
    fill(workspace)
    reply = await ask(agent, group("-100", "42", "/export"))
    assert reply.private  # asked in a group, answered privately
    [file] = reply.files
    assert file.name.startswith("lightgrep-telegram-42-") and file.name.endswith("Z.zip")
    with zipfile.ZipFile(io.BytesIO(file.read())) as archive:
        names = set(archive.namelist())
        assert archive.read("telegram-42/MEMORY.md") == workspace.memory_path.read_bytes()
    assert {f"telegram-42/{n}" for n in all_bytes(workspace.root)} == names
    await agent.aclose()


async def test_export_leaves_out_a_planted_hard_link(
    fake_llm: FakeOpenAI, workspaces_dir: Path, tmp_path: Path
) -> None:
    """A hard link is the file it names (here the bot's config with its token) under a second
    name; only the file type was checked, so /export sent the config."""
    config = tmp_path / "config.toml"
    config.write_text('[telegram]\ntoken = "123456:BOT-TOKEN-OF-THE-OPERATOR"\n')
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")
    fill(workspace)
    os.link(config, workspace.root / "notes.txt")
    os.link(config, workspace.root / "media" / "planted.txt")
    reply = await ask(agent, dm("42", "/export"))
    await agent.aclose()
    [file] = reply.files
    with zipfile.ZipFile(io.BytesIO(file.read())) as archive:
        names = set(archive.namelist())
        contents = b"".join(archive.read(name) for name in names)
    assert b"BOT-TOKEN" not in contents
    assert "telegram-42/notes.txt" not in names and "telegram-42/media/planted.txt" not in names
    assert "telegram-42/MEMORY.md" in names and "telegram-42/media/tea.txt" in names
    assert config.stat().st_nlink == 3  # nothing was removed or changed either


# ---- /wipe ---------------------------------------------------------------------------------


async def test_wipe_names_what_goes_then_erases_every_session_and_the_next_message_is_new(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    workspace = agent.workspaces.get("telegram-42")
    fill(workspace)
    await ask(agent, dm("42", "remember me"))  # a turn: prompts and indexes cached
    asked = await ask(agent, group("-100", "42", "/wipe"))
    assert asked.private
    assert "MEMORY.md (5 lines)" in asked.text and "HISTORY.md (3 entries)" in asked.text
    assert "2 conversations (1 in groups) with 9 messages" in asked.text
    assert "2 earlier memory versions" in asked.text and "3 media files" in asked.text
    assert workspace.root.exists()

    done = await ask(agent, dm("42", "/wipe confirm"))
    assert "erased everything" in done.text
    assert not workspace.root.exists()
    # No remnant either; the bot-wide usage counts (no user key in them) stay.
    assert sorted(os.listdir(workspaces_dir)) == [GLOBAL_USAGE_FILE]

    await ask(agent, dm("42", "hello again"))
    request = fake_llm.chat_requests[-1]
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert "Ana" not in json.dumps(request) and "green tea" not in json.dumps(request)
    assert (await ask(agent, dm("42", "/memory"))).text.startswith("I don't remember anything")
    await agent.aclose()


async def test_wipe_during_a_running_turn_waits_for_it_and_cancels_consolidation(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir, window=1200)
    workspace = agent.workspaces.get("telegram-42")
    fill(workspace)
    started = asyncio.Event()

    def slow(request: dict) -> object:
        started.set()
        if is_consolidation(request):
            return Delay(30, save_memory_call("[2026-01-04 10:00] x", "## Notes\n- x\n"))
        return Delay(0.5, completion("a long answer " * 30))

    fake_llm.default = slow
    await ask(agent, dm("42", "/wipe"))
    turn = asyncio.create_task(ask(agent, dm("42", "tell me something " * 20)))
    await started.wait()
    wiped = await asyncio.wait_for(ask(agent, dm("42", "/wipe confirm")), 10)
    assert "erased everything" in wiped.text
    assert turn.done()  # the running turn finished first (its answer was delivered)
    assert "a long answer" in turn.result().text
    assert not workspace.root.exists()
    assert not agent.background.has("telegram-42")  # the consolidation it scheduled was cancelled
    await asyncio.sleep(0.1)
    assert not workspace.root.exists()  # and nothing recreated the folder
    await agent.aclose()


async def test_a_message_waiting_behind_a_wipe_starts_as_a_strangers(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fill(agent.workspaces.get("telegram-42"))
    fake_llm.default = lambda request: Delay(0.3, completion("ok"))
    await ask(agent, dm("42", "/wipe"))
    first = asyncio.create_task(ask(agent, dm("42", "first")))
    await asyncio.sleep(0.1)
    wipe = asyncio.create_task(ask(agent, dm("42", "/wipe confirm")))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(ask(agent, dm("42", "second")))
    await asyncio.gather(first, wipe, second)
    last = fake_llm.chat_requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"] and "second" in last[1]["content"]
    assert "Ana" not in last[0]["content"]
    fresh = Workspaces(workspaces_dir).get("telegram-42")
    roles = [m["role"] for m in fresh.sessions.get("telegram:dm:42").messages]
    assert roles == ["user", "assistant"] and not fresh.history_path.exists()
    await agent.aclose()


async def test_a_crash_mid_wipe_leaves_a_hidden_remnant_the_next_bot_removes(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    from memory.control.wipe import hide

    fill(Workspaces(workspaces_dir).get("telegram-42"))
    hidden = hide(workspaces_dir / "telegram-42")  # the rename happened, the deletion did not
    assert hidden is not None and hidden.exists()
    assert list(Workspaces(workspaces_dir).user_keys()) == []
    agent: Agent = make_agent(fake_llm, workspaces_dir)
    assert not hidden.exists()
    await agent.aclose()
