"""Consolidation in plain text, for a model that cannot answer with the save_memory tool.

WHY: small local models (SmolLM2-135M on llama-cpp-python) answer the forced save_memory call
with the tool's own descriptions copied back, or with timestamps, every time; asked the same
chunk in plain words they write a fair summary. So when the tool's answer is refused (or the
server has no tool calling), the consolidator asks once more in a fixed, simple form, and code
does the rest: the summary becomes the HISTORY.md entry, and each fact is added to its section
of MEMORY.md. A weak model can only add, never wipe: nothing already in MEMORY.md is removed or
rewritten, and a fact already there (in other words too) is not added twice.

What such a model was seen to do with the form, and what the code does about it:
- Shown the conversation as "User: …" / "Assistant: …" lines it goes on with the dialogue; so it
  is shown what the user said, as a list, and only that (their facts are what MEMORY.md keeps).
- It rarely writes the fact lines asked for; its summary holds the facts ("The user's name is
  Tomas and they live in Lyon. They are allergic to peanuts."). Without lines, the summary's
  sentences and clauses are the candidate facts.
- It makes things up ("The user is a food blogger", "a common allergy among children aged
  7-12"). A fact is kept only when most of its own words are the user's (grounded); the history
  entry keeps only the sentences whose words come from the conversation.
- It restates in the first person ("I work as a marine biologist"): such a fact is turned into
  the third person ("The user works as a marine biologist"), so MEMORY.md never reads as the
  bot's own.

The checks are the tool answer's (memory.consolidation.checks): copied instructions, copied
conversation lines (with a role), echoes, a summary keeping none of the names, places and
numbers the person said; a summary with no sentence about the conversation refuses the whole
answer (a failed attempt, as for the tool); a fact that fails one, or is a
question, is dropped alone.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memory.consolidation.checks import check_history_entry, fact_lines, keeps_said, said_names
from memory.store import MEMORY_TEMPLATE, SECTIONS, MemoryEditError, added_to_section

PLAIN_SYSTEM = "You summarise conversations."
PLAIN_ASK = (
    "Summarise what the user said in one sentence, naming their name, job, family, pets, home "
    'and likes. Then write each of those facts on its own line, starting with "- ".'
)
MAX_FACTS = 12  # a model that loops writes the same kind of line forever
MAX_FACT_CHARS = 240
GROUNDED_SHARE = 0.6  # of a fact's own words that must be the user's
SAME_FACT_SHARE = 0.8  # of a fact's own words already in one line of MEMORY.md: a duplicate
_TIME_PREFIX = re.compile(r"^\[Current time: [^\]]*\]\s*")
_LABEL = re.compile(r"^[#*_\s]*(summary|facts?)[*_\s]*(?:[:\-–]|$)[*_\s]*(.*)$", re.I)
_ITEM = re.compile(r"^\s*(?:[-*•+]|\d{1,2}[.)])\s+(.*\S)\s*$")
_ROLE_LINE = re.compile(r"^\s*(user|assistant|system|tool)\s*:", re.I)
_FENCE = re.compile(r"^```[\w-]*\n(.*?)\n?```$", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_CLAUSE = re.compile(r",?\s+(?:and|but|which|who|that)\s+|,\s+", re.I)  # (no groups)
_WORDS = re.compile(r"\w+")
_GREETING = re.compile(r"^(?:hi|hello|hey)\b[\s,!.]*", re.I)
# Words any summary has; the others are its own, to be found in what was said.
_COMMON = frozenset(
    re.findall(
        r"\w+",
        "user users assistant conversation talked told said says asked about their there they "
        "them this that with from have what when which would could should also some into your "
        "very much like name named called",
    )
)
# Which section a fact goes to: the first whose words it has (else User Information).
_SECTION_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Important Notes", ("allerg", "important", "remember", "deadline", "birthday", "never")),
    ("Preferences", ("like", "love", "prefer", "favourite", "favorite", "enjoy", "hate", "fan ")),
    ("Project Context", ("project", "working on", "building", "learning", "studying", "study")),
)
# A first-person fact, as the third person: "I'm a nurse" -> "The user is a nurse".
_FIRST_PERSON = (
    (re.compile(r"^(?:i'm|i am)\s+", re.I), "The user is "),
    (re.compile(r"^(?:i've|i have)\s+", re.I), "The user has "),
    (re.compile(r"^my\s+", re.I), "The user's "),
)


@dataclass(frozen=True)
class PlainAnswer:
    summary: str
    facts: tuple[str, ...]
    dialogue: bool = False  # a line of it begins "User:" or "Assistant:": the dialogue, copied


def _spoken(message: dict[str, Any]) -> str:
    """A message's text as one line, without the time prefix of the person's messages."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(
            str(part.get("text")) for part in content if isinstance(part, dict) and "text" in part
        )
    text = _TIME_PREFIX.sub("", str(content or ""))
    return re.sub(r"\s+", " ", text).strip()


