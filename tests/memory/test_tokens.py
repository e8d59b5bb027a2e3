"""Token estimates: tiktoken with no network, what a message costs, caching, correction."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from memory.session import SessionStore
from memory.tokens import FACTOR_BOUNDS, OFFSET_BOUND, TokenEstimator
from tests.rigs import REPO as ROOT


def _run(code: str, env_extra: dict[str, str], tmp_path: Path) -> dict:
    """Run `code` in a fresh interpreter (fresh tiktoken state) and return its JSON output."""
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


NO_NETWORK = """
    import json, socket

    def refuse(*args, **kwargs):
        raise OSError("network unreachable (test)")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
"""


def test_tiktoken_works_with_the_network_unreachable(tmp_path: Path) -> None:
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    out = _run(
        NO_NETWORK
        + """
    import tiktoken
    try:
        tiktoken.get_encoding("cl100k_base")
        plain = "loaded"
    except Exception as exc:
        plain = type(exc).__name__

    from memory.tokens import TokenEstimator
    est = TokenEstimator()
    print(json.dumps({"plain": plain, "method": est.method,
                      "hello": est.count_text("hello world"),
                      "eot": est.count_text("a <|endoftext|> b")}))
    """,
        {
            "TIKTOKEN_CACHE_DIR": str(cache),
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9",
        },
        tmp_path,
    )
    assert out["plain"] != "loaded"  # the network really is unreachable: a download would fail
    assert out["method"] == "tiktoken"
    assert out["hello"] == 2  # cl100k_base: "hello", " world"
    assert out["eot"] > 3


def test_without_a_usable_temporary_folder_tokens_are_still_counted(tmp_path: Path) -> None:
    """A read-only root file system with no /tmp (a container run with --read-only alone):
    tempfile finds no folder, as CPython says. tiktoken copies even the bundled file into its
    cache there, so it cannot load: the estimate falls back to characters/4 rather than fail.
    With its cache switched off (TIKTOKEN_CACHE_DIR="", as the container image does) it loads."""
    code = """
    import json, tempfile
    def no_usable_folder():
        raise FileNotFoundError(2, "No usable temporary directory found in ['/tmp']")
    tempfile.gettempdir = no_usable_folder
    from memory.tokens import TokenEstimator
    est = TokenEstimator()
    print(json.dumps({"method": est.method, "hello": est.count_text("hello world")}))
    """
    assert _run(code, {}, tmp_path) == {"method": "chars/4", "hello": 3}
    assert _run(code, {"TIKTOKEN_CACHE_DIR": ""}, tmp_path) == {"method": "tiktoken", "hello": 2}


def test_without_tiktoken_falls_back_to_chars_over_4_with_one_warning(tmp_path: Path) -> None:
    out = _run(
        """
    import json, logging, sys
    sys.modules["tiktoken"] = None  # not installed
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)
    logging.getLogger().addHandler(Keep())
    from memory.tokens import TokenEstimator
    a, b = TokenEstimator(), TokenEstimator()
    warnings = [r for r in records if r.levelno == logging.WARNING]
    print(json.dumps({"method": a.method, "n": a.count_text("x" * 40), "one": b.count_text("x"),
                      "warnings": len(warnings)}))
    """,
        {},
        tmp_path,
    )
    assert out == {"method": "chars/4", "n": 10, "one": 1, "warnings": 1}


def test_tiktoken_counts_and_special_tokens_in_user_text() -> None:
    est = TokenEstimator()
    assert est.method == "tiktoken"
    assert est.count_text("") == 0
    assert est.count_text(" ") >= 1
    assert est.count_text("<|endoftext|>") > 1  # counted as text, not rejected
    assert est.count_text("word " * 1000) >= 1000


def test_message_counts_content_parts_tool_calls_id_and_name() -> None:
    est = TokenEstimator()
    empty = est.count_message({"role": "assistant", "content": None})
    assert empty > 0
    text = est.count_message({"role": "user", "content": "the quick brown fox"})
    parts = est.count_message(
        {"role": "user", "content": [{"type": "text", "text": "the quick brown fox"}]}
    )
    assert text == parts > empty
    args = json.dumps({"query": "a long list of search words " * 20})
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search_history", "arguments": args},
            }
        ],
    }
    assert est.count_message(call) > empty + 100
    result = {
        "role": "tool",
        "content": "",
        "tool_call_id": "call_abcdef123456",
        "name": "search_history",
    }
    assert est.count_message(result) > empty + 3


class CountingEncoding:
    """tiktoken's encoding, recording each text it is asked to encode."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.texts: list[str] = []

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self.texts.append(text)
        return self.encoding.encode(text, **kwargs)


def counting(est: TokenEstimator) -> CountingEncoding:
    est._encoding = CountingEncoding(est._encoding)
    return est._encoding


def test_prompt_tokens_counts_system_and_unconsolidated_messages(tmp_path: Path) -> None:
    est = TokenEstimator()
    store = SessionStore(tmp_path)
    session = store.get("s")
    for i in range(10):
        store.append(session, {"role": "user", "content": f"message number {i} " * 20})
    everything = est.prompt_tokens("You are helpful.", session)
    assert everything > 10 * 20 * 3
    assert est.session_tokens(session, 0) == sum(est.count_message(m) for m in session.messages)
    store.set_last_consolidated(session, 5)
    half = est.prompt_tokens("You are helpful.", session)
    assert half < everything


