"""Recall on one person's life: nine months of sessions, asked about the way people ask.

A seeded generator writes the HISTORY.md that consolidation would leave after about 1,300
sessions of one person (Mara) from September 2025 to May 2026: hikes, cooking, the dog's vet
visits, books, work meetings, purchases, runs, doctors, trips, lunches, practice, bills, the
garden, family calls, and now and then a [RAW] archive. People, places and dishes recur, so
most questions fit several entries; the one meant is the newest that fits, or, when the
question names a time ("last week", "in March", "on 12 February", "yesterday"), the newest that
fits in that time. Questions use other word forms than the entries ("hiking" / "Hiked",
"dogs" / "dog", "repot" / "Repotted"), some irregular ones no stemmer knows ("buy" / "Bought",
"ran" / "run"), filler words, and relative dates; they are asked on 2026-06-01.

Scored: recall@1, recall@5, MRR (over the top 10) and empty answers, for the ranked search
(memory/search/engine.py) and for the seed's way, grep for every keyword (case-insensitive
substrings,
newest first), by kind of question. Questions alternate between a tuning half (used by
bench/tune_bm25.py) and a held-out half.

Run: python bench/recall_life.py
"""

from __future__ import annotations

import inspect
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SEED = 20260601
NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
START = datetime(2025, 9, 1, 7, 0)
DAYS = (NOW.replace(tzinfo=None) - START).days
TOP = 10

FRIENDS = ["Jonas", "Priya", "Ben", "Lena", "Tomas", "Aiko", "Farid", "Greta", "Nadia", "Oskar"]
COLLEAGUES = ["Marek", "Sofia", "Hannah", "Diego", "Wen", "Ulla", "Kofi", "Ines"]
RELATIVES = ["mum", "dad", "grandma", "Aunt Rosa", "my brother Luca", "my sister Elsa"]
TRAILS = ["Brocken", "Hexenstieg", "Selketal", "Okertal", "Bodetal", "Harzer Hexen", "Ilse Falls"]
DISHES = ["lentil curry", "mushroom risotto", "shakshuka", "ramen", "paella", "pierogi", "tacos"]
DISHES += ["lasagne", "pho", "falafel"]
BOOKS = [
    ("Piranesi", "Susanna Clarke"),
    ("Dune", "Frank Herbert"),
    ("The Overstory", "Richard Powers"),
    ("Klara and the Sun", "Kazuo Ishiguro"),
    ("Middlemarch", "George Eliot"),
    ("The Dispossessed", "Ursula Le Guin"),
    ("Stoner", "John Williams"),
    ("Circe", "Madeline Miller"),
    ("Never Let Me Go", "Kazuo Ishiguro"),
    ("Jonathan Strange", "Susanna Clarke"),
]
PROJECTS = ["billing", "onboarding", "warehouse", "mobile app", "reporting", "search"]
TOPICS = ["budget", "roadmap", "hiring plan", "launch date", "pricing"]
ITEMS = ["rain jacket", "hiking boots", "kettle", "headphones", "desk lamp", "backpack"]
ITEMS += ["coffee grinder", "bike light", "yoga mat", "winter tyres"]
SHOPS = ["Decathlon", "MediaMarkt", "IKEA", "a flea market", "the corner shop", "Globetrotter"]
ROUTES = ["river path", "canal", "park loop", "old railway line", "lake shore"]
DOCTORS = ["Keller", "Novak", "Silva", "Brandt", "Okafor", "Lindqvist"]
AILMENTS = [
    ("back pain", "physiotherapy twice a week"),
    ("migraines", "magnesium and less screen time"),
    ("a sprained ankle", "rest and a brace"),
    ("hay fever", "an antihistamine spray"),
    ("insomnia", "a fixed bedtime"),
]
CITIES = ["Lisbon", "Vienna", "Kraków", "Copenhagen", "Bologna", "Ghent", "Tallinn", "Porto"]
PURPOSES = ["a conference", "a friend's wedding", "a team offsite", "a long weekend"]
HOTELS = ["Harbour", "Central", "Garden", "Station", "Old Town", "Riverside"]
RESTAURANTS = ["Blue Door", "Casa Nova", "Little Fox", "Sol y Sombra", "Nomad Kitchen", "Hanoi 36"]
SMALLTALK = ["her new job", "moving to Leipzig", "the marathon", "a film festival", "their baby"]
SMALLTALK += ["a board game night", "learning to sail"]
SKILLS = ["piano", "Spanish", "guitar", "pottery", "chess", "Japanese"]
LESSONS = ["a new scale", "the subjunctive", "barre chords", "centring clay", "the Sicilian"]
LESSONS += ["two new kanji"]
UTILITIES = ["electricity", "water", "internet", "phone", "heating"]
PLANTS = ["monstera", "basil", "tomato", "fern", "orchid", "lemon tree"]
NEWS = ["is retiring in spring", "adopted a cat", "booked a trip to Norway", "has a new knee"]
NEWS += ["started a choir", "sold the old car"]
DOG = "Biscuit"
VETS = ["vaccinations were renewed", "a small ear infection", "a tooth cleaning", "a sore paw"]
MONTH_NAMES = [
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
]  # fmt: skip


