"""Session JSONL: O(1) appends, last metadata wins, damaged lines skipped, history() LLM-ready."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import tracemalloc
from pathlib import Path

import pytest

from memory import clock
from memory.session import FILED, Session, SessionStore

KEY = "telegram:group:-1001:42"


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


def fresh(sessions_dir: Path) -> SessionStore:
    """A new store, as after a restart: nothing cached."""
    return SessionStore(sessions_dir)


def fill(store: SessionStore, n: int, key: str = KEY) -> Session:
    session = store.get(key)
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        store.append(session, {"role": role, "content": f"message {i}"})
    return session


def contents(session: Session) -> list[str]:
    return [m["content"] for m in session.messages]


def file_lines(session: Session) -> list[dict]:
    return [json.loads(line) for line in session.path.read_text().splitlines()]


def test_file_format(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = fill(store, 2)
    records = file_lines(session)
    assert records[0]["_type"] == "metadata"
    assert records[0]["key"] == KEY
    assert records[0]["last_consolidated"] == 0
    assert set(records[0]) >= {"created_at", "updated_at", "metadata"}
    assert [r["content"] for r in records[1:]] == ["message 0", "message 1"]
    utc_to_the_second = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")
    assert all(utc_to_the_second.fullmatch(r["timestamp"]) for r in records[1:])
    header = [records[0]["created_at"], records[0]["updated_at"]]
    assert all(utc_to_the_second.fullmatch(stamp) for stamp in header)
    assert session.path.name == "telegram%3Agroup%3A-1001%3A42.jsonl"


def test_get_is_cached_and_new_sessions_write_nothing(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = store.get(KEY)
    assert store.get(KEY) is session
    assert session.messages == []
    assert not session.path.exists()
    assert store.keys() == []


def test_messages_survive_a_restart(sessions_dir: Path) -> None:
    session = fill(fresh(sessions_dir), 5)
    reloaded = fresh(sessions_dir).get(KEY)
    assert reloaded is not session
    assert reloaded.messages == session.messages
    assert reloaded.created_at == session.created_at


def test_append_is_one_line_never_a_rewrite(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = fill(store, 3)
    before = session.path.read_bytes()
    inode = os.stat(session.path).st_ino
    store.append(session, {"role": "user", "content": "multi\nline \u2028 text"})
    after = session.path.read_bytes()
    assert after.startswith(before)
    assert after[len(before) :].count(b"\n") == 1
    assert os.stat(session.path).st_ino == inode
    assert fresh(sessions_dir).get(KEY).messages[-1]["content"] == "multi\nline \u2028 text"


def test_timestamp_is_kept_when_given(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = store.get(KEY)
    store.append(session, {"role": "user", "content": "hi", "timestamp": "2025-01-01T10:00:00"})
    assert session.messages[-1]["timestamp"] == "2025-01-01T10:00:00"


def test_bad_message_changes_nothing(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = fill(store, 1)
    before = session.path.read_bytes()
    with pytest.raises(TypeError):
        store.append(session, {"role": "user", "content": object()})
    with pytest.raises(ValueError):
        store.append(session, {"content": "no role"})
    assert session.path.read_bytes() == before
    assert len(session.messages) == 1


def test_metadata_changes_are_appended_and_the_last_wins(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = fill(store, 4)
    store.set_last_consolidated(session, 2)
    store.set_last_consolidated(session, 3)
    records = file_lines(session)
    assert [r.get("_type") for r in records].count("metadata") == 3
    assert len(records) == 1 + 4 + 2  # nothing rewritten

    reloaded = fresh(sessions_dir).get(KEY)
    assert reloaded.last_consolidated == 3
    assert reloaded.total == 4
    # Only the unconsolidated tail is loaded; the past is read from the disk when asked for.
    assert contents(reloaded) == ["message 3"] and reloaded.offset == 3
    assert [m["content"] for m in store.read_all(reloaded)] == [f"message {i}" for i in range(4)]


def test_cursor_out_of_range_is_refused(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = fill(store, 2)
    with pytest.raises(ValueError):
        store.set_last_consolidated(session, 3)
    with pytest.raises(ValueError):
        store.set_last_consolidated(session, -1)
    assert session.last_consolidated == 0


def test_torn_last_line_is_skipped_with_a_warning(
    sessions_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = fill(fresh(sessions_dir), 4)
    with session.path.open("ab") as file:
        file.write(b'{"role": "user", "content": "half a mess')  # crash mid-write
    with caplog.at_level(logging.WARNING, logger="memory.session"):
        reloaded = fresh(sessions_dir).get(KEY)
    assert contents(reloaded) == ["message 0", "message 1", "message 2", "message 3"]
    assert any("torn" in r.getMessage() for r in caplog.records)
    assert "half a mess" not in caplog.text  # a person's words stay out of the logs


def test_append_after_a_torn_line_is_not_glued_to_it(sessions_dir: Path) -> None:
    fill(fresh(sessions_dir), 2)
    store = fresh(sessions_dir)
    session = store.get(KEY)
    with session.path.open("ab") as file:
        file.write(b'{"role": "assistant", "con')
    store = fresh(sessions_dir)
    session = store.get(KEY)
    store.append(session, {"role": "user", "content": "after the crash"})
    store.set_last_consolidated(session, 1)

    reloaded = fresh(sessions_dir).get(KEY)
    assert [m["content"] for m in store.read_all(reloaded)] == [
        "message 0",
        "message 1",
        "after the crash",
    ]
    assert contents(reloaded) == ["message 1", "after the crash"]
    assert reloaded.last_consolidated == 1


def test_garbage_line_in_the_middle_keeps_every_good_message(
    sessions_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = fill(fresh(sessions_dir), 2)
    with session.path.open("ab") as file:
        file.write(b"\x00\xff not json at all\n[1, 2]\n\n")
    store = fresh(sessions_dir)
    store.append(store.get(KEY), {"role": "user", "content": "later"})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memory.session"):
        reloaded = fresh(sessions_dir).get(KEY)
    assert contents(reloaded) == ["message 0", "message 1", "later"]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_damaged_metadata_never_empties_the_session(sessions_dir: Path) -> None:
    session = fill(fresh(sessions_dir), 3)
    lines = session.path.read_bytes().split(b"\n")
    session.path.write_bytes(b"\n".join([b"{broken", *lines[1:]]))
    reloaded = fresh(sessions_dir).get(KEY)
    assert contents(reloaded) == ["message 0", "message 1", "message 2"]
    assert reloaded.last_consolidated == 0


def test_keys_lists_sessions_including_long_ones(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    long_key = "discord:guild:" + "9" * 400
    for key in (KEY, long_key, "cli:local:alice"):
        fill(store, 1, key)
    assert fresh(sessions_dir).keys() == sorted([KEY, long_key, "cli:local:alice"])
    assert fresh(sessions_dir).get(long_key).messages[0]["content"] == "message 0"


@pytest.mark.parametrize("key", ["../../x", "a/b", "\x00", "", "..", ".", "k" * 5000])
def test_hostile_session_keys_stay_in_the_sessions_folder(sessions_dir: Path, key: str) -> None:
    store = fresh(sessions_dir)
    session = fill(store, 1, key)
    assert session.path.resolve().parent == sessions_dir.resolve()
    assert fresh(sessions_dir).keys() == [key]
    assert list(sessions_dir.parent.iterdir()) == [sessions_dir]


# --- history() ------------------------------------------------------------------------------


def said(history: list[dict]) -> list[str | None]:
    """Each message's content without the time line history() puts before a user message (from
    its timestamp: test_history_tells_each_user_message_its_own_time): these tests are about
    which messages it keeps."""
    return [
        clock.without_told(m["content"]) if m["role"] == "user" else m.get("content")
        for m in history
    ]


def call(call_id: str, name: str = "search_history") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_history_starts_at_a_user_message_and_drops_orphan_tool_results(
    sessions_dir: Path,
) -> None:
    store = fresh(sessions_dir)
    session = store.get(KEY)
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": None, "tool_calls": [call("a")]},
        {"role": "tool", "tool_call_id": "a", "name": "search_history", "content": "r1"},
        {"role": "assistant", "content": "answer 1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": None, "tool_calls": [call("b")]},
        {"role": "tool", "tool_call_id": "b", "name": "search_history", "content": "r2"},
        {"role": "tool", "tool_call_id": "zzz", "content": "stray result"},
        {"role": "assistant", "content": "answer 2"},
    ]
    for message in messages:
        store.append(session, message)

    full = session.history()
    assert said(full) == [
        "q1",
        None,
        "r1",
        "answer 1",
        "q2",
        None,
        "r2",
        "answer 2",
    ]
    assert all("timestamp" not in m for m in full)
    assert full[1]["tool_calls"] == [call("a")]
    assert full[2] == {
        "role": "tool",
        "tool_call_id": "a",
        "name": "search_history",
        "content": "r1",
    }

    # A cursor that lands inside a tool exchange: the slice starts at the next user message.
    store.set_last_consolidated(session, 2)
    assert said(session.history()) == ["q2", None, "r2", "answer 2"]
    assert session.unconsolidated() == session.messages and session.offset == 2


def test_tool_result_before_its_call_in_the_slice_is_an_orphan(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = store.get(KEY)
    for message in [
        {"role": "assistant", "content": None, "tool_calls": [call("a")]},
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "a", "content": "late"},
        {"role": "assistant", "content": "ok"},
    ]:
        store.append(session, message)
    assert said(session.history()) == ["q", "ok"]


def test_history_tells_each_user_message_its_own_time(sessions_dir: Path) -> None:
    """Issue 22, 10: the file keeps what the person wrote; the model reads the time line
    before it, built from the message's own timestamp: the same bytes in every request."""
    store = fresh(sessions_dir)
    session = store.get(KEY)
    picture = {"type": "image_ref", "sha256": "a" * 64, "ext": "jpg", "mime": "image/jpeg",
               "name": "cat.jpg"}  # fmt: skip
    store.append(session, {"role": "user", "content": "hi",
                           "timestamp": "2026-01-05T09:30:59+00:00"})  # fmt: skip
    store.append(session, {"role": "assistant", "content": "hello"})
    store.append(session, {"role": "user", "content": [{"type": "text", "text": "look"}, picture],
                           "timestamp": "2026-01-05T10:01:00+00:00"})  # fmt: skip
    assert [r.get("content") for r in file_lines(session)[1:3]] == ["hi", "hello"]
    history = session.history()
    assert history[0]["content"] == "[Current time: 2026-01-05 09:30 UTC]\nhi"
    assert history[1]["content"] == "hello"
    assert history[2]["content"] == [
        {"type": "text", "text": "[Current time: 2026-01-05 10:01 UTC]\nlook"},
        picture,
    ]
    assert fresh(sessions_dir).get(KEY).history() == history


