"""Checks on what a consolidation answer would write, before anything is written.

Small or confused models answer `save_memory` with garbage: the tool's own parameter
description copied back, fragments of the prompt, a MEMORY.md without its sections, a history
entry like "][". Written, it would replace the user's memory (the old text survives only in
.memory_versions/, where nobody looks). Rejected, the attempt counts as a failure: retried, and
after repeated failures the chunk is archived verbatim, so nothing is lost either way.

What happens to a `memory_update`, in this order (the thresholds are the constants below):

1. Refused (a failed attempt: retried, then the chunk archived raw) when it copies the
   instructions or the conversation back, has none of the ## sections, drops a section that
   held facts, keeps fewer than half (MIN_KEPT_SHARE) of the existing fact lines, or adds
   garbage: a fact line with HTML entities ("&#39;") or program code or JSON, a section whose
   name is not a few words (`check_memory_update`). The history entry is not written either.
2. Held when it passes 1 but would drop more than a quarter (HOLD_DROP_SHARE) of the existing
   fact lines, and at least HOLD_MIN_DROPPED of them (`held_because`): MEMORY.md stays as it
   is, the proposed text is kept as a held version (/memory history, /memory undo N), the
   history entry is written. Not a failure: the chunk is filed and never retried.
3. Otherwise written. If it is over the memory budget, the model is asked once to condense it
   (keeping the sections; the condensed text must pass 1 against the update); if it is still
   over, it is written anyway and the person is told.

A history entry is refused too (rule 1, the same way) when the person said names, places or
numbers (`said_names`) and the entry keeps none of them, nor any rare word said
(`keeps_said`): "The user chatted." over a chunk saying "my sister Ingrid moved to Rotterdam in
2019" would leave nothing to find.

The model's own edits in a turn (bot/tools/edit_memory.py) meet rule 1 through the same
function, and may never take MEMORY.md over its budget (`over_budget`): they are refused.

A fact line is a non-empty line that is not a heading (a list item, mostly), outside HTML
comments (`<!-- … -->` shows nothing: a fact kept only there is gone). It counts as kept when a
fact line of the update holds its text, without list markers, as whole words and without a
negation around it ("FALSE, forget: …", "~~…~~", "no longer …": the fact is dropped, however
much of its text is still there). An update that wraps several existing facts in such a
negation is refused.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from memory.search.engine import STOPWORDS
from memory.search.mentions import mentions
from memory.store import SECTIONS, new_section_problem

_HEADING = re.compile(r"^##[ \t]+(.+?)[ \t#]*$", re.M)
_STAMP = re.compile(r"^\s*\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]\s*")
# A line of the conversation as the request shows it: "[2024-05-01T10:30] USER: …".
_CONVERSATION_LINE = re.compile(
    r"^\[(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}|\?)\] [A-Z]+(?: \[tools:|:)", re.M
)
_WORD = re.compile(r"[^\W\d_]{3,}")
# An HTML comment, or one left open (the rest of the file is hidden then).
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
# Words around a fact that say it no longer holds (in a fact's own text they are its content).
_NEGATION = re.compile(
    r"~~|\b(?:false|untrue|not true|wrong|incorrect|forget|forgotten|disregard|ignore|"
    r"obsolete|outdated|no longer|invalid|retracted|deleted|removed)\b",
    re.I,
)
# An HTML entity left in the text ("&#39;": llama-cpp-python's template escapes the prompt,
# and a small model copies the escapes back).
_ENTITY = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# A fact line that is program code or JSON, not a sentence: a statement, a fence, a line ending
# in a brace or semicolon, a JSON key ("new_text": …).
_CODE = re.compile(
    r"^(?:def \w+\(|class \w+\s*[(:]|(?:from [\w.]+ )?import [\w.]+(?:\s*,\s*[\w.]+)*\s*$|"
    r"return\b|print\(|>>>|```)|[{};]\s*$|\):\s*$|\"\w+\"\s*:"
)
MIN_ECHO_CHARS = 30  # a shared phrase shorter than this may be coincidence
MIN_LINES_TO_COMPARE = 3  # with fewer lines, "most of them" is one or two: a correction, maybe
MIN_KEPT_SHARE = 0.5  # an update keeping fewer of the fact lines is refused
HOLD_DROP_SHARE = 0.25  # an update dropping more of them is held, not written
HOLD_MIN_DROPPED = 2  # one changed line is a correction, whatever the share
MAX_PLACES = 64  # places of one fact in the update looked at (bounds the work per fact)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def echo_fragments(*texts: str) -> list[str]:
    """Sentences and lines of the instructions long enough that a copy of one is an echo."""
    fragments = []
    for text in texts:
        for piece in re.split(r"(?<=[.:;])\s+|\n+", text):
            piece = _norm(piece.strip(" -"))
            if len(piece) >= MIN_ECHO_CHARS:
                fragments.append(piece)
    return fragments


def _echo(text: str, fragments: Iterable[str]) -> str | None:
    normal = _norm(text)
    if any(fragment in normal for fragment in fragments):
        return "it copies the instructions back"
    if _CONVERSATION_LINE.search(text):
        return "it copies the conversation lines instead of summarising them"
    return None


def _garbage(line: str) -> str | None:
    """Why a fact line (its list marker off) is garbage, or None."""
    entity = _ENTITY.search(line)
    if entity and html.unescape(entity.group()) != entity.group():
        return f"it holds HTML entities such as {entity.group()} instead of the characters"
    if _CODE.search(line):
        return "it holds program code or JSON instead of a fact"
    return None


def over_budget(used: int, budget: int) -> str | None:
    """Why a MEMORY.md of about `used` tokens is too big for its `budget`, or None."""
    if used <= budget:
        return None
    return f"it would take about {used:,} tokens, over MEMORY.md's budget of {budget:,}"


def check_history_entry(entry: str, fragments: Iterable[str]) -> str | None:
    """Why `entry` must not be appended to HISTORY.md, or None if it may be."""
    if not _WORD.search(_STAMP.sub("", entry)):
        return "the history entry is empty"
    return _echo(entry, fragments)


# What a summary must keep one of (said_names), when the person said names: in what they said, a
# number of two digits or more (a year, an age, a price, a time), or a word written with a
# capital that does not start a sentence ("moved to Rotterdam", "my sister Ingrid"), unless it
# is a filler word ("I", "OK") or a day of the week (a summary says "last weekend" for "on
# Sunday"). Then a long word said (rare in English: "ceramics", "marathon"; not one of the common
# long words below) counts as kept too, but alone it asks for nothing ("I am building a boat").
# A title's full stop ("Mrs. Okafor") ends no sentence. Each rule decided on
# bench/rare_words.py's tuning half.
_SAID_SENTENCE = re.compile(
    r"(?<=[.!?…])(?<!Mr\.)(?<!Mrs\.)(?<!Ms\.)(?<!Dr\.)(?<!St\.)[\s\"”')]+|\n+"
)
_SAID_WORD = re.compile(r"[^\W_]+")
_DAYS = "monday tuesday wednesday thursday friday saturday sunday"
_NOT_NAMES = STOPWORDS | {*_DAYS.split(), "ok", "okay", "yes", "yeah", "hi", "hello", "hey"}
MIN_NUMBER_DIGITS = 2
MIN_LONG_WORD = 8  # letters
_COMMON_LONG = frozenset(
    str.split(
        """
    absolutely actually although anything anywhere assistant beautiful birthday business
    children somebody definitely different difficult discussed discussion everybody everyone
    everything everywhere excellent exciting experience favorite favourite finished following
    friendly generally happened honestly important impossible information interested
    interesting mentioned minutes morning nothing obviously personal position possible
    probably question questions recently regarding remember seriously shopping situation
    something sometimes somewhere starting talking thinking thoughts together tomorrow
    tonight understand usually weekend whatever wondering wonderful yesterday conversation
    conversations activities interests afternoon evening thousand hundred
    """
    )
)
MAX_NAMES_SHOWN = 4  # in the reason logged


@dataclass(frozen=True)
class Said:
    """What a history entry must keep one of (said_names): ``names`` (names, places, numbers),
    if any; ``rare`` (long rare words) count as kept too."""

    names: list[str]
    rare: list[str]


def said_names(texts: Iterable[str]) -> Said:
    """The names, places, numbers and rare words of what the person said, in order."""
    names: dict[str, None] = {}
    rare: dict[str, None] = {}
    for text in texts:
        for sentence in _SAID_SENTENCE.split(text):
            for n, word in enumerate(_SAID_WORD.findall(sentence)):
                low = word.lower()
                if word.isdigit():
                    if len(word) >= MIN_NUMBER_DIGITS:
                        names.setdefault(word)
                elif n and word[0].isupper() and low not in _NOT_NAMES and len(word) > 1:
                    names.setdefault(word)
                elif len(word) >= MIN_LONG_WORD and word.isalpha() and low not in _COMMON_LONG:
                    rare.setdefault(low)
    return Said(list(names), list(rare))


def keeps_said(entry: str, said: Said) -> str | None:
    """Why a history entry that keeps none of what `said` names must not be written, or None
    (always None when the person said no name, place or number).

    Kept as /recall would find it (memory/search/mentions.py): another form of the word
    ("Rotterdam's"), a number in words ("fifty-five")."""
    if not said.names or mentions(entry, [*said.names, *said.rare]):
        return None
    names = said.names
    shown = ", ".join(names[:MAX_NAMES_SHOWN]) + (", …" if len(names) > MAX_NAMES_SHOWN else "")
    return f"the history entry keeps none of the names, places or numbers said ({shown})"


def _visible(text: str) -> str:
    """`text` without its HTML comments (a comment over several lines leaves a line break)."""
    return _COMMENT.sub(lambda m: "\n" if "\n" in m.group() else "", text)


def _sections(text: str) -> dict[str, list[str]]:
    """Heading → its non-empty lines outside comments; lines before any heading under ""."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in _visible(text).splitlines():
        match = _HEADING.match(line)
        if match:
            current = match.group(1).strip()
            sections.setdefault(current, [])
        elif line.strip() and not line.lstrip().startswith("#"):
            sections.setdefault(current, []).append(line)
    return sections