@dataclass
class Made:
    """One entry body and its questions: (question, key, kind); kind "same", "forms" or "odd"
    (an irregular form no stemmer knows). ``family`` keys the questions that a date can add."""

    text: str
    questions: list[tuple[str, tuple[str, ...], str]]
    family: tuple[str, ...]
    dated: list[str] = field(default_factory=list)  # "... {when}?" questions about the family


Maker = Callable[[random.Random], Made]


def hike(r: random.Random) -> Made:
    trail, friend, km = r.choice(TRAILS), r.choice(FRIENDS), r.randrange(8, 28)
    weather = r.choice(["muddy after the rain", "sunny and windy", "foggy at the top", "icy"])
    return Made(
        f"Hiked the {trail} trail with {friend}: {km} km, {weather}.",
        [
            (f"Where did I go hiking with {friend}?", ("hike", friend), "forms"),
            (f"how long was the {trail} hike", ("hike", trail), "forms"),
            (f"what was the weather like on my hikes with {friend}", ("hike", friend), "forms"),
        ],
        ("hike",),
        ["Where did I go hiking {when}?", "which trail did I hike {when}"],
    )


def cook(r: random.Random) -> Made:
    dish, friend = r.choice(DISHES), r.choice(FRIENDS)
    verdict = r.choice(["too salty", "a big success", "needed more garlic", "gone in minutes"])
    return Made(
        f"Cooked {dish} for {friend}'s visit; it was {verdict}.",
        [
            (f"who did I cook {dish} for?", ("cook", dish), "forms"),
            (f"how did the {dish} turn out when I was cooking for {friend}", ("cook", dish, friend),
             "forms"),
            (f"what did I make when {friend} visited?", ("cook", friend), "forms"),
        ],
        ("cook",),
        ["what did I cook {when}?", "what was I cooking {when}"],
    )  # fmt: skip


def vet(r: random.Random) -> Made:
    what, months = r.choice(VETS), r.randrange(2, 12)
    return Made(
        f"Took {DOG} the dog to the vet: {what}; next check in {months} months.",
        [
            ("when do the dogs go back to the vet?", ("vet",), "forms"),
            (f"what did the vet say about {DOG}", ("vet",), "same"),
            (f"vets visit with {DOG}: anything about {what.split()[-1]}s?", ("vet", what),
             "forms"),
        ],
        ("vet",),
        ["what did the vet say {when}?"],
    )  # fmt: skip


def book(r: random.Random) -> Made:
    title, author = r.choice(BOOKS)
    rating = r.randrange(2, 6)
    comment = r.choice(["slow start, great ending", "beautiful prose", "could not put it down"])
    return Made(
        f"Finished reading '{title}' by {author}; rating {rating}/5, {comment}.",
        [
            (f"what did I think of {title}?", ("book", title), "same"),
            (f"which {author.split()[-1]} books have I finished?", ("book", author), "forms"),
            (f"how many stars did I give {title}", ("book", title), "odd"),
        ],
        ("book",),
        ["which book did I finish {when}?", "what was I reading {when}"],
    )


def meeting(r: random.Random) -> Made:
    who, project, topic = r.choice(COLLEAGUES), r.choice(PROJECTS), r.choice(TOPICS)
    action = r.choice(["cut the scope", "run a pilot", "ask finance", "hire a contractor"])
    return Made(
        f"Meeting with {who} about the {project} {topic}; agreed to {action}.",
        [
            (f"What did {who} and I agree on for the {project} {topic}?", ("meet", who, project),
             "forms"),
            (f"outcome of the meetings on the {project} {topic}", ("meet", project, topic),
             "forms"),
        ],
        ("meet",),
        ["who did I have a meeting with {when}?", "what did we agree in meetings {when}"],
    )  # fmt: skip


def purchase(r: random.Random) -> Made:
    item, shop, price = r.choice(ITEMS), r.choice(SHOPS), r.randrange(9, 400)
    return Made(
        f"Bought a {item} at {shop} for {price} euros.",
        [
            (f"how much did the {item} cost?", ("buy", item), "same"),
            (f"where did I buy my {item}s", ("buy", item), "forms"),
        ],
        ("buy",),
        ["what did I buy {when}?", "what did I spend money on {when}"],
    )


