"""The word index beside HISTORY.md (memory/search/history_index.py): never needed for a right
answer (a search with it finds exactly what the scan finds), kept current as entries are
appended, seen stale when the file is replaced, and gone with the words /forget removes."""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import random
import struct
import time
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.keys import user_key
from memory.control.export import write_archive
from memory.control.forget import forget
from memory.search import history_index
from memory.search.engine import CHUNK_BYTES, SCANS, search_history
from memory.workspace import Workspaces
from tests.rigs.agent import ask, dm, make_agent
from tests.rigs.fakes.openai_server import FakeOpenAI, completion

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)

WORDS = str.split(
    "paid euros late rent invoice hiking hiked hikes hiker postgres PostgreSQL deadlock billing "
    "chocolate plate later latest translate kettle Lindqvist migraines Zürich café naïve "
    "electricity bill gym membership papaya papapa recommended recommend recommendation "
    "nineteen forty-two fifty-five fifth twenty-first thousand hundred and one two"
)
ODD = [
    "[not a stamp] still the entry before",
    "price 40 euros, 55 or fifty-five, 1999 and 2015",
    "late late LATE later chocolate",
    "Hiking, hiked; the hiker's hikes",
    "paid-up prepaid unpaid paid",
    "forty-two or forty two or Forty-Two",
    "éforty é-forty fortyé",
    "a PostgreSQL postgres-ish Postgres",
]


def history_text(seed: int, entries: int, shuffled: bool = False) -> str:
    """Entries of the consolidator's shape, with what trips a search: forms, parts, numbers in
    digits and words, non-ASCII words, fake entry edges, one-line RAW archives."""
    r = random.Random(seed)
    when = datetime(2020, 1, 1, 8, 0)
    out = []
    for i in range(entries):
        when += timedelta(minutes=r.randrange(1, 200))
        stamp = when if not shuffled or r.random() < 0.8 else when - timedelta(days=400)
        words = " ".join(r.choice(WORDS) for _ in range(r.randrange(3, 30)))
        if r.random() < 0.15:
            words += "\n\n" + r.choice(ODD)
        if r.random() < 0.03:
            words = "[RAW] 3 messages\n" + "\n".join(
                f"[{stamp:%Y-%m-%d %H:%M}] USER: {r.choice(WORDS)} {i}" for _ in range(3)
            )
        out.append(f"[{stamp:%Y-%m-%d %H:%M}] {words}")
    return "\n\n".join(out) + "\n"


QUERIES = [
    "euros",
    "paid euros late",
    "hiking",
    "hikes",
    "postgres",
    "late",
    "papaya",
    "Lindqvist migraines",
    "what did Dr. Lindqvist say about my migraines",
    "40",
    "paid 55 euros",
    "42 kettle",
    "5",
    "21",
    "1999",
    "2015",
    "Lindqvst",  # a typo: one edit from Lindqvist
    "recomeend",
    "migranes billing",
    '"electricity bill"',
    "Zürich",
    "café",
    "in March",
    "last week paid",
    "nothingatall",
    "deadlock",
]