def check_memory_update(
    current: str, update: str, fragments: Iterable[str]
) -> tuple[str | None, str]:
    """(why `update` must not replace MEMORY.md or None, the text to write).

    A section that was empty and is missing from the update is added back empty (small models
    drop them; nothing is lost); a section that held facts must survive.
    """
    problem = _echo(update, fragments)
    if problem:
        return problem, update
    before = _sections(current)
    headings = [h for h in before if h] or list(SECTIONS)
    after = _sections(update)
    if len(after) <= 1:
        return "it has none of the ## sections", update
    dropped = [h for h in headings if before.get(h) and h not in after]
    if dropped:
        return f"it drops the section ## {dropped[0]}", update
    problem = _new_garbage(before, after)
    if problem:
        return problem, update
    facts = compare_facts(current, update)
    if facts.negated >= HOLD_MIN_DROPPED:
        return f"it marks {facts.negated} existing facts as no longer true", update
    kept, total = facts.kept, facts.total
    if total >= MIN_LINES_TO_COMPARE and kept < total * MIN_KEPT_SHARE:
        return f"it keeps only {kept} of the {total} existing lines", update
    missing = [h for h in headings if h not in after]
    if missing:
        update = update.rstrip("\n") + "\n" + "".join(f"\n## {h}\n" for h in missing)
    return None, update