def run(r: random.Random) -> Made:
    km, route, minutes = r.randrange(4, 22), r.choice(ROUTES), r.randrange(20, 130)
    feel = r.choice(["legs heavy", "felt great", "new personal best", "knee a bit sore"])
    return Made(
        f"Ran {km} km along the {route} in {minutes} minutes; {feel}.",
        [
            (f"how fast was my run along the {route}?", ("run", route), "odd"),
            (f"how far have I been running on the {route}", ("run", route), "odd"),
        ],
        ("run",),
        ["how far did I run {when}?"],
    )


def doctor(r: random.Random) -> Made:
    doc, (issue, remedy) = r.choice(DOCTORS), r.choice(AILMENTS)
    return Made(
        f"Appointment with Dr. {doc} about {issue}; prescribed {remedy}.",
        [
            (f"What did Dr. {doc} prescribe for my {issue.split()[-1]}?", ("doc", doc, issue),
             "forms"),
            (f"which doctor did I see about {issue}", ("doc", issue), "same"),
        ],
        ("doc",),
        ["what did the doctor say {when}?"],
    )  # fmt: skip


def trip(r: random.Random) -> Made:
    city, purpose, hotel = r.choice(CITIES), r.choice(PURPOSES), r.choice(HOTELS)
    return Made(
        f"Flew to {city} for {purpose}; stayed at the {hotel} hotel.",
        [
            (f"which hotel was I staying at in {city}?", ("trip", city), "forms"),
            (f"why did I travel to {city}", ("trip", city), "same"),
        ],
        ("trip",),
        ["where did I fly to {when}?", "which hotel did I stay at {when}"],
    )


def lunch(r: random.Random) -> Made:
    friend, place, topic = r.choice(FRIENDS), r.choice(RESTAURANTS), r.choice(SMALLTALK)
    return Made(
        f"Lunch with {friend} at {place}; talked about {topic}.",
        [
            (f"what did {friend} and I talk about over lunch?", ("lunch", friend), "forms"),
            (f"who did I have lunches with at {place}", ("lunch", place), "forms"),
        ],
        ("lunch",),
        ["who did I have lunch with {when}?"],
    )


def practice(r: random.Random) -> Made:
    skill, minutes, lesson = r.choice(SKILLS), r.randrange(15, 90), r.choice(LESSONS)
    return Made(
        f"Practised {skill} for {minutes} minutes; learned {lesson}.",
        [
            (f"what have I learnt while practising {skill}?", ("skill", skill), "forms"),
            (f"how long are my {skill} practice sessions", ("skill", skill), "forms"),
        ],
        ("skill",),
        ["what did I practise {when}?"],
    )


def bill(r: random.Random) -> Made:
    util, amount, month = r.choice(UTILITIES), r.randrange(20, 240), r.choice(MONTH_NAMES)
    return Made(
        f"Paid the {util} bill: {amount} euros, next one due in {month}.",
        [
            (f"how much were the {util} bills?", ("bill", util), "forms"),
            (f"when is my {util} payment due", ("bill", util), "forms"),
        ],
        ("bill",),
        ["which bills did I pay {when}?"],
    )


def garden(r: random.Random) -> Made:
    plant = r.choice(PLANTS)
    note = r.choice(["new leaves showing", "aphids again", "moved it to the window", "root rot"])
    return Made(
        f"Repotted the {plant} and watered the balcony plants; {note}.",
        [
            (f"when did I last repot the {plant}?", ("garden", plant), "forms"),
            (f"how are my {plant}s doing", ("garden", plant), "forms"),
        ],
        ("garden",),
        ["what did I do on the balcony {when}?"],
    )


def call(r: random.Random) -> Made:
    who, news = r.choice(RELATIVES), r.choice(NEWS)
    return Made(
        f"Called {who} on the phone; {who.split()[-1]} {news}.",
        [
            (f"what news did {who.split()[-1]} have when we spoke on the phone?", ("call", who),
             "same"),
            (f"calling {who.split()[-1]}: what is new", ("call", who), "forms"),
        ],
        ("call",),
        ["who did I call {when}?"],
    )  # fmt: skip


MAKERS: list[Maker] = [hike, cook, vet, book, meeting, purchase, run, doctor, trip, lunch]
MAKERS += [practice, bill, garden, call]


