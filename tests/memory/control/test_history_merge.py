"""A /link merge's HISTORY.md, streamed (issue 32, item 13): cut into entries as /forget cuts
them, merged by time without repeats, and never whole in RAM."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from memory.control.forget import history_entries
from memory.control.history_merge import entries, merge_into
from memory.control.link import merge
from memory.links import LinkTable
from memory.workspace import Workspaces

TRICKY = [
    "",
    "\n\n",
    "[2025-01-01 10:00] one\n",
    "[2025-01-01 10:00] one\n\n[2025-01-01 10:01] two",
    "notes before any stamp\n\n[2025-01-01 10:00] one\n\n\n\n[2025-01-02 09:00] two\n",
    "[2025-01-01 10:00] a paragraph\n\nstill the same entry\n \t\n[2025-01-03 10:00] next\n",
    "\n[2025-01-01 10:00] starts with a blank line\n\n  \n[2025-01-02 10:00] spaces\n\n",
    "[2025-01-01 10:00] crlf\r\n\r\n[2025-01-02 10:00] not cut\r\n",
    "[2025-01-01 10:00] an é and a 😀\n\n[2025-01-01 10:00] same minute\n",
]


@pytest.mark.parametrize("text", TRICKY)
def test_entries_are_cut_as_forget_cuts_them(tmp_path: Path, text: str) -> None:
    path = tmp_path / "HISTORY.md"
    path.write_text(text, encoding="utf-8", newline="")
    assert list(entries(path)) == [entry.strip("\n") for entry in history_entries(text)]


def test_merged_by_time_without_repeats_and_again_adds_nothing(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours.md", tmp_path / "theirs.md"
    ours.write_text("[2025-01-01 10:00] a\n\n[2025-01-03 10:00] c\n\n[2025-01-05 10:00] e\n")
    theirs.write_text(
        "[2025-01-02 10:00] b\n\n[2025-01-03 10:00] c\n\n[2025-01-03 10:00] c2\n\n"
        "[2025-01-03 10:00] c2\n\n[2025-01-06 10:00] f\nwith a second line\n"
    )
    assert merge_into(theirs, ours) == 3  # b, c2 (once), f
    assert ours.read_text() == (
        "[2025-01-01 10:00] a\n\n[2025-01-02 10:00] b\n\n[2025-01-03 10:00] c\n\n"
        "[2025-01-03 10:00] c2\n\n[2025-01-05 10:00] e\n\n"
        "[2025-01-06 10:00] f\nwith a second line\n"
    )
    before = ours.read_bytes()
    assert merge_into(theirs, ours) == 0  # a merge run again (after a crash) adds nothing
    assert ours.read_bytes() == before
    empty = tmp_path / "none.md"
    assert merge_into(theirs, empty) == 4 and next(entries(empty)).endswith("b")


@pytest.mark.parametrize("large", ["joining", "staying"])
def test_a_large_history_is_merged_without_holding_it_in_ram(tmp_path: Path, large: str) -> None:
    """16 MB of HISTORY.md on either side: the merge's Python allocations (a MiB written at a
    time, a MiB copied at a time) stay under half the file; whole texts, their entries and
    the joined result held it several times over."""
    workspaces = Workspaces(tmp_path / "workspaces")
    big, small = workspaces.get("discord-77"), workspaces.get("telegram-42")
    if large == "staying":
        big, small = small, big
    line = "Talked about the garden and the bees, in some detail; nothing urgent at all. " * 3
    with open(big.history_path, "w", encoding="utf-8") as out:
        for n in range(64_000):
            day, minute = divmod(n, 1440)
            out.write(f"[2020-{day // 28 + 1:02d}-{day % 28 + 1:02d} ")
            out.write(f"{minute // 60:02d}:{minute % 60:02d}] {line}{n}.\n\n")
    size = big.history_path.stat().st_size
    assert size > 15_000_000
    small.memory.append_history("[2020-01-05 10:00] Another account's entry.")
    tracemalloc.start()
    try:
        merged = merge(workspaces, LinkTable(workspaces.base_dir), "discord-77", "telegram-42")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert merged.entries == (1 if large == "staying" else 64_000)
    assert peak < size / 2, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB HISTORY.md"
    history = workspaces.get("telegram-42").history_path.read_text()
    assert history.count("Another account's entry.") == 1
    at = history.index("[2020-01-05 10:00] Another account")  # by time
    assert history.index("[2020-01-05 09:59] ") < at < history.index("[2020-01-05 10:01] ")