@pytest.fixture
def small_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Index even a small history, in several segments, persisting appends early; no
    background builds (a test builds when it means to)."""
    monkeypatch.setattr(history_index, "MIN_BYTES", 0)
    monkeypatch.setattr(history_index, "SEGMENT_BYTES", 64 * 1024)
    monkeypatch.setattr(history_index, "LIVE_BYTES", 8 * 1024)
    monkeypatch.setattr(history_index, "AUTO_BUILD", False)


def answers(
    path: Path, query: str, regex: bool = False, limit: int = 8
) -> tuple[int, list[object]]:
    SCANS.clear()  # the scan's remembered hits would hide which way the answer came
    result = search_history(path, query, limit=limit, regex=regex, now=NOW)
    return result.total, [(h.timestamp, h.text, h.score, h.spans, h.why) for h in result.hits]


def without_index(
    path: Path, query: str, regex: bool = False, limit: int = 8
) -> tuple[int, list[object]]:
    kept = history_index.index_path(path).with_suffix(".kept")
    os.rename(history_index.index_path(path), kept)
    try:
        assert history_index.lookup(path, CHUNK_BYTES) is None
        return answers(path, query, regex, limit)
    finally:
        os.rename(kept, history_index.index_path(path))


def assert_same_answers(path: Path) -> None:
    index = history_index.lookup(path, CHUNK_BYTES)
    assert index is not None, "the index should be current"
    for query in QUERIES:
        assert answers(path, query) == without_index(path, query), query
    for pattern in (r"dead\w+ in (billing|search)", r"^\[2020-0"):
        assert answers(path, pattern, True) == without_index(path, pattern, True), pattern


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_search_with_the_index_finds_what_the_scan_finds(
    tmp_path: Path, small_index: None, shuffled: bool
) -> None:
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(1, 4000, shuffled), encoding="utf-8")
    assert history_index.build(path, CHUNK_BYTES)
    index = history_index.lookup(path, CHUNK_BYTES)
    assert index is not None and len(index.segments) > 3
    read = path.read_bytes  # the index answers the keywords itself (no scan behind it)
    for query in ("euros", "40", "Lindqvst"):
        term = history_index_terms(query)
        assert history_index.hits(index, term, lambda s, n: read()[s : s + n]) is not None
    assert_same_answers(path)


def history_index_terms(query: str):  # type: ignore[no-untyped-def]
    from memory.search.terms import parse_query, typo_term

    word = parse_query(query, False, NOW).words[0]
    return typo_term(query) if query == "Lindqvst" else word


def test_appended_entries_are_found_as_the_scan_finds_them(
    tmp_path: Path, small_index: None
) -> None:
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(2, 1500), encoding="utf-8")
    assert history_index.build(path, CHUNK_BYTES)
    first = len(history_index.lookup(path, CHUNK_BYTES).segments)  # type: ignore[union-attr]
    extra = history_text(3, 300).replace("[2020-", "[2031-")
    with path.open("a", encoding="utf-8") as f:  # as consolidation appends, a few at a time
        f.write("\n" + extra)
    assert_same_answers(path)  # the new entries indexed in memory, then persisted
    index = history_index.lookup(path, CHUNK_BYTES)
    assert index is not None and len(index.segments) > first
    assert answers(path, "papaya")[0] == without_index(path, "papaya")[0]
    with path.open("a", encoding="utf-8") as f:  # a little more: past the last segment only
        f.write("\n[2032-01-01 10:00] a quokka at the very end\n")
    assert answers(path, "quokka")[1][0][1] == "[2032-01-01 10:00] a quokka at the very end"
    assert_same_answers(path)


def test_a_replaced_history_makes_the_index_stale(tmp_path: Path, small_index: None) -> None:
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(4, 1500), encoding="utf-8")
    assert history_index.build(path, CHUNK_BYTES)
    assert history_index.lookup(path, CHUNK_BYTES) is not None
    text = path.read_text(encoding="utf-8").replace("kettle", "qwerty")  # same size
    tmp = tmp_path / "new"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # as memory.atomic replaces a file
    assert history_index.lookup(path, CHUNK_BYTES) is None
    assert answers(path, "kettle") == (0, [])
    assert history_index.build(path, CHUNK_BYTES)
    assert_same_answers(path)


def test_an_edit_in_place_makes_the_index_stale(tmp_path: Path, small_index: None) -> None:
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(5, 1500), encoding="utf-8")
    assert history_index.build(path, CHUNK_BYTES)
    data = bytearray(path.read_bytes())
    at = data.rfind(b"papaya")
    data[at : at + 6] = b"mangos"
    with path.open("r+b") as f:  # same inode, same size
        f.write(data)
    assert history_index.lookup(path, CHUNK_BYTES) is None


def test_a_torn_index_tail_is_ignored_and_cut_before_the_next_append(
    tmp_path: Path, small_index: None
) -> None:
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(6, 1500), encoding="utf-8")
    assert history_index.build(path, CHUNK_BYTES)
    index_file = history_index.index_path(path)
    whole = index_file.read_bytes()
    with index_file.open("ab") as f:  # a crash in the middle of appending a segment
        f.write(whole[len(whole) // 2 :][:5000])
    assert history_index.lookup(path, CHUNK_BYTES) is not None
    with path.open("a", encoding="utf-8") as f:
        f.write("\n" + history_text(7, 300).replace("[2020-", "[2031-"))
    assert_same_answers(path)
    history_index._OPEN.clear()
    index = history_index.lookup(path, CHUNK_BYTES)
    assert index is not None and index.sealed_end == index_file.stat().st_size


def test_a_crash_before_the_rename_leaves_the_old_index_or_none(
    tmp_path: Path, small_index: None
) -> None:
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(8, 800), encoding="utf-8")
    index_file = history_index.index_path(path)
    index_file.write_bytes(b"LGHIDX01" + b"\0" * 7)  # cut short: not an index
    assert history_index.lookup(path, CHUNK_BYTES) is None
    assert answers(path, "euros")[0] > 0


def test_forget_leaves_no_forgotten_word_in_the_index(tmp_path: Path, small_index: None) -> None:
    workspace = Workspaces(tmp_path).get("telegram-42")
    text = "[2019-01-01 10:00] the zanzibar trip was paid late\n\n" + history_text(9, 1500)
    workspace.root.mkdir(parents=True, exist_ok=True)
    workspace.history_path.write_text(text, encoding="utf-8")
    assert history_index.build(workspace.history_path, CHUNK_BYTES)
    assert answers(workspace.history_path, "zanzibar")[0] == 1
    index_file = history_index.index_path(workspace.history_path)
    assert b"zanzibar" in index_file.read_bytes()
    forget(workspace, "zanzibar")
    assert not index_file.exists() or b"zanzibar" not in index_file.read_bytes()
    assert answers(workspace.history_path, "zanzibar") == (0, [])
    assert history_index.build(workspace.history_path, CHUNK_BYTES)
    assert b"zanzibar" not in index_file.read_bytes()
    assert_same_answers(workspace.history_path)


def test_export_leaves_the_derived_index_out(tmp_path: Path, small_index: None) -> None:
    workspace = Workspaces(tmp_path).get("telegram-42")
    workspace.root.mkdir(parents=True, exist_ok=True)
    workspace.history_path.write_text(history_text(10, 500), encoding="utf-8")
    assert history_index.build(workspace.history_path, CHUNK_BYTES)
    buffer = io.BytesIO()
    write_archive(workspace.root, buffer)
    names = zipfile.ZipFile(io.BytesIO(buffer.getvalue())).namelist()
    assert "telegram-42/HISTORY.md" in names
    assert not any(name.endswith(".index") for name in names)


def test_a_small_history_gets_no_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_index, "AUTO_BUILD", False)
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(11, 200), encoding="utf-8")
    assert not history_index.build(path, CHUNK_BYTES)
    assert not history_index.index_path(path).exists()
    assert answers(path, "euros")[0] > 0


def test_an_index_walked_with_another_chunk_size_is_not_used(
    tmp_path: Path, small_index: None
) -> None:
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(12, 800), encoding="utf-8")
    assert history_index.build(path, CHUNK_BYTES)
    assert history_index.lookup(path, CHUNK_BYTES) is not None
    assert history_index.lookup(path, 4096) is None  # its entry estimate would differ


def test_a_link_merge_drops_the_index_of_the_history_it_rewrites(
    tmp_path: Path, small_index: None
) -> None:
    from memory.control.link import merge
    from memory.links import LinkTable

    workspaces = Workspaces(tmp_path)
    ours, theirs = workspaces.get("telegram-1"), workspaces.get("discord-2")
    for workspace, seed in ((ours, 13), (theirs, 14)):
        workspace.root.mkdir(parents=True, exist_ok=True)
        workspace.history_path.write_text(history_text(seed, 600), encoding="utf-8")
    theirs.memory.append_history("[2021-05-05 10:00] the quokka sanctuary visit")
    assert history_index.build(ours.history_path, CHUNK_BYTES)
    assert history_index.build(theirs.history_path, CHUNK_BYTES)
    merge(workspaces, LinkTable(tmp_path), "discord-2", "telegram-1")
    assert not history_index.index_path(ours.history_path).exists()
    assert not history_index.index_path(theirs.history_path).exists()
    assert answers(ours.history_path, "quokka")[0] == 1
    assert history_index.build(ours.history_path, CHUNK_BYTES)
    assert_same_answers(ours.history_path)


async def test_a_persons_first_message_prepares_the_index_of_a_big_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llm: FakeOpenAI
) -> None:
    """Their first search then answers from the index, instead of reading the whole file while
    they wait and only then starting the build."""
    monkeypatch.setattr(history_index, "MIN_BYTES", 64 * 1024)
    monkeypatch.setattr(history_index, "SEGMENT_BYTES", 64 * 1024)
    agent = make_agent(fake_llm, tmp_path / "workspaces")
    try:
        history = agent.workspaces.get(user_key("telegram", "42")).history_path
        history.write_text(history_text(7, 3000), "utf-8")
        assert history.stat().st_size > 64 * 1024
        fake_llm.queue(completion("Hello again."))
        assert (await ask(agent, dm("42", "hi"))).text == "Hello again."
        for _ in range(400):  # the build runs in a thread of its own: wait for its file
            if history_index.index_path(history).exists():
                break
            await asyncio.sleep(0.025)
        assert history_index.lookup(history, CHUNK_BYTES) is not None, "no index was built"
        assert answers(history, "paid euros late") == without_index(history, "paid euros late")
    finally:
        await agent.aclose()


DATE_QUERIES = [
    "last week",
    "in March",
    "on 2024-05-27",
    "yesterday",
    "on 12 May",
    "May 2023",
    "2023",
    "3 days ago",
    "last month",
    "the past 10 days",
    "paid last week",
    "euros in March",
    "on Monday",
    "this year",
    "late May",
    "hiking on 3 February 2024",
]


def dated_text(seed: int, entries: int, shuffled: bool) -> str:
    """Entries filed over the eighteen months before NOW, many naming dates in their text in
    every way a date query looks for them (and ways it must not take for one)."""
    r = random.Random(seed)
    when = datetime(2022, 12, 1, 8, 0)
    step = (NOW.replace(tzinfo=None) - when) / entries
    mentions = [
        "on {d} May", "May {d}th", "the twelfth of May", "{y}-05-{d:02d}", "in March", "{y}",
        "{y}-03-", "é{y}-05-27", "Mayé {d}", "twenty-first of may", "{d}rd of may",
        "may {d}", "I may go", "mayday {d}", "{y}-05-{d:02d}7", "x{y}-05-12", "{y}-13-01",
    ]  # fmt: skip
    out = []
    for _ in range(entries):
        when += step * r.uniform(0.5, 1.5)
        moved = shuffled and r.random() < 0.3
        stamp = when - timedelta(days=r.randrange(400)) if moved else when
        words = " ".join(r.choice(WORDS) for _ in range(r.randrange(3, 20)))
        if r.random() < 0.4:
            said = r.choice(mentions).format(d=r.randrange(1, 32), y=r.choice((2023, 2024)))
            words = f"{words} {said}" if r.random() < 0.5 else f"{said} {words}"
        if r.random() < 0.05:
            words += " due 2024-05-1"  # an ISO date cut short at the entry's end
        if r.random() < 0.04:
            words = "[RAW] 2 messages\n" + "\n".join(
                f"[{stamp - timedelta(days=k):%Y-%m-%d %H:%M}] USER: {r.choice(WORDS)}"
                for k in range(2)
            )
        out.append(f"[{stamp:%Y-%m-%d %H:%M}] {words}")
    return "\n\n".join(out) + "\n"


@pytest.mark.parametrize(("seed", "shuffled"), [(21, False), (22, True), (23, False)])
def test_date_queries_through_the_index_find_what_the_scan_finds(
    tmp_path: Path, small_index: None, seed: int, shuffled: bool
) -> None:
    from memory.search.terms import parse_query

    path = tmp_path / "HISTORY.md"
    path.write_text(dated_text(seed, 3000, shuffled), encoding="utf-8")
    assert history_index.build(path, CHUNK_BYTES)
    with path.open("a", encoding="utf-8") as f:  # some past the last segment: in memory
        f.write("\n" + dated_text(seed + 100, 40, shuffled).replace("[2022-", "[2024-"))
    index = history_index.lookup(path, CHUNK_BYTES)
    assert index is not None and len(index.segments) > 3 and index.live is not None
    data = path.read_bytes()
    for query in DATE_QUERIES:
        date_term = parse_query(query, False, NOW).date_term
        assert date_term is not None, query
        # answered from the index (no scan of the file behind it)
        assert history_index.hits(index, date_term, lambda s, n: data[s : s + n]) is not None
        got = answers(path, query, limit=5000)  # every entry found, in order
        assert got == without_index(path, query, limit=5000), query
        assert got[0] > 0, query


def test_the_index_is_at_most_a_quarter_of_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lists packed (memory/search/postings.py): it was 67-82 % of HISTORY.md's size."""
    monkeypatch.setattr(history_index, "MIN_BYTES", 0)
    monkeypatch.setattr(history_index, "SEGMENT_BYTES", 2**20)
    monkeypatch.setattr(history_index, "AUTO_BUILD", False)
    path = tmp_path / "HISTORY.md"
    path.write_text(history_text(31, 30000), encoding="utf-8")  # 4.5 MB
    assert history_index.build(path, CHUNK_BYTES)
    index = history_index.lookup(path, CHUNK_BYTES)
    assert index is not None and len(index.segments) > 3
    assert history_index.index_path(path).stat().st_size <= 0.25 * path.stat().st_size
    assert_same_answers(path)