def users_lines(chunk: list[dict[str, Any]]) -> list[str]:
    """What the person said in `chunk`, one line per message (the time prefix off)."""
    return [text for m in chunk if m.get("role") == "user" and (text := _spoken(m))]


def plain_request(chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request: what the user said, one item each, then the form."""
    said = "\n".join(f"- {text}" for text in users_lines(chunk)) or "- (nothing)"
    return [
        {"role": "system", "content": PLAIN_SYSTEM},
        {"role": "user", "content": f"The user said:\n{said}\n\n{PLAIN_ASK}"},
    ]


def parse_plain(text: str) -> PlainAnswer | None:
    """The summary and fact lines of an answer in (roughly) the asked form; None when it has
    no summary. Labels (SUMMARY:, FACTS:) are understood but not needed: the text that is not
    a list is the summary, the list items are the facts."""
    text = html.unescape(text or "").strip()  # llama-cpp-python's template escapes the prompt
    fenced = _FENCE.match(text)
    text = fenced.group(1).strip() if fenced else text
    summary: list[str] = []
    facts: list[str] = []
    part = ""  # "facts" after a FACTS label
    dialogue = False
    for raw in text.splitlines():
        line = raw.strip()
        dialogue = dialogue or bool(_ROLE_LINE.match(line))
        label = _LABEL.match(line)
        if label:
            part = "facts" if label.group(1).lower().startswith("fact") else "summary"
            line = label.group(2).strip()
        item = _ITEM.match(line)
        if item:
            facts.append(item.group(1).strip())
        elif line and part == "facts":
            facts.append(line)
        elif line:
            summary.append(line)
    joined = " ".join(summary).strip()
    if not joined:
        return None
    return PlainAnswer(joined, tuple(facts), dialogue)


def _own_words(text: str) -> list[str]:
    """The words that say something (four letters or more, not _COMMON), a plural's "s" off."""
    words = (w[:-1] if len(w) > 4 and w.endswith("s") else w for w in _words(text))
    return [w for w in words if len(w) >= 4 and w not in _COMMON]


def _words(text: str) -> list[str]:
    return _WORDS.findall(text.lower())


def _grounded(text: str, source: set[str], share: float) -> bool:
    """Whether most of `text`'s own words are in `source` (words of what was said)."""
    words = _own_words(text)
    if not words:
        return False
    return sum(1 for w in words if w in source) >= share * len(words)


def _norm(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def _third_person(fact: str) -> str:
    """ "I'm a nurse" -> "The user is a nurse"; "I work as…" -> "The user works as…"."""
    fact = _GREETING.sub("", fact).strip()
    for pattern, replacement in _FIRST_PERSON:
        if pattern.match(fact):
            return pattern.sub(replacement, fact, count=1)
    verb = re.match(r"^i\s+([a-z]+)\b", fact, re.I)
    if verb:
        word = verb.group(1).lower()
        if re.search(r"[^aeiou]y$", word):
            word = word[:-1] + "ies"
        elif re.search(r"(?:s|sh|ch|x|z|o)$", word):
            word += "es"
        else:
            word += "s"
        return f"The user {word}{fact[verb.end() :]}"
    return fact


def _candidates(answer: PlainAnswer, said: set[str]) -> list[str]:
    """The fact lines given, else the summary's sentences; either way without the clauses
    whose words are not the user's (made up: "…, which is a common allergy in Lyon")."""
    lines = answer.facts or tuple(_SENTENCE_END.split(answer.summary))
    return [trimmed for line in lines if (trimmed := _without_made_up_clauses(line, said))]


def _without_made_up_clauses(sentence: str, said: set[str]) -> str:
    pieces = _CLAUSE.split(sentence.strip().rstrip(".;").strip())
    separators = [m.group(0) for m in _CLAUSE.finditer(sentence)]
    kept = ""
    for index, piece in enumerate(pieces):
        if _own_words(piece) and not _grounded(piece, said, GROUNDED_SHARE):
            continue
        kept += (separators[index - 1] if kept and index else "") + piece
    return kept.strip()


def checked(
    answer: PlainAnswer, fragments: Iterable[str], chunk: list[dict[str, Any]]
) -> tuple[str | None, PlainAnswer]:
    """(why the answer must not be written, or None; the answer as it may be written: the
    summary's sentences about the conversation, the facts grounded in what the user said)."""
    fragments = list(fragments)
    said = set(_own_words(" ".join(users_lines(chunk))))
    heard = set(_own_words(" ".join(_spoken(m) for m in chunk)))
    spoken = {_norm(_spoken(m)) for m in chunk if _spoken(m)}
    problem = check_history_entry(answer.summary, fragments)
    if problem is None and answer.dialogue:
        problem = "it copies the conversation lines instead of summarising them"
    sentences = [
        trimmed
        for sentence in _SENTENCE_END.split(answer.summary)
        if (trimmed := _without_made_up_clauses(sentence, heard)) and _grounded(trimmed, heard, 0.5)
    ]
    if problem is None and not sentences:
        problem = "the summary is not about the conversation"
    summary = ". ".join(sentence.rstrip(".") for sentence in sentences) + "."
    if problem is None:  # what is written must keep a name, place or number said, if any
        problem = keeps_said(summary, said_names(users_lines(chunk)))
    kept: list[str] = []
    for fact in _candidates(answer, said):
        fact = _third_person(fact.strip().strip('"').strip())
        if (
            len(fact) > MAX_FACT_CHARS
            or fact.endswith("?")
            or _ROLE_LINE.match(fact)
            or check_history_entry(fact, fragments) is not None
            or not _grounded(fact, said, GROUNDED_SHARE)
            or (_norm(fact) in spoken and not _grounded(fact, said, 1.0))  # the assistant's
            or duplicate(fact, kept)
        ):
            continue
        kept.append(fact)
    return problem, PlainAnswer(summary, tuple(kept[:MAX_FACTS]))


def duplicate(fact: str, lines: Iterable[str]) -> bool:
    """Whether `fact` says what one of `lines` says (most of its own words are that line's)."""
    words = set(_own_words(fact))
    if not words:
        return _norm(fact) in {_norm(line) for line in lines}
    return any(len(words & set(_own_words(line))) >= SAME_FACT_SHARE * len(words) for line in lines)


def section_of(fact: str) -> str:
    lower = fact.lower()
    for section, words in _SECTION_WORDS:
        if any(word in lower for word in words):
            return section
    return SECTIONS[0]


def merged(current: str, facts: Iterable[str]) -> str:
    """`current` MEMORY.md with each new fact as a "- " line at the end of its section; a fact
    MEMORY.md holds already (in any section, in other words too) is not added; nothing is
    removed."""
    text = current if current.strip() else MEMORY_TEMPLATE
    known = fact_lines(text)
    for fact in facts:
        if duplicate(fact, known):
            continue
        try:
            edited, _ = added_to_section(text, section_of(fact), fact)
        except MemoryEditError:
            continue
        if edited is not None:
            text = edited
            known.extend(fact_lines(f"- {fact}"))
    return text.rstrip("\n") + "\n"
