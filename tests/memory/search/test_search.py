"""History search: what a user sees from /recall and the agent from its search tool."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.search import engine as search_module
from memory.search.engine import SearchError, search_history


def write_history(path: Path, *entries: str) -> Path:
    """HISTORY.md exactly as the store writes it: one blank line between entries."""
    path.write_text("\n\n".join(entries) + "\n", encoding="utf-8")
    return path


def stamps(result) -> list[str]:
    return [hit.timestamp for hit in result.hits]


def marked(hit) -> list[str]:
    return [hit.text[s:e] for s, e in hit.spans]


@pytest.fixture
def history(tmp_path: Path) -> Path:
    return tmp_path / "HISTORY.md"


def test_partial_matches_are_ranked_not_dropped(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 09:00] Booked flights to Lisbon for the conference.",
        "[2026-01-02 09:00] Lisbon hotel confirmed near the river.",
        "[2026-01-03 09:00] Bought a new keyboard.",
    )
    result = search_history(history, "lisbon hotel booking")
    assert result.total == 2  # no entry holds all three words, yet both Lisbon entries come back
    assert stamps(result) == ["2026-01-02 09:00", "2026-01-01 09:00"]


def test_rare_words_weigh_more(history: Path) -> None:
    common = [f"[2026-01-{d:02d} 10:00] Worked on the project today." for d in range(1, 9)]
    write_history(
        history,
        "[2026-02-01 10:00] Fixed the flaky Kubernetes deploy.",  # the rare word
        *common,
        "[2026-02-02 10:00] Project planning meeting.",  # the common word, and newer
    )
    result = search_history(history, "kubernetes project")
    assert result.hits[0].timestamp == "2026-02-01 10:00"


def test_entry_with_every_word_comes_first(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Alice and Bob reviewed the budget.",
        "[2026-01-02 10:00] Zygomorphic zygomorphic zygomorphic flowers everywhere.",
        "[2026-01-03 10:00] Alice went home.",
    )
    # the rare word repeated scores high, but only the first entry holds both words
    result = search_history(history, "alice zygomorphic budget")
    assert result.hits[0].timestamp == "2026-01-01 10:00"


def test_ties_go_to_the_newest(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Paid the rent.",
        "[2026-03-01 10:00] Paid the rent.",
        "[2026-02-01 10:00] Paid the rent.",
    )
    result = search_history(history, "rent")
    assert stamps(result) == ["2026-03-01 10:00", "2026-02-01 10:00", "2026-01-01 10:00"]
    assert len({hit.score for hit in result.hits}) == 1


def test_keywords_match_case_insensitively_inside_words(history: Path) -> None:
    write_history(history, "[2026-01-01 10:00] Deployed the PostgreSQL migration.")
    result = search_history(history, "postgres MIGRAT")
    assert result.total == 1
    # "migrat" is the stem of "migration", so the whole word is one of its forms
    assert marked(result.hits[0]) == ["PostgreS", "migration"]


def test_quoted_phrase_matches_exactly(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] The red car was sold.",
        "[2026-01-02 10:00] A car, painted red.",
    )
    result = search_history(history, '"RED CAR"')
    assert result.total == 1
    assert result.hits[0].timestamp == "2026-01-01 10:00"
    assert marked(result.hits[0]) == ["red car"]


def test_punctuation_around_words_is_ignored(history: Path) -> None:
    write_history(history, "[2026-01-01 10:00] We talked about python packaging.")
    assert search_history(history, "what about python?").total == 1


def test_regex_search(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Ticket ABC-123 opened.",
        "[2026-01-02 10:00] Ticket abc-9 closed.",
        "[2026-01-03 10:00] No tickets today.",
    )
    result = search_history(history, r"abc-\d{3}\b", regex=True)
    assert result.total == 1
    assert marked(result.hits[0]) == ["ABC-123"]


@pytest.mark.parametrize("pattern", ["(unclosed", "a{2,1}", "*star", "[z-a]"])
def test_invalid_regex_is_a_clear_error(history: Path, pattern: str) -> None:
    write_history(history, "[2026-01-01 10:00] anything")
    with pytest.raises(SearchError, match="Invalid regular expression"):
        search_history(history, pattern, regex=True)


@pytest.mark.parametrize(
    ("pattern", "feature"),
    [
        (r"(ab)\1", "backreferences"),
        ("(?P<x>a)(?P=x)", "backreferences"),
        ("foo(?=bar)", "lookahead"),
        ("(?<!x)bar", "lookbehind"),
        ("(?>a+)b", "atomic groups"),
        ("a++", "possessive"),
    ],
)
def test_regex_syntax_of_a_backtracking_engine_is_refused_clearly(
    history: Path, pattern: str, feature: str
) -> None:
    write_history(history, "[2026-01-01 10:00] abab foobar")
    with pytest.raises(SearchError, match=f"Unsupported regular expression: .*{feature}") as info:
        search_history(history, pattern, regex=True)
    assert "\n" not in str(info.value)


# Patterns that take exponential (or high polynomial) time in a backtracking engine, on an entry
# of 255 characters that almost matches. The linear-time engine answers them, correctly; the
# timeout only guards against a hang (speed is measured in bench/memory_bench.py).
@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("pattern", "total"),
    [
        (".*.*.*.*z", 0),
        ("(a+)+$", 1),
        ("(a+)+b", 0),
        ("(a*)*b", 0),
        ("(a|aa)*c", 0),
        ("(.*a){20}", 1),
        ("(x?){30}x{30}", 0),
        ("(a|a)*y", 0),
    ],
)
def test_catastrophic_regex_is_answered_at_once(history: Path, pattern: str, total: int) -> None:
    write_history(history, "[2026-01-01 10:00] " + "a" * 236, "[2026-01-02 10:00] " + "a" * 236)
    result = search_history(history, pattern, regex=True)
    assert result.total == 2 * total
    if total:
        assert marked(result.hits[0])[0].endswith("a" * 40)


def test_ordinary_regexes_are_allowed(history: Path) -> None:
    write_history(history, "[2026-01-01 10:00] foo bar foobar")
    assert search_history(history, "(foo|bar)+", regex=True).total == 1
    assert search_history(history, r"fo+\s+ba[rz]", regex=True).total == 1


def test_regex_matching_empty_text_is_refused(history: Path) -> None:
    write_history(history, "[2026-01-01 10:00] anything")
    with pytest.raises(SearchError, match="empty"):
        search_history(history, "x*", regex=True)


@pytest.mark.parametrize("query", ["", "   ", '""', '"  "'])
def test_empty_query_is_an_error(history: Path, query: str) -> None:
    write_history(history, "[2026-01-01 10:00] anything")
    with pytest.raises(SearchError):
        search_history(history, query)


RAW = (
    "[2026-01-05 12:00] [RAW] 3 messages\n"
    "[2026-01-05 11:58] USER: where did I park?\n"
    "[2026-01-05 11:59] ASSISTANT [tools: search_history]: Level 3, spot 42.\n"
    "[2026-01-05 12:00] USER: thanks"
)


def test_raw_entry_is_returned_whole(history: Path) -> None:
    write_history(history, "[2026-01-04 10:00] Before.", RAW, "[2026-01-06 10:00] After.")
    result = search_history(history, "spot 42")
    assert result.total == 1
    hit = result.hits[0]
    assert hit.timestamp == "2026-01-05 12:00"
    assert hit.text == RAW
    assert search_history(history, r"^\[2026-01-05 11:58\]", regex=True).hits[0].text == RAW


def test_missing_file_is_an_empty_result(tmp_path: Path) -> None:
    result = search_history(tmp_path / "nope" / "HISTORY.md", "anything")
    assert result.hits == [] and result.total == 0


def test_limit_and_offset_page_through_results(history: Path) -> None:
    write_history(history, *(f"[2026-01-{d:02d} 10:00] standup notes" for d in range(1, 13)))
    first = search_history(history, "standup", limit=5)
    second = search_history(history, "standup", limit=5, offset=5)
    last = search_history(history, "standup", limit=5, offset=10)
    assert first.total == second.total == last.total == 12
    assert stamps(first) == [f"2026-01-{d:02d} 10:00" for d in range(12, 7, -1)]
    assert stamps(second) == [f"2026-01-{d:02d} 10:00" for d in range(7, 2, -1)]
    assert stamps(last) == ["2026-01-02 10:00", "2026-01-01 10:00"]
    assert search_history(history, "standup", offset=50).hits == []


def test_non_ascii_keywords_match_any_case(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Wrote the ÜNÏCODE handbook.",
        "[2026-01-02 10:00] Moved to Hauptstrasse; the STRASSE sign is old.",
        "[2026-01-03 10:00] Visited Σωκράτης museum.",
    )
    result = search_history(history, "ünïcode")
    assert result.total == 1 and marked(result.hits[0]) == ["ÜNÏCODE"]
    assert search_history(history, "Straße").total == 1
    assert search_history(history, "σωκράτης").total == 1
    assert search_history(history, "σωκ.άτης", regex=True).total == 1


def test_matches_across_chunk_boundaries(history: Path, monkeypatch) -> None:
    monkeypatch.setattr(search_module, "CHUNK_BYTES", 64)
    long_raw = "[2026-01-01 10:00] [RAW] 40 messages\n" + "\n".join(
        f"[2026-01-01 09:{i:02d}] USER: filler line {i} ünïcode" for i in range(40)
    )
    entries = [f"[2026-01-02 {h:02d}:00] note {h} about needle{h}" for h in range(20)]
    write_history(history, long_raw, *entries)
    result = search_history(history, "needle", limit=50)
    assert result.total == 20
    assert all(hit.text.startswith("[2026-01-02") for hit in result.hits)
    raw = search_history(history, "filler line 39")
    assert raw.hits[0].text == long_raw
    assert search_history(history, "line 39", regex=True).hits[0].text == long_raw


def test_reads_a_file_written_by_the_memory_store(tmp_path: Path) -> None:
    store_module = pytest.importorskip("memory.store")
    store = store_module.MemoryStore(tmp_path)
    store.append_history("Chose Postgres for the billing service.", datetime(2026, 1, 1, 9, 0))
    store.append_history(RAW)
    store.append_history("Billing service launched.", datetime(2026, 1, 7, 9, 0))
    result = search_history(store.history_path, "billing postgres")
    assert stamps(result) == ["2026-01-01 09:00", "2026-01-07 09:00"]
    assert search_history(store.history_path, "spot").hits[0].text == RAW


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=st.one_of(st.text(max_size=40), st.text(alphabet='()[]{}*+?|\\.^$-,:"aü1 ', max_size=30)),
    regex=st.booleans(),
)
def test_any_query_either_works_or_is_a_search_error(
    history: Path, query: str, regex: bool
) -> None:
    if not history.exists():
        write_history(history, "[2026-01-01 10:00] Ünïcode (a+) [x] \\d *", RAW)
    try:
        result = search_history(history, query, regex=regex)
    except SearchError:
        return
    assert result.total >= len(result.hits)


def test_filler_words_of_a_question_are_not_searched(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Appointment with Dr. Lindqvist about migraines.",
        "[2026-01-02 10:00] What did I do today? My desk, my chair, my mysql dump.",
        "[2026-01-03 10:00] Dr. Novak said the migraines come from sleep.",
    )
    result = search_history(history, "What did Dr. Lindqvist say about my migraines?")
    # "what", "did", "dr", "about", "my" name nothing: the diary entry full of them is not a match
    assert result.total == 2
    assert stamps(result) == ["2026-01-01 10:00", "2026-01-03 10:00"]
    assert marked(result.hits[0]) == ["Lindqvist", "migraines"]


def test_a_query_of_only_filler_words_still_searches_them(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Tickets for The Who are booked.",
        "[2026-01-02 10:00] Bought apples.",
    )
    result = search_history(history, "the who")
    assert stamps(result) == ["2026-01-01 10:00"]
    assert marked(result.hits[0]) == ["The", "Who"]


def test_a_quoted_phrase_of_filler_words_counts(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Read Hamlet aloud: to be or not to be, that is the question.",
        "[2026-01-02 10:00] Watched Hamlet.",  # shorter and newer: first on "hamlet" alone
    )
    result = search_history(history, '"to be" hamlet')
    assert stamps(result) == ["2026-01-01 10:00", "2026-01-02 10:00"]
    assert "to be" in marked(result.hits[0])


def test_a_blank_line_and_bracket_inside_an_entry_do_not_split_it(history: Path) -> None:
    entry = "[2026-01-02 10:00] Budget notes, 40 euros.\n\n[draft] rent 900 euros\n\n[x] more euros"
    many = [f"[2026-01-03 {h:02d}:00] Paid {h} euros." for h in range(20)]
    write_history(history, "[2026-01-01 10:00] Paid 5 euros.", entry, *many)
    result = search_history(history, "draft", limit=50)
    assert result.total == 1 and result.hits[0].text == entry
    result = search_history(history, "euros", limit=50)
    assert result.total == 22
    assert entry in [hit.text for hit in result.hits]
    assert all(hit.text.startswith("[2026-") for hit in result.hits)


ENTRY_WORDS = [
    "euros",
    "Euros",
    "paid",
    "rent",
    "\n\n[note]",
    "\n[2026-01-01 09:00] USER:",
    "ü",
    "x",
]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    bodies=st.lists(
        st.lists(st.sampled_from(ENTRY_WORDS), min_size=1, max_size=12), min_size=1, max_size=30
    ),
    query=st.sampled_from(["euros", "rent paid", "note", "paid euros x", "ü euros"]),
    chunk=st.sampled_from([48, 100, 1024 * 1024]),
)
def test_results_match_a_plain_reading_of_the_file(
    tmp_path: Path, monkeypatch, bodies: list[list[str]], query: str, chunk: int
) -> None:
    entries = [
        f"[2026-02-{i % 28 + 1:02d} 10:{i % 60:02d}] " + " ".join(b) for i, b in enumerate(bodies)
    ]
    path = write_history(tmp_path / "HISTORY.md", *entries)
    words = [w.lower() for w in query.split() if len(w) > 1 or query.count(" ") == 0]
    expected = sorted(e for e in entries if any(w in e.lower() for w in words))
    monkeypatch.setattr(search_module, "CHUNK_BYTES", chunk)
    result = search_history(path, query, limit=100)
    assert result.total == len(expected)
    assert sorted(hit.text for hit in result.hits) == expected
    monkeypatch.setattr(search_module, "CHUNK_BYTES", 1024 * 1024)
    same = search_history(path, query, limit=100)
    assert [(h.text, h.score) for h in same.hits] == [(h.text, h.score) for h in result.hits]


# ---- word forms and dates ------------------------------------------------------------------

NOW = datetime(2026, 5, 20, 12, 0, tzinfo=UTC)


def test_other_forms_of_a_word_are_found(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Hiked up the Brocken with Ada.",
        "[2026-01-02 10:00] Two new dog beds arrived.",
        "[2026-01-03 10:00] The hiker hut was closed.",  # "hiker" is another word, not a form
    )
    hiking = search_history(history, "hiking trips")
    assert stamps(hiking) == ["2026-01-01 10:00"]
    assert marked(hiking.hits[0]) == ["Hiked"]
    assert ("form", "hiked") in hiking.hits[0].why
    assert stamps(search_history(history, "dogs")) == ["2026-01-02 10:00"]
    hike = search_history(history, "hike")  # as grep would, "hike" is found inside "hiker"
    assert stamps(hike) == ["2026-01-01 10:00", "2026-01-03 10:00"]
    assert hike.hits[1].why == [("part", "hike")]


def test_the_exact_word_ranks_above_its_other_forms(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] Went hiking in the Alps.",
        "[2026-01-02 10:00] Hiked in the Alps.",  # newer and shorter, but another form
        "[2026-01-03 10:00] Hikes in the Alps.",
    )
    result = search_history(history, "hiking")
    assert result.total == 3
    assert result.hits[0].timestamp == "2026-01-01 10:00"
    assert result.hits[0].why == [("word", "hiking")]


def test_a_quoted_phrase_does_not_match_other_forms(history: Path) -> None:
    write_history(
        history,
        "[2026-01-01 10:00] We went hiking together.",
        "[2026-01-02 10:00] We hiked together.",
    )
    assert stamps(search_history(history, '"hiking together"')) == ["2026-01-01 10:00"]
    assert stamps(search_history(history, '"hiking"')) == ["2026-01-01 10:00"]


def test_dates_in_the_question_pick_the_entries_of_then(history: Path) -> None:
    write_history(
        history,
        "[2026-05-12 18:00] Dinner at Blue Door, the ramen was great.",  # last week
        "[2026-03-03 18:00] Dinner at Casa Nova with Ben.",  # in March
        "[2026-05-19 18:00] Dinner at home.",  # yesterday
        "[2026-05-20 09:00] Dinner plans.",  # today: the newest, and shortest
    )
    for question, stamp in [
        ("where did we have dinner last week", "2026-05-12 18:00"),
        ("dinner in March", "2026-03-03 18:00"),
        ("what did I eat yesterday for dinner", "2026-05-19 18:00"),
        ("dinner on 12 May", "2026-05-12 18:00"),
        ("dinner", "2026-05-20 09:00"),
    ]:
        result = search_history(history, question, now=NOW)
        assert result.hits[0].timestamp == stamp, question
        assert result.total == 4, question  # the other dinners still come, after
    dated = search_history(history, "dinner last week", now=NOW).hits[0]
    assert ("date", "last week") in dated.why


def test_a_date_alone_lists_that_time_newest_first(history: Path) -> None:
    write_history(
        history,
        "[2025-12-30 10:00] Packed for the trip.",
        "[2026-05-19 08:00] Ran 5 km.",
        "[2026-05-19 20:00] Called Ben.",
        "[2026-05-20 09:00] Coffee.",
    )
    result = search_history(history, "what did I do yesterday?", now=NOW)
    assert stamps(result) == ["2026-05-19 20:00", "2026-05-19 08:00"]
    assert stamps(search_history(history, "2025", now=NOW)) == ["2025-12-30 10:00"]


def test_a_date_written_in_an_entry_counts(history: Path) -> None:
    write_history(
        history,
        "[2026-02-01 10:00] Dentist appointment booked for 12 May, 9:00.",
        "[2026-04-01 10:00] Dentist said all is fine.",
    )
    result = search_history(history, "when is the dentist on May 12th", now=NOW)
    assert result.hits[0].timestamp == "2026-02-01 10:00"
    assert "12 May" in marked(result.hits[0])
    # "May 1" is not in "May 12": a date matches as a whole
    assert stamps(search_history(history, "dentist on 1 May", now=NOW))[0] == "2026-04-01 10:00"


@pytest.mark.parametrize(
    "query",
    ["on 31 February", "999 years ago", "in the past 999 months", "May 0", "2099", "0 days ago"],
)
def test_odd_dates_are_searched_or_ignored_never_an_error(history: Path, query: str) -> None:
    write_history(history, "[2026-02-28 10:00] Paid rent on 28 February.")
    result = search_history(history, query, now=NOW)
    assert result.total >= len(result.hits)


# ---- the remembered scans: never stale, bounded ----------------------------------------------


def test_a_remembered_scan_never_hides_a_change_to_the_file(history: Path) -> None:
    write_history(history, "[2026-01-01 10:00] Paid the rent.", "[2026-01-02 10:00] Rent again.")
    assert search_history(history, "rent").total == 2
    assert search_history(history, "rent").total == 2  # answered from what the scan found
    store = pytest.importorskip("memory.store").MemoryStore(history.parent)
    store.append_history("Rent is due.", datetime(2026, 1, 3, 10, 0, tzinfo=UTC))
    assert stamps(search_history(history, "rent"))[0] == "2026-01-03 10:00"
    # rewritten in place to the very same size, at once: the change still shows
    text = history.read_text(encoding="utf-8")
    with history.open("r+", encoding="utf-8") as f:
        f.write(text.replace("Rent again.", "Cats again."))
    assert search_history(history, "rent").total == 2
    assert search_history(history, "cats").total == 1
    history.unlink()
    assert search_history(history, "rent").total == 0


def test_remembered_scans_are_bounded_and_change_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = search_module.ScanCache(max_rows=50)  # one keyword of 40 entries fits, not two
    monkeypatch.setattr(search_module, "SCANS", small)
    path = write_history(
        tmp_path / "HISTORY.md",
        *(f"[2026-01-{d % 28 + 1:02d} {d % 24:02d}:00] paid {d} euros, rent" for d in range(40)),
    )
    queries = ["euros", "paid rent", "rent", "paid euros rent"]
    fresh = {}
    for q in queries:
        small.clear()
        fresh[q] = [(h.text, h.score) for h in search_history(path, q, limit=7, offset=3).hits]
    for _ in range(2):
        for q in queries:
            again = search_history(path, q, limit=7, offset=3)
            assert [(h.text, h.score) for h in again.hits] == fresh[q]
            assert 0 < small.rows <= 50


# ---- the bulk scan of bare keywords (memory/search/word_scan.py) against the careful one ---

BULK_WORDS = ["paid", "Paid,", "pays", "unpaid", "euro", "euros", "(12 euros)", "late", "later"]
BULK_WORDS += ["latency", "plate", "flat", "neuro", "LATE.", "ü", "paid paid", "2026", "ünpaid"]


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    bodies=st.lists(
        st.lists(st.sampled_from(BULK_WORDS), min_size=1, max_size=10), min_size=1, max_size=25
    ),
    query=st.sampled_from(["paid euros late", "euros", "late", "paid 2026", "pays unpaid"]),
    b=st.sampled_from([0.0, 0.75]),
)
def test_the_bulk_scan_ranks_as_the_careful_scan_does(
    tmp_path: Path, monkeypatch, bodies: list[list[str]], query: str, b: float
) -> None:
    """Keywords after a ``\n\n[`` that starts no entry make the region's scan check every edge
    as it is found (the careful scan); the same ``\n\n[`` in an entry without keywords leaves
    it to the bulk scan. Same words, lengths and edges otherwise: the very same scores."""
    entries = [
        f"[2026-03-{i % 28 + 1:02d} {i % 24:02d}:00] " + " ".join(words)
        for i, words in enumerate(bodies)
    ]
    first, other = "[2026-01-01 10:00] ", "[2026-01-01 11:00] yy\n\n"
    careful = [f"{first}zz\n\n[note] {query}", other + "(x)", *entries]
    bulk = [f"{first}{query}\n\n(note) zz", other + "[x]", *entries]
    monkeypatch.setattr(search_module, "BM25_B", b)
    search_module.SCANS.clear()
    slow = search_history(write_history(tmp_path / "careful.md", *careful), query, limit=100)
    fast = search_history(write_history(tmp_path / "bulk.md", *bulk), query, limit=100)
    assert fast.total == slow.total
    assert [(h.timestamp, h.score) for h in fast.hits] == [
        (h.timestamp, h.score) for h in slow.hits
    ]
    same = {bulk[0]: careful[0], bulk[1]: careful[1]}
    assert [h.text for h in slow.hits] == [same.get(h.text, h.text) for h in fast.hits]


def test_an_entry_shown_is_whole_past_brackets_and_long(history: Path) -> None:
    """Ranking needs no entry lengths, so an entry found in bulk is read to the next real entry
    when it is shown: past a ``\\n\\n[`` that starts none, however long the entry is."""
    brackets = "[2026-01-02 10:00] Paid 40 euros.\n\n[draft] rent\n\n[x] more"
    long = "[2026-01-03 10:00] Paid the bill.\n" + "line of a long entry\n" * 9000 + "\n\n[y] end"
    write_history(
        history, "[2026-01-01 10:00] Paid 5 euros.", brackets, long, "[2026-01-04 10:00] ok"
    )
    shown = {hit.timestamp: hit.text for hit in search_history(history, "paid").hits}
    assert shown == {
        "2026-01-01 10:00": "[2026-01-01 10:00] Paid 5 euros.",
        "2026-01-02 10:00": brackets,
        "2026-01-03 10:00": long,
    }


def test_keywords_remembered_from_another_query_answer_as_a_fresh_scan(tmp_path: Path) -> None:
    """A scan of several keywords remembers them over the entries holding any of them; a later
    query with only some of them (or others too) must still see just its own matches."""
    entries = [
        f"[2026-02-{d % 28 + 1:02d} {d % 24:02d}:00] "
        + ["Paid the rent late.", "Paid 40 euros.", "Bought a plate.", "Ran later", "rent"][d % 5]
        for d in range(60)
    ]
    path = write_history(tmp_path / "HISTORY.md", *entries)
    queries = ["paid euros late", "paid euros", "euros", "late rent", "paid", "rent late euros"]

    def answers(query: str) -> tuple[int, list[tuple[str, float]]]:
        result = search_history(path, query, limit=60, offset=2)
        return result.total, [(h.text, h.score) for h in result.hits]

    fresh = {}
    for query in queries:
        search_module.SCANS.clear()
        fresh[query] = answers(query)
    for first in queries:
        search_module.SCANS.clear()
        answers(first)
        for query in queries:
            assert answers(query) == fresh[query], (first, query)


def test_keywords_in_one_sentence_beat_the_same_keywords_far_apart(history: Path) -> None:
    """A consolidated chat names Dawit in one topic and a birthday in another; the entry that
    says "Dawit's birthday" is the one asked about, though it is older."""
    write_history(
        history,
        "[2025-01-01 09:00] Noted down that Dawit's birthday is on the fifth of June.",
        "[2025-03-01 09:00] Dawit moved to Utrecht for a job. Also: Gift ideas for Theo's "
        "birthday: a hammock or a star map.",
    )
    result = search_history(history, "when is Dawit's birthday")
    assert stamps(result) == ["2025-01-01 09:00", "2025-03-01 09:00"]


def test_a_number_finds_itself_written_in_words(history: Path) -> None:
    write_history(
        history,
        "[2025-01-01 09:00] Transferred fifty-five euros to Mateo for the cabin.",
        "[2025-01-02 09:00] Transferred twenty euros to Mateo for dinner.",
        "[2025-01-03 10:55] Mateo called about nothing in particular.",
    )
    result = search_history(history, "did I pay Mateo 55 euros")
    assert stamps(result)[0] == "2025-01-01 09:00"
    assert ("number", "fifty-five") in result.hits[0].why
    assert "fifty-five" in marked(result.hits[0])
    # the stamp's 10:55 is no number said: the third entry matches by the name only
    third = next(h for h in result.hits if h.timestamp == "2025-01-03 10:55")
    assert all(kind != "number" and text != "55" for kind, text in third.why)


def test_a_date_asked_in_digits_finds_it_written_in_words(history: Path) -> None:
    write_history(
        history,
        "[2025-03-01 09:00] The Kestrel deadline is now the seventh of May.",
        "[2025-03-02 09:00] The Kestrel launch was moved again.",
    )
    now = datetime(2025, 4, 1, tzinfo=UTC)
    result = search_history(history, "is the Kestrel deadline May 7", now=now)
    assert stamps(result)[0] == "2025-03-01 09:00"
    assert ("date", "May 7") in result.hits[0].why


def test_one_typo_in_a_long_word_is_forgiven_only_when_the_word_is_nowhere(history: Path) -> None:
    write_history(
        history,
        "[2025-01-01 09:00] Eero recommended the podcast 'Deep Roots'.",
        "[2025-01-02 09:00] Pablo and Carmen plan to visit Gdańsk in July.",
        "[2025-01-03 09:00] The meeting was about the recommendation engine.",
        "[2025-01-04 09:00] Dinner with Carmel.",
    )
    result = search_history(history, "podcast Eero recomeend")
    assert stamps(result)[0] == "2025-01-01 09:00"
    assert ("typo", "recommended") in result.hits[0].why
    assert stamps(search_history(history, "Gdaesk trip")) == ["2025-01-02 09:00"]
    # a word that is there is never widened to its neighbours: "Carmen" is not "Carmel"
    assert stamps(search_history(history, "Carmen")) == ["2025-01-02 09:00"]


def test_a_query_asked_again_after_an_append_sees_the_new_entry(history: Path) -> None:
    """The remembered tally of a whole query belongs to one content of the file."""
    write_history(history, "[2025-01-01 09:00] Paid 40 euros late.")
    assert search_history(history, "paid euros late").total == 1
    with history.open("a", encoding="utf-8") as f:
        f.write("\n[2025-01-02 09:00] Paid 12 euros late again.\n")
    again = search_history(history, "paid euros late")
    assert again.total == 2 and stamps(again)[0] == "2025-01-02 09:00"


def test_a_regex_asked_again_is_answered_alike_and_sees_an_append(history: Path) -> None:
    """A regex's tally is remembered by its text: the same answer, until the file changes."""
    write_history(history, "[2025-01-01 09:00] Deadlock in billing.", "[2025-01-02 09:00] ok")
    first = search_history(history, r"dead\w+ in (billing|search)", regex=True)
    again = search_history(history, r"dead\w+ in (billing|search)", regex=True)
    assert [(h.text, h.score) for h in first.hits] == [(h.text, h.score) for h in again.hits]
    with history.open("a", encoding="utf-8") as f:
        f.write("\n[2025-01-03 09:00] Deadlocked in search again.\n")
    assert stamps(search_history(history, r"dead\w+ in (billing|search)", regex=True)) == [
        "2025-01-03 09:00",
        "2025-01-01 09:00",
    ]


def test_a_rare_word_beats_more_of_the_common_words(history: Path) -> None:
    """Two friends' sessions: "Jonas Lofoten trip photos" asks for the one where Jonas told of
    Lofoten. The later sessions hold three of the keywords (Jonas, "trip", "photos", said of
    nothing in particular in every chat) but not Lofoten; ranking entries by how many keywords
    they hold put all of them first, the one meant sixth."""
    write_history(
        history,
        "[2025-01-04 19:00] Session 3 of Maya and Jonas's chat.\n"
        "Jonas: We just got back from Lofoten, the cliffs were unreal.\nMaya: No way!",
        *[
            f"[2025-02-0{d} 19:00] Session {d + 3} of Maya and Jonas's chat.\n"
            "Maya: We should plan a trip together one day.\n"
            "Jonas: Yes! I'll send you the photos of the kids first."
            for d in range(1, 8)
        ],
    )
    result = search_history(history, "Jonas Lofoten trip photos")
    assert stamps(result)[0] == "2025-01-04 19:00"
    assert ("word", "lofoten") in result.hits[0].why
