"""Consolidation in plain text, for a model that cannot answer with the save_memory tool.

WHY: small local models (SmolLM2-135M on llama-cpp-python) answer the forced save_memory call
with the tool's own descriptions copied back, or with timestamps, every time; asked the same
chunk in plain words they write a fair summary. So when the tool's answer is refused (or the
server has no tool calling), the consolidator asks once more in a fixed, simple form, and code
does the rest: the paragraph becomes the HISTORY.md entry, and each fact line is added to its
section of MEMORY.md. A weak model can only add, never wipe: nothing already in MEMORY.md is
removed or rewritten, and a fact already there is not added twice.

The checks are the tool answer's (memory.consolidation.checks): copied instructions, copied
conversation lines, echoes; and a summary must name something of the conversation (a chatty
"I would rather talk" is not one). A summary that fails one refuses the whole answer (a failed
attempt, as for the tool); a fact line that fails one, or is a question, is dropped alone.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memory.consolidation.checks import check_history_entry, fact_lines
from memory.store import MEMORY_TEMPLATE, SECTIONS, MemoryEditError, added_to_section

PLAIN_SYSTEM = "You summarise conversations between a user and an assistant."
PLAIN_ASK = (
    "Write two things about the conversation above, in English or in the user's language.\n"
    "SUMMARY: one or two sentences saying what the user told and asked, with the names, places "
    "and numbers.\n"
    'FACTS: each lasting fact about the user on its own line, starting with "- ".'
)
MAX_FACTS = 12  # a model that loops writes the same kind of line forever
MAX_FACT_CHARS = 240
_TIME_PREFIX = re.compile(r"^\[Current time: [^\]]*\]\s*")
_LABEL = re.compile(r"^[#*_\s]*(summary|facts?)[*_\s]*(?:[:\-–]|$)[*_\s]*(.*)$", re.I)
_ITEM = re.compile(r"^\s*(?:[-*•+]|\d{1,2}[.)])\s+(.*\S)\s*$")
_ROLE_LINE = re.compile(r"^\s*(user|assistant|system|tool)\s*:", re.I)
_FENCE = re.compile(r"^```[\w-]*\n(.*?)\n?```$", re.S)
_WORDS = re.compile(r"\w+")
# Words a summary of any conversation has; the others must come from the conversation.
_COMMON = frozenset(
    [
        "user",
        "users",
        "assistant",
        "conversation",
        "talked",
        "told",
        "said",
        "asked",
        "about",
        "their",
        "there",
        "they",
        "them",
        "this",
        "that",
        "with",
        "from",
        "have",
        "what",
        "when",
        "which",
        "would",
        "could",
        "should",
        "also",
        "some",
        "into",
        "your",
    ]
)
MIN_SHARED_WORDS = 2  # of the conversation's own words, for a summary to be about it
# Which section a fact goes to: the first whose words it has (else User Information).
_SECTION_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Important Notes", ("allerg", "important", "remember", "deadline", "birthday", "never")),
    ("Preferences", ("like", "love", "prefer", "favourite", "favorite", "enjoy", "hate", "fan ")),
    ("Project Context", ("project", "working on", "building", "learning", "studying", "study")),
)


@dataclass(frozen=True)
class PlainAnswer:
    summary: str
    facts: tuple[str, ...]


def _spoken(message: dict[str, Any]) -> str:
    """A message's text as the plain request shows it: one line, no time prefix."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(
            str(part.get("text")) for part in content if isinstance(part, dict) and "text" in part
        )
    text = _TIME_PREFIX.sub("", str(content or ""))
    return re.sub(r"\s+", " ", text).strip()