def raw_entry(r: random.Random, when: datetime) -> str:
    """A [RAW] archive of a short chat, as consolidation writes after repeated failures."""
    lines = []
    for i in range(r.randrange(2, 6)):
        role = "USER" if i % 2 == 0 else "ASSISTANT"
        topic = r.choice(FRIENDS + CITIES + DISHES + SKILLS)
        lines.append(f"[{when + timedelta(minutes=i):%Y-%m-%d %H:%M}] {role}: a chat about {topic}")
    return f"[{when:%Y-%m-%d %H:%M}] [RAW] {len(lines)} messages\n" + "\n".join(lines)


@dataclass
class Question:
    text: str
    target: str  # the stamp of the entry meant
    kind: str  # "same", "forms", "odd" or "date"


@dataclass
class Life:
    entries: list[str]
    questions: list[Question]


def _date_phrases(day: date) -> list[tuple[str, date, date]]:
    """Ways to name a time around ``day`` as asked on NOW: (phrase, first day, day after last)."""
    today = NOW.date()
    out = []
    if day == today - timedelta(days=1):
        out.append(("yesterday", day, today))
    monday = today - timedelta(days=today.weekday())
    if monday - timedelta(days=7) <= day < monday:
        out.append(("last week", monday - timedelta(days=7), monday))
    first = day.replace(day=1)
    after = (first + timedelta(days=32)).replace(day=1)
    if first.year == today.year and first.month < today.month:
        out.append((f"in {MONTH_NAMES[day.month - 1]}", first, after))
        out.append((f"on {day.day} {MONTH_NAMES[day.month - 1]}", day, day + timedelta(days=1)))
        out.append((f"on {MONTH_NAMES[day.month - 1]} {day.day}", day, day + timedelta(days=1)))
    elif first.year < today.year:
        name = MONTH_NAMES[day.month - 1]
        out.append((f"in {name} {day.year}", first, after))
        out.append((f"in {day.year}", date(day.year, 1, 1), date(day.year + 1, 1, 1)))
    if today - timedelta(days=45) <= day:
        lm = (today.replace(day=1) - timedelta(days=1)).replace(day=1)
        if lm <= day < today.replace(day=1):
            out.append(("last month", lm, today.replace(day=1)))
    return out