def test_a_file_written_with_the_time_in_the_text_loads_as_written(sessions_dir: Path) -> None:
    """Files from before issue 22 began each user message with the time line: it is cut when
    the file is read, and the prompt puts the same line back, so a provider's cached prefix
    of such a conversation still holds."""
    sessions_dir.mkdir(parents=True)
    path = SessionStore(sessions_dir).path_for(KEY)
    told = "[Current time: 2026-01-05 09:30 UTC]\n"
    records = [
        {"_type": "metadata", "key": KEY, "created_at": "2026-01-05T09:30:00+00:00",
         "updated_at": "2026-01-05T09:30:00+00:00", "last_consolidated": 0, "metadata": {}},
        {"role": "user", "content": told + "my [Current time: x] text",
         "timestamp": "2026-01-05T09:30:12+00:00"},
        {"role": "assistant", "content": "ok", "timestamp": "2026-01-05T09:30:14+00:00"},
        {"role": "user", "content": [{"type": "text", "text": told + "a picture"}],
         "timestamp": "2026-01-05T09:30:40+00:00"},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    session = fresh(sessions_dir).get(KEY)
    assert contents(session)[:2] == ["my [Current time: x] text", "ok"]
    assert session.messages[2]["content"] == [{"type": "text", "text": "a picture"}]
    sent_before = [{"role": r["role"], "content": r["content"]} for r in records[1:]]
    assert session.history() == sent_before


def test_history_without_a_user_message_is_empty(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = store.get(KEY)
    store.append(session, {"role": "assistant", "content": "hello?"})
    assert session.history() == []


def test_a_turn_cut_short_leaves_no_unanswered_tool_call(sessions_dir: Path) -> None:
    """A crash between a tool call and its result must not make every later request invalid."""
    store = fresh(sessions_dir)
    session = store.get(KEY)
    for message in [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": None, "tool_calls": [call("lost")]},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "thinking", "tool_calls": [call("x"), call("y")]},
        {"role": "tool", "tool_call_id": "x", "content": "rx"},
        {"role": "assistant", "content": "done"},
    ]:
        store.append(session, message)
    history = session.history()
    assert said(history) == ["q1", "q2", "thinking", "rx", "done"]
    assert history[2]["tool_calls"] == [call("x")]
    answered = {m["tool_call_id"] for m in history if m["role"] == "tool"}
    called = {c["id"] for m in history for c in m.get("tool_calls", [])}
    assert called == answered


def test_history_asked_at_every_step_is_what_a_fresh_load_builds(sessions_dir: Path) -> None:
    """history() is kept between turns; asked after each append (tool calls answered later, a
    dangling call, the cursor moving), it is always what the file says."""
    store = fresh(sessions_dir)
    session = store.get(KEY)
    steps: list[dict | int] = [
        {"role": "assistant", "content": "before anyone spoke"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "assistant", "content": "", "tool_calls": [call("x"), call("y")]},
        {"role": "user", "content": "q2"},
        {"role": "tool", "tool_call_id": "x", "content": "rx"},
        {"role": "assistant", "content": "a2"},
        4,  # the cursor moves past q1's turn
        {"role": "user", "content": "q3", "message_id": "7"},
        {"role": "assistant", "content": "a3"},
    ]
    for step in steps:
        if isinstance(step, int):
            store.set_last_consolidated(session, step)
        else:
            store.append(session, step)
        assert session.history() == fresh(sessions_dir).get(KEY).history()
    assert said(session.history()) == ["q2", "a2", "q3", "a3"]
    assert all("message_id" not in m and "timestamp" not in m for m in session.history())


def test_consolidated_messages_leave_ram_though_history_was_built_from_them(
    sessions_dir: Path,
) -> None:
    """The kept history() holds copies of the messages: once they are consolidated, neither
    stays in RAM (only the unconsolidated tail does)."""
    store = fresh(sessions_dir)
    session = store.get(KEY)
    tracemalloc.start()
    try:
        for i in range(100):
            role = "user" if i % 2 == 0 else "assistant"
            store.append(session, {"role": role, "content": f"{i} " + "x" * 20_000})
        assert len(session.history()) == 100
        held = tracemalloc.get_traced_memory()[0]
        store.set_last_consolidated(session, 98)
        gc.collect()
        left = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held - left > 0.9 * 98 * 20_000
    assert [text[:3] for text in said(session.history())] == ["98 ", "99 "]


# ---- only the unconsolidated tail in RAM ------------------------------------------------------


def test_a_load_keeps_only_the_tail_and_seeks_past_the_consolidated_bytes(
    sessions_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = fresh(sessions_dir)
    session = fill(store, 10)
    store.set_last_consolidated(session, 8)
    assert session.offset == 8 and contents(session) == ["message 8", "message 9"]
    # Scribble over the consolidated lines (same length, no newline): a load that read them would
    # warn about unreadable lines; one that seeks to the cursor never sees them.
    data = bytearray(session.path.read_bytes())
    first = data.index(b"\n") + 1
    past = data.index(b'"message 8"')
    past = data.rindex(b"\n", 0, past)
    data[first:past] = b"x" * (past - first)
    session.path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="memory.session"):
        reloaded = fresh(sessions_dir).get(KEY)
    assert not caplog.records
    assert (reloaded.offset, reloaded.last_consolidated, reloaded.total) == (8, 8, 10)
    assert contents(reloaded) == ["message 8", "message 9"]
    assert [m["content"] for m in reloaded.unconsolidated()] == ["message 8", "message 9"]


def test_a_file_without_a_cursor_byte_loads_the_same_tail(sessions_dir: Path) -> None:
    """A file written before cursor_byte existed: read whole once, only the tail kept."""
    store = fresh(sessions_dir)
    session = fill(store, 6)
    store.set_last_consolidated(session, 4)
    lines = session.path.read_bytes().split(b"\n")
    old = [json.loads(line) for line in lines if line]
    for record in old:
        record.pop("cursor_byte", None)
    session.path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in old))

    reloaded = fresh(sessions_dir).get(KEY)
    assert (reloaded.offset, reloaded.last_consolidated, reloaded.total) == (4, 4, 6)
    assert contents(reloaded) == ["message 4", "message 5"]
    fresh(sessions_dir).append(reloaded, {"role": "user", "content": "message 6"})
    store = fresh(sessions_dir)
    again = store.get(KEY)
    store.set_last_consolidated(again, 6)
    assert [m["content"] for m in fresh(sessions_dir).get(KEY).messages] == ["message 6"]
    assert [m["content"] for m in store.read_all(again)] == [f"message {i}" for i in range(7)]


