"""Relevance of /recall on a long generated history, against requiring every word.

A seeded generator writes a few thousand HISTORY.md entries in the style the consolidator writes
(people, places, projects and tools recur across many entries, plus [RAW] archives) and, for a
sample of them, the question a user would naturally ask about that entry. Questions reuse some of
the entry's names but phrase the rest their own way ("flying" for "travelling", "caused" for
"root cause"), as people do. Printed: how often "every word must match" finds nothing, and how often
the ranked search puts the asked-about entry in the top 5.

Run: python bench/recall_eval.py
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory.search.engine import search_history

SEED = 20260301
N_ENTRIES = 3000
N_QUESTIONS = 300

PEOPLE = [
    "Anna",
    "Ben",
    "Chloe",
    "Dmitri",
    "Elena",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kemal",
    "Lena",
    "Marco",
    "Nadia",
    "Oskar",
]
PEOPLE += ["Priya", "Quentin", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wen", "Yusuf", "Zoe"]
PLACES = [
    "Lisbon",
    "Berlin",
    "Kyoto",
    "Oslo",
    "Madrid",
    "Prague",
    "Dublin",
    "Vienna",
    "Zurich",
    "Porto",
    "Krakow",
    "Seville",
]
PLACES += ["Bologna", "Tallinn", "Ghent", "Lyon", "Bergen", "Graz", "Valencia", "Riga"]
PROJECTS = [
    "billing",
    "checkout",
    "onboarding",
    "search",
    "reporting",
    "payroll",
    "inventory",
    "mobile-app",
]
PROJECTS += ["analytics", "newsletter", "helpdesk", "warehouse"]
TOOLS = [
    "Postgres",
    "MySQL",
    "Redis",
    "Kafka",
    "RabbitMQ",
    "Elasticsearch",
    "SQLite",
    "MongoDB",
    "Celery",
    "Airflow",
]
TOOLS += [
    "Terraform",
    "Ansible",
    "Kubernetes",
    "Nomad",
    "Grafana",
    "Prometheus",
    "Sentry",
    "Django",
    "FastAPI",
    "Flask",
]
FOODS = [
    "ramen",
    "sushi",
    "tapas",
    "pho",
    "falafel",
    "pierogi",
    "paella",
    "risotto",
    "curry",
    "dumplings",
    "tacos",
]
SKILLS = [
    "Spanish",
    "Japanese",
    "piano",
    "guitar",
    "chess",
    "pottery",
    "climbing",
    "Portuguese",
    "drawing",
    "swimming",
]
ITEMS = [
    "laptop",
    "monitor",
    "bicycle",
    "espresso-machine",
    "headphones",
    "tent",
    "camera",
    "drill",
    "mattress",
]
DOCTORS = ["Keller", "Novak", "Silva", "Brandt", "Moreau", "Okafor", "Lindqvist", "Haddad"]
UTILITIES = ["electricity", "water", "internet", "gas", "phone", "insurance"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


@dataclass
class Case:
    """An entry body (no timestamp) and questions about it.

    Each question comes with the values it names (its key). A question may fit several entries
    ("where did I get the headphones from"); a user then means the latest one, so the target of
    a question is the newest entry with the same key.
    """

    text: str
    questions: list[tuple[str, tuple[str, ...]]]


Maker = Callable[[random.Random], Case]


def trip(r: random.Random) -> Case:
    p, place, day = r.choice(PEOPLE), r.choice(PLACES), r.choice(WEEKDAYS)
    purpose = r.choice(["a conference", "a customer visit", "a wedding", "a team offsite"])
    hotel = r.choice(["Harbour", "Central", "Garden", "Station", "Old Town"])
    return Case(
        f"{p} is travelling to {place} on {day} for {purpose}; flights booked, "
        f"staying at the {hotel} hotel.",
        [
            (f"When is {p} flying out to {place}?", ("trip", p, place)),
            (f"Which hotel is {p} using in {place}?", ("trip", p, place)),
            (f"why does {p} go to {place}", ("trip", p, place)),
        ],
    )


def decision(r: random.Random) -> Case:
    proj, a, b, p = r.choice(PROJECTS), *r.sample(TOOLS, 2), r.choice(PEOPLE)
    why = r.choice(["latency spikes", "licence costs", "operational pain", "missing features"])
    return Case(
        f"Decided to move {proj} from {a} to {b} because of {why}. {p} owns the migration, "
        f"due in {r.choice(MONTHS)}.",
        [
            (f"Why did we switch {proj} over to {b}?", ("move", proj, b)),
            (f"Who is in charge of migrating {proj} off {a}?", ("move", proj, a)),
            (f"what was the reason for dropping {a} in {proj}", ("move", proj, a)),
        ],
    )


def bug(r: random.Random) -> Case:
    proj, tool = r.choice(PROJECTS), r.choice(TOOLS)
    symptom = r.choice(["memory leak", "deadlock", "timeout", "crash loop", "data race"])
    cause = r.choice(["an unbounded cache", "a missing index", "a stale lock", "a retry storm"])
    return Case(
        f"Debugged a {symptom} in {proj}: root cause was {cause} in the {tool} client. "
        f"Fixed and added a regression test.",
        [
            (f"What caused the {symptom} in {proj}?", ("bug", symptom, proj)),
            (f"How did we fix the {proj} {symptom} last time?", ("bug", symptom, proj)),
        ],
    )


def taste(r: random.Random) -> Case:
    like, avoid = r.sample(FOODS, 2)
    place = r.choice(PLACES)
    resto = r.choice(["Casa Nova", "Blue Door", "Little Fox", "Sol y Sombra", "Nomad Kitchen"])
    return Case(
        f"User loves {like} but avoids {avoid}; favourite restaurant is {resto} in {place}.",
        [
            (f"What's my favourite place for {like} in {place}?", ("taste", like, place)),
            (f"Do I like {avoid}?", ("taste-avoid", avoid)),
        ],
    )


def meeting(r: random.Random) -> Case:
    a, b = r.sample(PEOPLE, 2)
    proj = r.choice(PROJECTS)
    topic = r.choice(["roadmap", "budget", "hiring plan", "launch date", "pricing"])
    action = r.choice(["draft a proposal", "cut the scope", "run a pilot", "ask finance"])
    return Case(
        f"Meeting with {a} and {b} about the {proj} {topic}; agreed to {action} by "
        f"{r.choice(WEEKDAYS)}.",
        [
            (f"What did {a} and I agree on for the {proj} {topic}?", ("meet", a, proj, topic)),
            (f"when is the {proj} {topic} follow-up with {b} due", ("meet", b, proj, topic)),
        ],
    )


def purchase(r: random.Random) -> Case:
    item = r.choice(ITEMS)
    shop = r.choice(["MediaMarkt", "Decathlon", "Amazon", "IKEA", "a local shop"])
    price = r.randrange(40, 1500)
    return Case(
        f"Bought a {item} from {shop} for {price} euros; warranty until "
        f"{r.choice(MONTHS)} {r.randrange(2026, 2030)}.",
        [
            (f"How much did I pay for my {item}?", ("buy", item)),
            (f"When does the {item} warranty run out?", ("buy", item)),
            (f"where did I get the {item} from", ("buy", item)),
        ],
    )


def health(r: random.Random) -> Case:
    doc = r.choice(DOCTORS)
    issue = r.choice(["back pain", "allergies", "a sprained ankle", "migraines", "sleep"])
    return Case(
        f"Appointment with Dr. {doc} at the city clinic about {issue}; next check-up in "
        f"{r.choice(MONTHS)}.",
        [
            (f"When is my next visit to Dr. {doc}?", ("doctor", doc)),
            (f"What did Dr. {doc} say about my {issue.split()[-1]}?", ("doctor", doc, issue)),
        ],
    )


def learning(r: random.Random) -> Case:
    skill, p = r.choice(SKILLS), r.choice(PEOPLE)
    return Case(
        f"Started learning {skill} with an online course; practising {r.randrange(10, 60)} "
        f"minutes a day together with {p}.",
        [
            (f"Who am I practicing {skill} with?", ("learn", skill)),
            (f"how long do I train {skill} each day with {p}", ("learn", skill, p)),
        ],
    )


def birthday(r: random.Random) -> Case:
    p = r.choice(PEOPLE)
    gift = r.choice(["a cookbook", "concert tickets", "a plant", "a scarf", "board games"])
    return Case(
        f"{p}'s birthday is on {r.choice(MONTHS)} {r.randrange(1, 29)}; gift idea: {gift}.",
        [
            (f"What should I give {p} for their birthday?", ("birthday", p)),
            (f"when was {p} born", ("birthday", p)),
        ],
    )


def bill(r: random.Random) -> Case:
    util = r.choice(UTILITIES)
    bank = r.choice(["N26", "ING", "Revolut", "Sparkasse"])
    return Case(
        f"Paid the {util} bill ({r.randrange(20, 300)} euros) late; set up autopay with {bank}.",
        [
            (f"Did I ever set up automatic payment for {util}?", ("bill", util)),
            (f"which bank pays my {util} bill", ("bill", util)),
        ],
    )


MAKERS: list[Maker] = [trip, decision, bug, taste, meeting, purchase, health, learning, birthday]
MAKERS.append(bill)


def raw_entry(r: random.Random, when: datetime) -> str:
    """A [RAW] archive of a small chat, as the consolidator writes after repeated failures."""
    lines = []
    for i in range(r.randrange(2, 7)):
        role = "USER" if i % 2 == 0 else "ASSISTANT"
        topic = r.choice(PLACES + PROJECTS + FOODS + SKILLS)
        stamp = when + timedelta(minutes=i)
        lines.append(f"[{stamp:%Y-%m-%d %H:%M}] {role}: chatting about {topic}")
    return f"[{when:%Y-%m-%d %H:%M}] [RAW] {len(lines)} messages\n" + "\n".join(lines)


def build(folder: Path, seed: int = SEED) -> tuple[Path, list[tuple[str, str]]]:
    """Write HISTORY.md; return it and (question, timestamp of its target entry) pairs."""
    r = random.Random(seed)
    when = datetime(2023, 1, 2, 8, 0)
    entries: list[str] = []
    newest: dict[tuple[str, ...], str] = {}  # question key -> newest entry with it
    asked: list[tuple[str, tuple[str, ...]]] = []
    for _ in range(N_ENTRIES):
        when += timedelta(minutes=r.randrange(60, 900))
        if r.random() < 0.05:
            entries.append(raw_entry(r, when))
            continue
        case = r.choice(MAKERS)(r)
        entries.append(f"[{when:%Y-%m-%d %H:%M}] {case.text}")
        for _question, key in case.questions:
            newest[key] = f"{when:%Y-%m-%d %H:%M}"
        asked.append(r.choice(case.questions))
    path = folder / "HISTORY.md"
    path.write_text("\n\n".join(entries) + "\n", encoding="utf-8")
    unique = list({question: key for question, key in asked}.items())
    picked = r.sample(unique, N_QUESTIONS)
    return path, [(question, newest[key]) for question, key in picked]


def words_of(question: str) -> list[str]:
    """The question's words as a user would type them into grep, edge punctuation removed."""
    return [w.strip("?!,.;:'\"").lower() for w in question.split() if w.strip("?!,.;:'\"")]