def plain_request(chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request: the conversation as "User: …" / "Assistant: …" lines (tool calls and their
    results left out: a summary of them is the assistant's answer), then the form."""
    lines = []
    for message in chunk:
        role = message.get("role")
        text = _spoken(message)
        if role in ("user", "assistant") and text:
            lines.append(f"{str(role).capitalize()}: {text}")
    conversation = "\n".join(lines)
    return [
        {"role": "system", "content": PLAIN_SYSTEM},
        {"role": "user", "content": f"{conversation}\n\n{PLAIN_ASK}"},
    ]


def parse_plain(text: str) -> PlainAnswer | None:
    """The summary and fact lines of an answer in (roughly) the asked form; None when it has
    no summary. Without the labels: the first paragraph that is not a list, and the list items."""
    text = html.unescape(text or "").strip()  # llama-cpp-python's template escapes the prompt
    fenced = _FENCE.match(text)
    text = fenced.group(1).strip() if fenced else text
    summary: list[str] = []
    facts: list[str] = []
    part = ""  # "summary" or "facts" after a label; "after" once an unlabelled paragraph ended
    for raw in text.splitlines():
        line = raw.strip()
        label = _LABEL.match(line)
        if label:
            part = "summary" if label.group(1).lower() == "summary" else "facts"
            line = label.group(2).strip()
        item = _ITEM.match(line)
        if item:
            facts.append(item.group(1).strip())
        elif not line:
            if not part and summary:
                part = "after"
        elif part == "facts":
            facts.append(line)
        elif part in ("", "summary"):
            summary.append(line)
    joined = " ".join(summary).strip()
    if not joined:
        return None
    return PlainAnswer(joined, tuple(facts))


def _norm(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def _copied(text: str, spoken: set[str]) -> bool:
    """A line of the conversation given back as it was said (a role prefix or not)."""
    return bool(_ROLE_LINE.match(text)) or _norm(_ROLE_LINE.sub("", text)) in spoken


def _own_words(text: str) -> set[str]:
    return {w for w in _WORDS.findall(text.lower()) if len(w) >= 4 and w not in _COMMON}


def checked(
    answer: PlainAnswer, fragments: Iterable[str], chunk: list[dict[str, Any]]
) -> tuple[str | None, PlainAnswer]:
    """(why the answer must not be written, or None; the answer with the bad fact lines
    dropped)."""
    fragments = list(fragments)
    spoken = {_norm(_spoken(m)) for m in chunk if _spoken(m)}
    problem = check_history_entry(answer.summary, fragments)
    if problem is None and _copied(answer.summary, spoken):
        problem = "it copies the conversation lines instead of summarising them"
    if problem is None and _norm(answer.summary) in {_norm(f) for f in fragments}:
        problem = "it copies the instructions back"
    said = _own_words(" ".join(_spoken(m) for m in chunk))
    if problem is None and len(_own_words(answer.summary) & said) < MIN_SHARED_WORDS:
        problem = "the summary is not about the conversation"
    kept: list[str] = []
    for fact in answer.facts:
        fact = fact.strip().strip('"').strip()
        if (
            len(fact) > MAX_FACT_CHARS
            or fact.endswith("?")
            or check_history_entry(fact, fragments) is not None
            or _copied(fact, spoken)
            or _norm(fact) in {_norm(k) for k in kept}
        ):
            continue
        kept.append(fact)
    return problem, PlainAnswer(answer.summary, tuple(kept[:MAX_FACTS]))


def section_of(fact: str) -> str:
    lower = fact.lower()
    for section, words in _SECTION_WORDS:
        if any(word in lower for word in words):
            return section
    return SECTIONS[0]


def merged(current: str, facts: Iterable[str]) -> str:
    """`current` MEMORY.md with each new fact as a "- " line at the end of its section; a fact
    already there (in any section, any case) is not added; nothing is removed."""
    text = current if current.strip() else MEMORY_TEMPLATE
    known = set(fact_lines(text))
    for fact in facts:
        if _norm(fact) in {_norm(line) for line in known}:
            continue
        try:
            edited, _ = added_to_section(text, section_of(fact), fact)
        except MemoryEditError:
            continue
        if edited is not None:
            text = edited
            known.update(fact_lines(f"- {fact}"))
    return text.rstrip("\n") + "\n"
