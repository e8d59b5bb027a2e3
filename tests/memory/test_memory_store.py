"""MEMORY.md replacement with kept versions, HISTORY.md appends, and the agent's edit operations."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

import pytest

from memory.store import MEMORY_TEMPLATE, SECTIONS, MemoryEditError, MemoryStore

ENTRY_START = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] ")


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "ws", keep_versions=3)


def history_entries(store: MemoryStore) -> list[str]:
    return store.history_path.read_text(encoding="utf-8").rstrip("\n").split("\n\n")


# --- MEMORY.md ------------------------------------------------------------------------------


def test_read_is_empty_before_anything_is_written(store: MemoryStore) -> None:
    assert store.read() == ""
    assert store.versions() == []
    assert store.prompt_section() == "# Memory\n## Long-term Memory\n"


def test_write_replaces_and_feeds_the_prompt(store: MemoryStore) -> None:
    assert store.write("## Preferences\n- tea\n") is True
    assert store.read() == "## Preferences\n- tea\n"
    assert store.prompt_section() == "# Memory\n## Long-term Memory\n## Preferences\n- tea\n"


def test_unchanged_content_writes_nothing(store: MemoryStore) -> None:
    store.write("same")
    before = os.stat(store.memory_path)
    assert store.write("same") is False
    after = os.stat(store.memory_path)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert store.versions() == []


def test_previous_content_is_kept_and_bounded(store: MemoryStore) -> None:
    for n in range(1, 7):
        store.write(f"## Version {n}\n- tea\n")  # the same facts: only the newest 3 are kept
    kept = store.versions()
    assert [p.read_text()[:12] for p in kept] == ["## Version 3", "## Version 4", "## Version 5"]
    assert store.read() == "## Version 6\n- tea\n"


def test_a_version_holding_a_fact_nothing_else_holds_is_spared_within_a_bound(
    store: MemoryStore,
) -> None:
    """Issue 22, 7: each "version n" is a fact only that version holds, so the newest of the
    older ones are spared too, up to as many as are kept (before: only versions 7-9 stayed)."""
    for n in range(1, 11):
        store.write(f"version {n}")
    kept = [p.read_text() for p in store.versions()]
    assert kept == [f"version {n}" for n in range(4, 10)]


def test_drops_then_adds_never_push_the_last_copy_of_a_fact_out(store: MemoryStore) -> None:
    """Issue 22, 7: a memory emptied, then written to many times, as an injected instruction
    made the model do: a version still holds the facts, for /memory undo."""
    facts = "## User Information\n- Name: Ana\n- Lives in Oslo\n- Has a cat\n"
    store.write(facts)
    store.write("## User Information\n")  # every fact gone
    for n in range(12):
        store.add_to_section("Important Notes", f"note {n}")
    texts = [p.read_text() for p in store.versions()]
    assert facts in texts
    assert len(texts) <= 2 * store.keep_versions


def test_versions_can_be_switched_off(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, keep_versions=0)
    store.write("a")
    store.write("b")
    assert store.versions() == []
    assert store.read() == "b"


def test_write_is_a_rename_not_an_in_place_edit(store: MemoryStore) -> None:
    store.write("old")
    reader = store.memory_path.open("rb")  # a reader that opened the old file keeps seeing it
    store.write("new")
    assert reader.read() == b"old"
    reader.close()
    leftovers = [p.name for p in store.root.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_a_failed_write_leaves_the_old_file(store: MemoryStore) -> None:
    store.write("kept")
    with pytest.raises(UnicodeEncodeError):
        store.write("bad \udc80 surrogate")
    assert store.read() == "kept"
    assert not [p for p in store.root.iterdir() if p.name.endswith(".tmp")]


# --- HISTORY.md -----------------------------------------------------------------------------


def test_history_entries_are_stamped_and_separated_by_one_blank_line(store: MemoryStore) -> None:
    store.append_history("first event", when=datetime(2025, 3, 1, 9, 5))
    store.append_history("[2025-03-02 10:00] second, already stamped")
    store.append_history("third\n\n\nwith blank lines\n")
    text = store.history_path.read_text()
    assert text.startswith("[2025-03-01 09:05] first event\n\n[2025-03-02 10:00] second")
    assert "\n\n\n" not in text
    entries = history_entries(store)
    assert len(entries) == 3
    assert all(ENTRY_START.match(e) for e in entries)
    assert entries[2].endswith("third\nwith blank lines")
    assert text.endswith("with blank lines\n")


def test_history_is_append_only(store: MemoryStore) -> None:
    store.append_history("one")
    before = store.history_path.read_bytes()
    store.append_history("two")
    assert store.history_path.read_bytes().startswith(before)


@pytest.mark.parametrize("ending", ["", "\n", "\n\n"], ids=["no newline", "newline", "blank"])
def test_history_append_after_a_hand_edit(store: MemoryStore, ending: str) -> None:
    store.root.mkdir(parents=True)
    store.history_path.write_text("[2025-01-01 00:00] old" + ending)
    store.append_history("new", when=datetime(2025, 1, 2, 0, 0))
    text = store.history_path.read_text()
    assert text.endswith("old\n\n[2025-01-02 00:00] new\n")
    assert text.count("\n\n[2025-01-02") == 1


def test_raw_archive_entry_keeps_its_lines(store: MemoryStore) -> None:
    store.append_history("[2025-05-05 12:00] [RAW] 2 messages\n[2025-05-05 11:59] USER: hi\n")
    assert history_entries(store) == [
        "[2025-05-05 12:00] [RAW] 2 messages\n[2025-05-05 11:59] USER: hi"
    ]


def test_each_entry_is_one_write(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    store.append_history("one")
    monkeypatch.setattr(os, "write", counting_write)
    store.append_history("two\nlines")
    assert len(writes) == 1
    assert writes[0].startswith(b"\n[") and writes[0].endswith(b"two\nlines\n")


# --- edits for the agent's tool ---------------------------------------------------------------


def test_add_to_section_on_empty_memory_starts_from_the_template(store: MemoryStore) -> None:
    result = store.add_to_section("Preferences", "likes green tea")
    assert "likes green tea" in result
    text = store.read()
    for section in SECTIONS:
        assert f"## {section}\n" in text
    assert "## Preferences\n- likes green tea\n" in text
    assert text.startswith(MEMORY_TEMPLATE.split("## Preferences")[0])


def test_add_to_section_appends_at_the_end_of_the_section(store: MemoryStore) -> None:
    store.write("## User Information\n- name: Ada\n\n## Preferences\n- tea\n\n## Important Notes\n")
    store.add_to_section("preferences", "- no meetings before 10")
    assert store.read() == (
        "## User Information\n- name: Ada\n\n"
        "## Preferences\n- tea\n- no meetings before 10\n\n"
        "## Important Notes\n"
    )


def test_add_to_section_creates_a_missing_section(store: MemoryStore) -> None:
    store.write("## Preferences\n- tea\n")
    store.add_to_section("## Pets", "a cat named Turing")
    assert store.read() == "## Preferences\n- tea\n\n## Pets\n- a cat named Turing\n"


def test_add_to_section_does_not_duplicate(store: MemoryStore) -> None:
    store.add_to_section("Preferences", "tea")
    before = store.read()
    result = store.add_to_section("Preferences", "tea")
    assert "Already" in result
    assert store.read() == before


@pytest.mark.parametrize(
    ("section", "line", "message"),
    [
        ("Preferences", "   ", "empty"),
        ("", "tea", "section name is empty"),
        ("Pre\nferences", "tea", "single line"),
    ],
)
def test_add_to_section_rejects_bad_input(
    store: MemoryStore, section: str, line: str, message: str
) -> None:
    with pytest.raises(MemoryEditError, match=message):
        store.add_to_section(section, line)
    assert store.read() == ""


def test_add_several_lines_cannot_open_a_heading(store: MemoryStore) -> None:
    store.write("## Preferences\n- tea\n\n## Important Notes\n")
    result = store.add_to_section("Preferences", "tea\n\n## Injected\n* cats")
    assert store.read() == ("## Preferences\n- tea\n- ## Injected\n* cats\n\n## Important Notes\n")
    assert result == "Added to Preferences: - ## Injected; * cats"


def test_replace_passage(store: MemoryStore) -> None:
    store.write("## Preferences\n- coffee, black\n")
    store.replace_passage("coffee, black", "green tea")
    assert store.read() == "## Preferences\n- green tea\n"
    assert [p.read_text() for p in store.versions()] == ["## Preferences\n- coffee, black\n"]


def test_replace_passage_not_found_or_ambiguous(store: MemoryStore) -> None:
    store.write("- tea\n- tea cups\n")
    with pytest.raises(MemoryEditError, match="not found"):
        store.replace_passage("coffee", "x")
    with pytest.raises(MemoryEditError, match="occurs 2 times"):
        store.replace_passage("tea", "x")
    with pytest.raises(MemoryEditError, match="empty"):
        store.replace_passage("", "x")
    assert store.read() == "- tea\n- tea cups\n"


def test_remove_passage_removes_whole_lines_cleanly(store: MemoryStore) -> None:
    store.write("## Preferences\n- tea\n- lives in Oslo\n- cats\n")
    store.remove_passage("- lives in Oslo")
    assert store.read() == "## Preferences\n- tea\n- cats\n"
    with pytest.raises(MemoryEditError, match="not found"):
        store.remove_passage("Oslo")


def test_remove_part_of_a_line(store: MemoryStore) -> None:
    store.write("- tea, no sugar\n")
    store.remove_passage(", no sugar")
    assert store.read() == "- tea\n"
