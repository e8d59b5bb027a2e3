"""One clock: on a machine whose local time is not UTC, every stored or shown time is UTC and
names one instant (what the model is told, the transcript, HISTORY.md, versions, /status)."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory.session import SessionStore
from memory.store import MemoryStore
from tests.rigs.agent import ask, dm, make_agent, session_records, user_home
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, save_memory_call

NEW_YORK = "EST5EDT,M3.2.0,M11.1.0"  # America/New_York as a POSIX rule: needs no tz database


@pytest.fixture
def in_new_york() -> Iterator[None]:
    """The process's local time zone is New York's for the test."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = NEW_YORK
    time.tzset()
    try:
        assert time.localtime().tm_gmtoff in (-5 * 3600, -4 * 3600)  # really not UTC
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


def minute(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def within(moment: datetime, start: datetime, end: datetime) -> bool:
    """`moment` (to the second or minute, as stored) lies in [start, end]."""
    return start.replace(second=0, microsecond=0) <= moment <= end


async def test_every_time_is_utc_and_names_the_same_instant(
    in_new_york: None, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    start = datetime.now(UTC)
    agent = make_agent(fake_llm, workspaces_dir)
    agent.workspaces.get("telegram-42").memory.write("## User Information\n")
    fake_llm.queue(completion("Hello Ada"))
    await ask(agent, dm("42", "I'm Ada"))
    fake_llm.queue(save_memory_call("Ada introduced herself.", "## User Information\n- Ada\n"))
    await ask(agent, dm("42", "/new"))
    await agent.aclose()  # the filing runs in the background: wait for it
    status = await ask(agent, dm("42", "/status"))
    end = datetime.now(UTC)

    sent = fake_llm.chat_requests[0]["messages"][-1]["content"]
    told = re.search(r"\[Current time: (.+?) UTC\]", sent)
    assert told is not None
    records = [r for r in session_records(workspaces_dir, "42") if "role" in r]
    stamps = [datetime.fromisoformat(r["timestamp"]) for r in records]
    assert all(r["timestamp"].endswith("+00:00") for r in records)
    assert all(within(s, start, end) for s in stamps)
    assert minute(stamps[0]) == told.group(1)  # the user's message: the instant the model is told

    home = user_home(workspaces_dir, "42")
    history = (home / "HISTORY.md").read_text()
    assert history == f"[{minute(stamps[-1])}] Ada introduced herself.\n"

    [version] = [p.name for p in (home / ".memory_versions").iterdir()]
    match = re.fullmatch(r"MEMORY\.(\d{8}T\d{6})Z\.(\d{20})\.md", version)
    assert match is not None, version
    named = datetime.strptime(match.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    assert within(named, start, end)
    assert named == datetime.fromtimestamp(int(match.group(2)) // 10**9, UTC)

    shown = re.search(r"Last consolidation: (\S+)", status.text)
    assert shown is not None and shown.group(1).endswith("+00:00")
    assert within(datetime.fromisoformat(shown.group(1)), start, end)


def test_an_undated_history_entry_is_stamped_in_utc(in_new_york: None, tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    start = datetime.now(UTC)
    store.append_history("Ada moved to Lisbon.")
    at_four_in_new_york = datetime(2026, 7, 1, 8, 0, tzinfo=UTC).astimezone()
    assert at_four_in_new_york.hour == 4
    store.append_history("Ada flew home.", when=at_four_in_new_york)
    stamps = re.findall(r"^\[([^\]]+)\]", store.history_path.read_text(), re.MULTILINE)
    assert stamps[0] in (minute(start), minute(datetime.now(UTC)))
    assert stamps[1] == "2026-07-01 08:00"


def test_files_from_before_load_and_their_naive_times_read_as_utc(
    in_new_york: None, tmp_path: Path
) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    store = SessionStore(sessions)
    path = store.path_for("telegram:dm:42")
    lines = [
        {"_type": "metadata", "key": "telegram:dm:42", "created_at": "2024-05-01T10:00:00",
         "updated_at": "2024-05-01T10:00:00", "last_consolidated": 0, "metadata": {}},
        {"role": "user", "content": "hi", "timestamp": "2024-05-01T10:00:00"},
        {"role": "assistant", "content": "hello", "timestamp": "2024-05-01T10:01:00"},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    session = store.get("telegram:dm:42")
    assert [m["content"] for m in session.messages] == ["hi", "hello"]
    assert session.updated_at == "2024-05-01T10:01:00"
    store.append(session, {"role": "user", "content": "back"})
    assert session.updated_at.endswith("+00:00") and session.updated_at > "2024"

    memory = MemoryStore(tmp_path)
    old = memory.versions_dir / f"MEMORY.20240501T060000.{1714557600 * 10**9:020d}.md"
    memory.versions_dir.mkdir()
    old.write_text("## User Information\n- old\n")
    memory.write("## User Information\n- a\n")
    memory.write("## User Information\n- b\n")
    names = [p.name for p in memory.versions()]
    assert names[0] == old.name and all(n.count("Z.") == 1 for n in names[1:])

    memory.append_history("Ada said hi.", when=datetime.fromisoformat("2024-05-01T10:00:00"))
    assert memory.history_path.read_text() == "[2024-05-01 10:00] Ada said hi.\n"