def _new_garbage(before: dict[str, list[str]], after: dict[str, list[str]]) -> str | None:
    """Why what `after` adds to `before` is garbage (a section's name, a fact line), or None;
    what MEMORY.md held already is not judged again."""
    known = {h.casefold() for h in [*before, *SECTIONS]}
    old = {line.strip() for lines in before.values() for line in lines}
    for heading, lines in after.items():
        if heading.casefold() not in known:
            problem = new_section_problem(heading)
            if problem:
                return problem
        for line in lines:
            if line.strip() not in old:
                problem = _garbage(line.strip().lstrip("-*+ "))
                if problem:
                    return problem
    return None


def check_additions(current: str, update: str, fragments: Iterable[str]) -> str | None:
    """Why what `update` adds to `current` must not be written, or None: rule 1's checks of
    what is new (echoes, garbage, a section's name), without judging what it drops (an edit
    of the model's own is held for that: bot/tools/held.py)."""
    before, after = _sections(current), _sections(update)
    old = {line.strip() for lines in before.values() for line in lines}
    new = [line for lines in after.values() for line in lines if line.strip() not in old]
    return _echo("\n".join(new), fragments) or _new_garbage(before, after)


def fact_lines(text: str) -> list[str]:
    """The fact lines of a MEMORY.md, normalised (list markers and spacing gone)."""
    lines = [_norm(line.strip(" -*")) for lines in _sections(text).values() for line in lines]
    return [line for line in lines if line]