def rewritten(session: Session, change: dict) -> None:
    """The newest metadata record of the file with `change` applied."""
    lines = session.path.read_bytes().split(b"\n")
    newest = max(i for i, line in enumerate(lines) if b'"_type": "metadata"' in line)
    record = json.loads(lines[newest])
    record.update(change)
    for key in [k for k, v in change.items() if v is None]:
        del record[key]
    lines[newest] = json.dumps(record).encode()
    session.path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("counted", [True, False], ids=["with-total", "older-record"])
def test_a_cursor_that_disagrees_with_the_file_is_read_the_safe_way(
    sessions_dir: Path, caplog: pytest.LogCaptureFixture, counted: bool
) -> None:
    """The newest metadata record says 10 messages are consolidated but points (cursor_byte)
    at message 4, or at the header: read from there, messages 4-9 came back into the
    conversation under the numbers 10-15, and the real 10-13 under 16-19 (issue 23)."""
    store = fresh(sessions_dir)
    session = fill(store, 14)
    store.set_last_consolidated(session, 10)
    data = session.path.read_bytes()
    at = data.index(b'"message 4"') if counted else 0
    cursor_byte = data.rindex(b"\n", 0, at) + 1 if counted else 0
    rewritten(session, {"cursor_byte": cursor_byte, **({} if counted else {"total": None})})

    with caplog.at_level(logging.WARNING, logger="memory.session"):
        reloaded = fresh(sessions_dir).get(KEY)

    assert "disagrees with the file" in caplog.text
    assert (reloaded.last_consolidated, reloaded.total) == (10, 14)
    assert [m["content"] for m in reloaded.unconsolidated()] == [
        f"message {i}" for i in range(10, 14)
    ]


def test_appends_after_a_consolidation_keep_absolute_indexes(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = fill(store, 4)
    store.set_last_consolidated(session, 4)
    store.append(session, {"role": "user", "content": "message 4", "message_id": "m4"})
    store.set_last_consolidated(session, 4)  # the cursor at the newest message: one seek point
    reloaded = fresh(sessions_dir).get(KEY)
    assert (reloaded.offset, reloaded.total) == (4, 5)
    assert reloaded.index_of("m4") == 4 and reloaded.span(4) == reloaded.messages
    with pytest.raises(IndexError):
        reloaded.span(3)


def test_ids_of_consolidated_user_messages_survive_a_reload(sessions_dir: Path) -> None:
    store = fresh(sessions_dir)
    session = store.get(KEY)
    for i in range(3):
        store.append(session, {"role": "user", "content": f"q{i}", "message_id": f"id{i}"})
        store.append(session, {"role": "assistant", "content": f"a{i}"})
    store.set_last_consolidated(session, 4)
    for loaded in (session, fresh(sessions_dir).get(KEY)):
        assert loaded.index_of("id0") == loaded.index_of("id1") == FILED
        assert loaded.index_of("id2") == 4
        assert loaded.index_of("unknown") is None