def test_an_index_of_the_old_format_is_rebuilt_and_answers_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index written before the lists were packed (kept in data/, as the previous version
    wrote it for that history) is not read as one: searches scan, and it is rebuilt."""
    monkeypatch.setattr(history_index, "MIN_BYTES", 0)
    monkeypatch.setattr(history_index, "SEGMENT_BYTES", 16 * 1024)
    monkeypatch.setattr(history_index, "AUTO_BUILD", False)
    data = Path(__file__).parent / "data"
    path = tmp_path / "HISTORY.md"
    path.write_bytes(gzip.decompress((data / "v1-HISTORY.md.gz").read_bytes()))
    old = bytearray(gzip.decompress((data / "v1-HISTORY.md.index.gz").read_bytes()))
    st = path.stat()
    old[8:24] = struct.pack("<QQ", st.st_dev, st.st_ino)  # it describes this very file
    index_file = history_index.index_path(path)
    index_file.write_bytes(old)
    expected = {query: without_index(path, query) for query in QUERIES}
    monkeypatch.setattr(history_index, "AUTO_BUILD", True)
    assert history_index.lookup(path, CHUNK_BYTES) is None  # not used; a build started
    for _ in range(200):
        if index_file.read_bytes()[:8] != old[:8]:
            break
        time.sleep(0.05)
    index = history_index.lookup(path, CHUNK_BYTES)
    assert index is not None and index_file.stat().st_size < len(old)
    for query in QUERIES:
        assert answers(path, query) == expected[query], query