@dataclass(frozen=True)
class FactCount:
    kept: int  # fact lines of the current memory that the update still holds
    total: int  # fact lines of the current memory
    negated: int  # of the dropped ones, those the update keeps inside a negation


def compare_facts(current: str, update: str) -> FactCount:
    """Which fact lines of `current` a fact line of `update` still holds (module docstring)."""
    old_lines = fact_lines(current)
    new_lines = fact_lines(update)
    exact = set(new_lines)
    joined = "\n".join(new_lines)
    starts = [0]  # where each line of `joined` begins
    for line in new_lines:
        starts.append(starts[-1] + len(line) + 1)
    kept = negated = 0
    for fact in old_lines:
        if fact in exact:
            kept += 1
            continue
        found = _holder(joined, starts, fact)
        kept += found is True
        negated += found is False
    return FactCount(kept, len(old_lines), negated)


def _holder(joined: str, starts: list[int], fact: str) -> bool | None:
    """True: a line holds `fact` as whole words with no negation around it; False: only
    negated ones do; None: no line holds it."""
    result = None
    at = joined.find(fact)
    for _ in range(MAX_PLACES):
        if at < 0:
            return result
        end = at + len(fact)
        line = bisect_right(starts, at) - 1
        first, last = starts[line], starts[line + 1] - 1
        if _edge(joined, at - 1, fact[0]) and _edge(joined, end, fact[-1]):
            rest = joined[first:at] + " " + joined[end:last]
            if not _NEGATION.search(rest):
                return True
            result = False
        at = joined.find(fact, at + 1)
    return True if at >= 0 else result  # held in too many places to look at each: kept


def _edge(text: str, index: int, inner: str) -> bool:
    """Whether a match whose outer character is `inner` ends at a word boundary at `index`."""
    if not inner.isalnum() or index < 0 or index >= len(text):
        return True
    return not text[index].isalnum()


def kept_fact_lines(current: str, update: str) -> tuple[int, int]:
    """(fact lines of `current` that `update` still holds, fact lines of `current`)."""
    facts = compare_facts(current, update)
    return facts.kept, facts.total


def held_because(current: str, update: str) -> str | None:
    """Why `update` (which passed check_memory_update) is held instead of written, or None."""
    kept, total = kept_fact_lines(current, update)
    dropped = total - kept
    if dropped >= HOLD_MIN_DROPPED and dropped > total * HOLD_DROP_SHARE:
        return f"it would drop {dropped} of the {total} facts"
    return None