def build(seed: int = SEED, n_questions: int = 900) -> Life:
    r = random.Random(seed)
    when = START
    entries: list[str] = []
    made: list[tuple[str, Made]] = []  # (stamp, made) for every non-raw entry
    newest: dict[tuple[str, ...], str] = {}
    while True:
        when += timedelta(minutes=r.randrange(60, 300))
        if when.hour < 7 or when.hour > 22:
            when = (when + timedelta(days=1)).replace(hour=r.randrange(7, 10))
        if when >= NOW.replace(tzinfo=None) - timedelta(hours=2):
            break
        if r.random() < 0.04:
            entries.append(raw_entry(r, when))
            continue
        m = r.choice(MAKERS)(r)
        stamp = f"{when:%Y-%m-%d %H:%M}"
        entries.append(f"[{stamp}] {m.text}")
        made.append((stamp, m))
        for _, key, _kind in m.questions:
            newest[key] = stamp
    asked: dict[str, Question] = {}
    for stamp, m in made:
        for question, key, kind in m.questions:
            if newest[key] == stamp:  # the question means this entry only if it is the newest fit
                asked.setdefault(question, Question(question, stamp, kind))
    plain = list(asked.values())
    dated = _dated_questions(r, made)
    r.shuffle(plain)
    r.shuffle(dated)
    n_dated = min(len(dated), n_questions // 3)
    questions = plain[: n_questions - n_dated] + dated[:n_dated]
    r.shuffle(questions)
    return Life(entries, questions)


def _dated_questions(r: random.Random, made: list[tuple[str, Made]]) -> list[Question]:
    """Questions naming a time: the target is the newest entry of the family in that time."""
    by_family: dict[tuple[str, ...], list[tuple[str, Made]]] = {}
    for stamp, m in made:
        by_family.setdefault(m.family, []).append((stamp, m))
    out: dict[str, Question] = {}
    for stamp, m in made:
        day = date.fromisoformat(stamp[:10])
        for phrase, first, after in _date_phrases(day):
            inside = [
                s for s, _ in by_family[m.family] if first <= date.fromisoformat(s[:10]) < after
            ]
            if max(inside) != stamp or r.random() > 0.5:
                continue
            template = r.choice(m.dated)
            text = template.format(when=phrase)
            out.setdefault(text, Question(text, stamp, "date"))
    return list(out.values())


# --- the two ways to answer ---------------------------------------------------------------------

_FILLER = None


def _stopwords() -> frozenset[str]:
    global _FILLER
    if _FILLER is None:
        from memory.search.terms import STOPWORDS

        _FILLER = STOPWORDS
    return _FILLER


def keywords(question: str) -> list[str]:
    """The question as a keyword query: its words, edge punctuation and filler words removed."""
    words = [w.strip("?!,.;:'\"").lower() for w in question.split()]
    return [w for w in words if w and len(w) > 1 and w not in _stopwords()]


def seed_grep(entries_low: list[str], stamps: list[str], question: str) -> list[str]:
    """The seed's retrieval: entries holding every keyword (grep -i chained), newest first."""
    words = keywords(question)
    found = [stamps[i] for i, e in enumerate(entries_low) if all(w in e for w in words)]
    return sorted(found, reverse=True)[:TOP]


def ranked(path: Path) -> Callable[[str], list[str]]:
    from memory.search import engine as search

    takes_now = "now" in inspect.signature(search.search_history).parameters

    def answer(question: str) -> list[str]:
        extra = {"now": NOW} if takes_now else {}
        try:
            hits = search.search_history(path, question, limit=TOP, **extra).hits
        except search.SearchError:
            return []
        return [hit.timestamp for hit in hits]

    return answer


@dataclass
class Score:
    n: int = 0
    top1: int = 0
    top5: int = 0
    rr: float = 0.0
    empty: int = 0

    def add(self, answer: list[str], target: str) -> None:
        self.n += 1
        self.empty += not answer
        if target in answer:
            rank = answer.index(target) + 1
            self.top1 += rank == 1
            self.top5 += rank <= 5
            self.rr += 1.0 / rank

    def row(self) -> str:
        n = max(self.n, 1)
        return (
            f"{self.n:5d} | {self.top1 / n:8.1%} | {self.top5 / n:8.1%} | {self.rr / n:5.3f} | "
            f"{self.empty / n:6.1%}"
        )


def score(
    answer: Callable[[str], list[str]], questions: list[Question]
) -> tuple[Score, dict[str, Score]]:
    total, kinds = Score(), {}
    for q in questions:
        got = answer(q.text)
        total.add(got, q.target)
        kinds.setdefault(q.kind, Score()).add(got, q.target)
    return total, kinds


def split(questions: list[Question], part: str) -> list[Question]:
    """ "tune": even positions, "held": odd ones, "all": every question."""
    if part == "all":
        return questions
    return questions[0 if part == "tune" else 1 :: 2]


def write(folder: Path, life: Life) -> Path:
    path = folder / "HISTORY.md"
    path.write_text("\n\n".join(life.entries) + "\n", encoding="utf-8")
    return path


def report(life: Life, path: Path, part: str = "all") -> dict[str, float]:
    questions = split(life.questions, part)
    low = [e.lower() for e in life.entries]
    stamps = [e[1:17] for e in life.entries]
    header = "  method                 | kind  |     n |  recall@1 | recall@5 |  MRR  | empty"
    print(header)
    print("  " + "-" * (len(header) - 2))
    figures = {}
    times: list[float] = []
    search = ranked(path)

    def timed(question: str) -> list[str]:
        started = time.perf_counter()
        got = search(question)
        times.append(time.perf_counter() - started)
        return got

    methods: list[tuple[str, Callable[[str], list[str]]]] = [
        ("grep every keyword", lambda q: seed_grep(low, stamps, q)),
        ("ranked search", timed),
    ]
    for name, answer in methods:
        total, kinds = score(answer, questions)
        print(f"  {name:22} | all   | {total.row()}")
        for kind in ("same", "forms", "odd", "date"):
            if kind in kinds:
                print(f"  {'':22} | {kind:5} | {kinds[kind].row()}")
        figures[name] = total.top5 / max(total.n, 1)
    print(f"  ranked search: {statistics.median(times) * 1000:.1f} ms per question (median)")
    return figures


def main() -> None:
    part = sys.argv[1] if len(sys.argv) > 1 else "all"
    life = build()
    kinds: dict[str, int] = {}
    for q in life.questions:
        kinds[q.kind] = kinds.get(q.kind, 0) + 1
    print(
        f"One person's life: {len(life.entries)} history entries, {DAYS} days, "
        f"{len(life.questions)} questions asked on {NOW:%Y-%m-%d} ({part}): "
        + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    )
    for q in life.questions[:4]:
        print(f"  e.g. {q.text!r} ({q.kind}) -> entry of {q.target}")
    with tempfile.TemporaryDirectory(prefix="lightgrep-life-") as tmp:
        report(life, write(Path(tmp), life), part)


if __name__ == "__main__":
    main()