def every_word_hits(entries: list[str], question: str) -> int:
    """Entries holding every word (case-insensitive substrings), like chained grep -i."""
    words = words_of(question)
    return sum(1 for e in entries if all(w in e for w in words))


def evaluate(folder: Path, show: int = 4) -> dict[str, float]:
    path, questions = build(folder)
    entries = [e.lower() for e in path.read_text(encoding="utf-8").split("\n\n")]
    empty = top1 = top5 = 0
    rr = 0.0
    started = time.perf_counter()
    for i, (question, stamp) in enumerate(questions):
        if every_word_hits(entries, question) == 0:
            empty += 1
        hits = search_history(path, question, limit=5).hits
        ranks = [k for k, hit in enumerate(hits, start=1) if hit.timestamp == stamp]
        if ranks:
            top5 += 1
            top1 += ranks[0] == 1
            rr += 1.0 / ranks[0]
        if i < show:
            where = f"rank {ranks[0]}" if ranks else "not in top 5"
            print(f"  e.g. {question!r} -> target {where}")
    n = len(questions)
    took = (time.perf_counter() - started) / n
    stats = {
        "entries": len(entries),
        "questions": n,
        "all_words_empty": empty / n,
        "top1": top1 / n,
        "top5": top5 / n,
        "mrr5": rr / n,
        "ms_per_query": took * 1000,
    }
    print(
        f"  history: {len(entries)} entries ({path.stat().st_size / 1024:.0f} KiB), "
        f"{n} natural questions, each about one known entry (the newest it fits)"
    )
    print(f"  every word required (chained grep -i): no entry at all for {empty / n:.0%} of them")
    print(
        f"  ranked search: target in top 5 for {top5 / n:.0%}, first for {top1 / n:.0%} "
        f"(MRR@5 {rr / n:.2f}), {took * 1000:.1f} ms per query"
    )
    return stats


def main() -> None:
    print("Relevance of history search (seeded, deterministic)")
    with tempfile.TemporaryDirectory(prefix="lightgrep-recall-") as tmp:
        evaluate(Path(tmp))


if __name__ == "__main__":
    main()