def test_a_turn_counts_only_new_messages(tmp_path: Path) -> None:
    est = TokenEstimator()
    counted = counting(est)
    store = SessionStore(tmp_path)
    session = store.get("s")
    for i in range(500):
        store.append(session, {"role": "user", "content": f"hello {i}"})
    first = est.prompt_tokens("system", session)
    assert len(counted.texts) >= 500
    counted.texts.clear()
    store.append(session, {"role": "assistant", "content": "new answer"})
    second = est.prompt_tokens("system", session)
    assert second > first
    assert len(counted.texts) <= 3  # the system prompt and the one new message, not the history


def test_a_fixed_difference_is_learned_as_an_offset() -> None:
    """A server that does not render ~300 tokens of tool schemas: after a few turns of growing
    prompts, short and long prompts alike are estimated within a few tokens. A ratio learned
    on the first turn alone would be far off (erring low) for the long ones."""
    est = TokenEstimator()
    for raw in (700, 760, 820, 900, 980):
        est.observe_usage(raw, raw - 300)
    for raw in (650, 1500, 4000):
        assert abs(est.corrected(raw) - (raw - 300)) <= 0.02 * raw


def test_a_different_tokenizer_is_learned_as_a_factor() -> None:
    est = TokenEstimator()
    for raw in (300, 600, 900, 1200, 1500):
        est.observe_usage(raw, int(raw * 1.2))
    for raw in (400, 3000):
        assert abs(est.corrected(raw) - raw * 1.2) <= 0.02 * raw * 1.2


def test_an_under_estimate_is_corrected_at_once_an_over_estimate_part_way() -> None:
    """Erring low overflows the window: a report above the estimate is believed at once; one
    below only moves the estimate part of the way (one odd report cannot swing it)."""
    est = TokenEstimator()
    est.observe_usage(1000, 1400)
    assert est.corrected(1000) >= 1400
    lower = TokenEstimator()
    lower.observe_usage(1000, 600)
    assert 600 < lower.corrected(1000) < 1000


def test_corrections_stay_within_bounds() -> None:
    est = TokenEstimator()
    for raw in (300, 600, 900, 1200, 1500) * 10:
        est.observe_usage(raw, int(raw * 2.9))
    low, high = FACTOR_BOUNDS
    calibration = est.calibration()
    assert low <= calibration.factor <= high
    assert abs(calibration.offset) <= OFFSET_BOUND


def test_absurd_usage_reports_are_ignored(tmp_path: Path) -> None:
    est = TokenEstimator()
    store = SessionStore(tmp_path)
    session = store.get("s")
    store.append(session, {"role": "user", "content": "tell me about tokens " * 30})
    before = est.prompt_tokens("system", session)
    est.observe_usage(before, 10)  # e.g. a proxy that reports only uncached tokens
    est.observe_usage(before, before * 100)
    est.observe_usage(0, 100)
    est.observe_usage(100, 0)
    assert est.prompt_tokens("system", session) == before


def test_a_request_kind_never_reported_borrows_no_negative_offset() -> None:
    """The turns' schemas are not the consolidator's: their offset would under-count it."""
    est = TokenEstimator()
    for raw in (700, 800, 900):
        est.observe_usage(raw, raw - 300)
    assert est.corrected(1000, "consolidation") >= 1000
    est.observe_usage(1000, 850, "consolidation")
    assert est.corrected(1000, "consolidation") < 1000


@pytest.mark.parametrize("text", ["a", "🙂", "\n", "<|fim_prefix|>"])
def test_never_zero_for_non_empty(text: str) -> None:
    assert TokenEstimator().count_text(text) >= 1


def test_system_prompts_of_many_sessions_are_counted_once_each() -> None:
    est = TokenEstimator()
    counted = counting(est)
    prompts = [f"You are LightGrep. Memory of user {n}: " + "fact " * 100 for n in range(50)]
    for _ in range(3):  # three turns of fifty users, interleaved
        counts = [est.count_text(prompt) for prompt in prompts]
    assert len(counted.texts) == 50
    assert counts == [len(counted.encoding.encode(p)) for p in prompts]


def test_turns_answered_without_usage_are_counted_high_until_a_report_shows_the_ratio() -> None:
    """llama-cpp-python's streams carry no usage: its turns are counted at the top of the range
    tokenizers differ by until another kind of request (the consolidator's whole answers)
    reports the server's ratio; a server that reports is never held to that factor."""
    reporting = TokenEstimator()
    assert reporting.corrected(1000) == 1000  # nothing known yet: our own count
    silent = TokenEstimator()
    silent.observe_no_usage()
    assert silent.corrected(1000) == 1000 * FACTOR_BOUNDS[1]
    silent.observe_usage(1100, 1540, "consolidation")  # 1.4 of ours
    assert silent.corrected(1000) == 1400 and silent.factor == pytest.approx(1.4)
    silent.observe_usage(1000, 1200)  # a turn's own report, when one comes, is what counts
    assert silent.corrected(1000) == 1200
