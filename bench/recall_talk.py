"""Recall on conversations the ranking was never shaped on: long and short entries, several people.

``recall_life.py`` is one person's diary in one voice: one short sentence per entry, one fact,
and questions that repeat its names. The ranking was tuned there, and on conversations it had
never seen most of the tuning did not transfer. This set is made unlike it on purpose, in the
ways real histories differ:

- entries as a consolidator writes them after a long chat: several topics in one paragraph (up
  to six), each naming people and places, beside one-line entries and lists ("Packing list for
  the sailing weekend: …");
- numbers and dates written in words ("one thousand two hundred euros", "the fifth of March"),
  and the question using digits, or the other way round;
- typos in the question ("Ljubjana", "recomended") and now and then in the entry;
- questions that share few words with the entry they need ("what's wrong with Miso" for "the
  cat Miso was diagnosed with an ear infection"), and questions typed as keywords, the way a
  model calls the search tool ("Miso vet diagnosis").

People, places, pets and projects recur across entries, so a question names values that several
entries hold; the entry meant is the newest holding every value the question's fact names (its
key). Questions are asked on NOW; half of them (alternating, after a seeded shuffle) are the
tuning half, the others the held-out half that no decision looks at.

Run: python bench/recall_talk.py [tune|held|all]
"""

from __future__ import annotations

import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory.search.numbers import cardinal as in_words
from memory.search.numbers import ordinal

SEED = 20260915
NOW = datetime(2026, 1, 10, 8, 0, tzinfo=UTC)
START = datetime(2023, 6, 1, 9, 0)
N_ENTRIES = 1200
N_QUESTIONS = 1000

PEOPLE = ["Amara", "Bilal", "Carmen", "Dawit", "Eero", "Fatima", "Gustav", "Hana", "Idris"]
PEOPLE += ["Juno", "Kasia", "Lior", "Mateo", "Noor", "Olu", "Pablo", "Rania", "Saskia", "Theo"]
PEOPLE += ["Yara", "Zoë", "Björn"]
RELATIVES = ["my mother", "my father", "Uncle Ravi", "Aunt Mireille", "my cousin Tariq", "Nana"]
CITIES = ["Marseille", "Antwerp", "Gdańsk", "Ljubljana", "Trieste", "Bilbao", "Utrecht"]
CITIES += ["Tampere", "Salzburg", "Nantes", "Aarhus", "Plovdiv"]
PETS = [("cat", "Miso"), ("dog", "Pretzel"), ("rabbit", "Clover"), ("cat", "Tofu")]
PET_ILLS = [
    ("an ear infection", "drops twice a day"),
    ("a stomach bug", "a bland diet for a week"),
    ("fleas", "a spot-on treatment"),
    ("a limp in the back leg", "an X-ray next month"),
]
PROJECTS = ["Atlas", "Beacon", "Kestrel", "Lumen", "Orchard", "Quarry", "Tundra"]
PROJECT_WORK = ["the data export", "the login page", "the pricing page", "the audit report"]
PODCASTS = [
    ("Deep Roots", "the history of gardens"),
    ("Night Shift", "nurses' stories"),
    ("Slow Money", "index funds"),
    ("Ferment", "sourdough and kimchi"),
    ("Far Signal", "radio astronomy"),
]
APPLIANCES = [("washing machine", "bathroom"), ("dishwasher", "kitchen"), ("boiler", "cellar")]
APPLIANCES += [("fridge", "kitchen"), ("shower", "bathroom")]
FAULTS = ["is leaking", "makes a grinding noise", "won't turn on", "trips the fuse"]
TRADES = ["plumber", "electrician", "technician"]
EVENTS = ["sailing weekend", "camping trip", "ski week", "music festival", "beach holiday"]
PACK = ["sunscreen", "a headlamp", "spare batteries", "the first-aid kit", "wool socks"]
PACK += ["a rain poncho", "earplugs", "the camping stove", "a power bank", "flip-flops"]
RACES = ["city half marathon", "trail run", "charity cycle", "open-water swim"]
MEDS = [
    ("iron tablets", "low ferritin"),
    ("vitamin D", "a deficiency"),
    ("an inhaler", "asthma"),
    ("antibiotics", "a sinus infection"),
]
GIFTS = ["a pottery class", "noise-cancelling earbuds", "a hammock", "a star map", "a tea set"]
GIFTS += ["a kayak tour", "a vintage camera"]
OCCASIONS = ["birthday", "anniversary", "retirement", "graduation"]
HOSPITALS = ["St. Anne's", "the university hospital", "the Riverside clinic"]
SURGERIES = ["a hip replacement", "knee surgery", "a cataract operation", "heart bypass surgery"]
MONTHS = [
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
]  # fmt: skip
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
OPENERS = ["", "", "User mentioned that ", "We talked about how ", "The user said "]
LINKS = [" ", " Also: ", " Later, ", " Separately, ", " They also mentioned that "]

def typo(r: random.Random, word: str) -> str:
    """One slip of the keyboard in a word of five letters or more: a letter dropped, doubled,
    swapped with the next or replaced by a neighbour; the first letter is kept."""
    if len(word) < 5:
        return word
    i = r.randrange(1, len(word) - 1)
    how = r.choice(["drop", "double", "swap", "near"])
    if how == "drop":
        return word[:i] + word[i + 1 :]
    if how == "double":
        return word[:i] + word[i] + word[i:]
    if how == "swap":
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    near = {"a": "s", "e": "r", "i": "o", "o": "i", "n": "m", "r": "t", "s": "a", "t": "r"}
    return word[:i] + near.get(word[i], "e") + word[i + 1 :]


def typo_in(r: random.Random, text: str) -> str:
    """The text with one of its longer words mistyped (a name, often)."""
    words = text.split(" ")
    long = [i for i, w in enumerate(words) if len(w.strip("?,.'")) >= 6]
    if not long:
        return text
    i = r.choice(long)
    core = words[i].strip("?,.'")
    words[i] = words[i].replace(core, typo(r, core))
    return " ".join(words)


@dataclass
class Fact:
    """One topic of a conversation: its sentence and questions (text, kind) about it.

    ``key`` names the values the questions are about: the entry a question means is the newest
    whose facts include one with the same key. Kinds: "names" (the question repeats the entry's
    names), "few" (it shares few words with the entry), "number" (a number or date written the
    other way: words for digits or digits for words), "list" (about one item of a list), and
    "keywords" (typed as keywords, as a model calls the search tool). A typo is added later.
    """

    text: str
    key: tuple[str, ...]
    questions: list[tuple[str, str]]
    # Questions with keys of their own ("did I pack sunscreen": the newest list holding it),
    # and further keys the entry holds (each item of a list).
    own: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    also: list[tuple[str, ...]] = field(default_factory=list)


Maker = Callable[[random.Random], Fact]


def trip_plan(r: random.Random) -> Fact:
    a, b = r.sample(PEOPLE, 2)
    city, month = r.choice(CITIES), r.choice(MONTHS)
    how = r.choice(["the night train", "a cheap flight", "a rented van", "the ferry"])
    nights = r.randrange(2, 9)
    return Fact(
        f"{a} and {b} plan to visit {city} in {month} for {in_words(nights)} nights, "
        f"going by {how}.",
        ("trip", a, b, city),
        [
            (f"when are {a} and {b} going to {city}?", "names"),
            (f"how many nights will {a} and {b} stay in {city}", "number"),
            (f"how are {a} and {b} getting to {city}", "names"),
            (f"{a} {b} {city} travel", "keywords"),
        ],
    )


def pet_vet(r: random.Random) -> Fact:
    (animal, name), (ill, cure) = r.choice(PETS), r.choice(PET_ILLS)
    doctor = r.choice(["Dr. Vos", "Dr. Amadi", "Dr. Leclerc"])
    return Fact(
        f"Their {animal} {name} was diagnosed with {ill}; the vet, {doctor}, suggested {cure}.",
        ("pet", name, ill),
        [
            (f"what's wrong with {name}?", "few"),
            (f"what did the vet recommend for {name}'s {ill.split()[-1]}", "names"),
            (f"{name} {ill.split()[-1]} treatment", "keywords"),
        ],
    )


def rent(r: random.Random) -> Fact:
    amount = r.randrange(7, 19) * 100 + r.choice([0, 50])
    month = r.choice(MONTHS)
    who = r.choice(["the landlord", "the housing agency", "Mrs. Petrov, the landlady"])
    return Fact(
        f"{who[0].upper() + who[1:]} wrote that the rent goes up to {in_words(amount)} euros "
        f"from {month}.",
        ("rent", month),
        [
            (f"how much will the rent be from {month}?", "names"),
            (f"is the rent {amount} euros from {month}", "number"),
            (f"rent increase {month}", "keywords"),
            (f"what did the landlord say about the money I pay for the flat from {month}", "few"),
        ],
    )


def packing(r: random.Random) -> Fact:
    event = r.choice(EVENTS)
    items = r.sample(PACK, r.randrange(4, 7))
    asked = r.choice(items)
    bare = asked.removeprefix("a ").removeprefix("the ")
    return Fact(
        f"Packing list for the {event}: " + ", ".join(items[:-1]) + f" and {items[-1]}.",
        ("pack", event),
        [
            (f"what do I need to take on the {event.split()[0]} {event.split()[-1]}", "names"),
            (f"{event} list", "keywords"),
        ],
        own=[(f"did I plan to bring {bare} on the {event}?", "list", ("pack", event, asked))],
        also=[("pack", event, item) for item in items],
    )


def handover(r: random.Random) -> Fact:
    a, b = r.sample(PEOPLE, 2)
    project, work = r.choice(PROJECTS), r.choice(PROJECT_WORK)
    day, month = r.randrange(1, 29), r.choice(MONTHS)
    return Fact(
        f"At work, {a} took over {work} of project {project} from {b}; the new deadline is the "
        f"{ordinal(day)} of {month}.",
        ("handover", project, work),
        [
            (f"who is responsible for {work} on {project} now?", "few"),
            (f"is the {project} deadline {month} {day}?", "number"),
            (f"{project} {work.split()[-2]} {work.split()[-1]} deadline", "keywords"),
            (f"why did {b} stop working on {project}", "names"),
        ],
    )


def hospital(r: random.Random) -> Fact:
    who, what, where = r.choice(RELATIVES), r.choice(SURGERIES), r.choice(HOSPITALS)
    hour = r.randrange(5, 10)
    return Fact(
        f"{who[0].upper() + who[1:]} is recovering from {what} at {where}; visiting hours end "
        f"at {in_words(hour)} in the evening.",
        ("hospital", who),
        [
            (f"until when can I visit {who.split()[-1]} at the hospital?", "names"),
            (f"how is {who.split()[-1]} doing after the operation", "few"),
            (f"{who.split()[-1]} visiting hours {hour}pm", "keywords"),
        ],
    )


def podcast(r: random.Random) -> Fact:
    friend, (title, about) = r.choice(PEOPLE), r.choice(PODCASTS)
    return Fact(
        f"{friend} recommended the podcast '{title}', about {about}.",
        ("podcast", friend),
        [
            (f"which podcast did {friend} suggest?", "few"),
            (f"what was that show {friend} told me to listen to", "few"),
            (f"{friend} recommended podcast", "keywords"),
        ],
    )


def repair(r: random.Random) -> Fact:
    (thing, room), fault = r.choice(APPLIANCES), r.choice(FAULTS)
    trade, day = r.choice(TRADES), r.choice(WEEKDAYS)
    name = r.choice(["Kowalski", "Haddad", "Ferreira", "Nakamura"])
    return Fact(
        f"The {thing} in the {room} {fault}; a {trade} ({name}) is booked for {day} morning.",
        ("repair", thing),
        [
            (f"when is someone coming to fix the {thing}?", "few"),
            (f"what's the matter with the {thing}", "names"),
            (f"{thing} repair appointment", "keywords"),
            (f"who did I book for the {room} {thing}", "names"),
        ],
    )


def race(r: random.Random) -> Fact:
    event, km = r.choice(RACES), r.choice([5, 10, 12, 21, 30, 42, 60, 80])
    day, month, fee = r.randrange(1, 29), r.choice(MONTHS), r.randrange(15, 90)
    return Fact(
        f"Signed up for the {event} on the {ordinal(day)} of {month}: {in_words(km)} "
        f"kilometres, entry fee {fee} euros.",
        ("race", event),
        [
            (f"how long is the {event} I entered?", "names"),
            (f"when is the {event}", "names"),
            (f"{event.split()[-1]} {km} km {month}", "number"),
            (f"what did I pay to register for the {event.split()[-1]}", "few"),
        ],
    )


def money(r: random.Random) -> Fact:
    friend, amount = r.choice(PEOPLE), r.randrange(20, 900)
    why = r.choice(["the concert tickets", "the shared cabin", "half of the rental car", "dinner"])
    return Fact(
        f"Transferred {in_words(amount)} euros to {friend} for {why}.",
        ("money", friend, why),
        [
            (f"how much did I send {friend} for {why.removeprefix('the ')}?", "names"),
            (f"did I pay {friend} back {amount} euros", "number"),
            (f"{friend} money {why.split()[-1]}", "keywords"),
        ],
    )


def medicine(r: random.Random) -> Fact:
    (med, why), doctor = r.choice(MEDS), r.choice(["Dr. Osei", "Dr. Lindgren", "Dr. Haas"])
    return Fact(
        f"{doctor} put the user on {med} for {why}, twice a day with food.",
        ("med", med),
        [
            (f"how often should I take the {med.split()[-1]}?", "names"),
            (f"why am I on {med.split()[-1]}", "names"),
            (f"what did the doctor prescribe for {why.split()[-1]}", "few"),
            (f"{med.split()[-1]} dose", "keywords"),
        ],
    )


def gift(r: random.Random) -> Fact:
    who, occasion = r.choice(PEOPLE + RELATIVES), r.choice(OCCASIONS)
    ideas = r.sample(GIFTS, 2)
    name = who.split()[-1]
    return Fact(
        f"Gift ideas for {name}'s {occasion}: {ideas[0]} or {ideas[1]}.",
        ("gift", name, occasion),
        [
            (f"what could I get {name} for the {occasion}?", "names"),
            (f"present for {name}", "few"),
            (f"{name} {occasion} gift", "keywords"),
        ],
    )


def move(r: random.Random) -> Fact:
    friend, city = r.choice(PEOPLE), r.choice(CITIES)
    job = r.choice(["a research post", "a job at a shipyard", "a teaching job", "her own bakery"])
    return Fact(f"{friend} is moving to {city} in the autumn for {job}.", ("move", friend), [
        (f"where is {friend} moving to?", "names"),
        (f"why is {friend} leaving", "few"),
        (f"{friend} relocating {city}", "keywords"),
    ])  # fmt: skip


def birthday(r: random.Random) -> Fact:
    who = r.choice(PEOPLE)
    day, month = r.randrange(1, 29), r.choice(MONTHS)
    return Fact(
        f"{who}'s birthday is on the {ordinal(day)} of {month}.",
        ("birthday", who),
        [
            (f"when is {who}'s birthday?", "names"),
            (f"is {who} born on {month} {day}", "number"),
            (f"{who} birthday date", "keywords"),
        ],
    )


MAKERS: list[Maker] = [trip_plan, pet_vet, rent, packing, handover, hospital, podcast, repair]
MAKERS += [race, money, medicine, gift, move, birthday]


@dataclass
class Question:
    text: str
    target: str  # the stamp of the entry meant
    kind: str


@dataclass
class Talk:
    entries: list[str]
    questions: list[Question]


def _raw(r: random.Random, when: datetime) -> str:
    lines = []
    for i in range(r.randrange(2, 8)):
        role = "USER" if i % 2 == 0 else "ASSISTANT"
        about = r.choice(PEOPLE + CITIES + PROJECTS)
        lines.append(f"[{when + timedelta(minutes=i):%Y-%m-%d %H:%M}] {role}: something on {about}")
    return f"[{when:%Y-%m-%d %H:%M}] [RAW] {len(lines)} messages\n" + "\n".join(lines)


def _entry_text(r: random.Random, facts: list[Fact]) -> str:
    """One consolidated paragraph: a long chat holds several topics, a short one one; a slip
    of the keyboard now and then, as a model's summary of a person's typing may keep."""
    parts = []
    for i, fact in enumerate(facts):
        text = fact.text
        if i == 0:
            opener = r.choice(OPENERS)
            if opener:
                text = opener + text[0].lower() + text[1:] if not text[:2].istitle() else (
                    opener + text
                )
        else:
            text = r.choice(LINKS).lstrip() + text if r.random() < 0.5 else text
        parts.append(text)
    body = " ".join(parts)
    if r.random() < 0.05:
        body = typo_in(r, body)
    return body


def build(seed: int = SEED) -> Talk:
    r = random.Random(seed)
    when = START
    entries: list[str] = []
    newest: dict[tuple[str, ...], str] = {}
    asked: list[tuple[str, str, tuple[str, ...], str]] = []  # (question, kind, key, stamp)
    for _ in range(N_ENTRIES):
        when += timedelta(minutes=r.randrange(120, 2000))
        if r.random() < 0.04:
            entries.append(_raw(r, when))
            continue
        size = r.choices([1, 2, 3, 4, 6], weights=[35, 20, 20, 15, 10])[0]
        facts = [r.choice(MAKERS)(r) for _ in range(size)]
        stamp = f"{when:%Y-%m-%d %H:%M}"
        entries.append(f"[{stamp}] {_entry_text(r, facts)}")
        for fact in facts:
            for key in [fact.key, *fact.also]:
                newest[key] = stamp
            for question, kind in fact.questions:
                asked.append((question, kind, fact.key, stamp))
            asked += [(question, kind, key, stamp) for question, kind, key in fact.own]
    # A question means the newest entry with its key, so it is asked about that entry's fact
    # (a rent asked with an older amount means no entry); asked once however often it fits.
    unique: dict[str, tuple[str, tuple[str, ...]]] = {}
    for question, kind, key, stamp in asked:
        if newest[key] == stamp:
            unique.setdefault(question, (kind, key))
    assert when < NOW.replace(tzinfo=None), "every entry is filed before the questions"
    pool = list(unique.items())
    r.shuffle(pool)
    questions = []
    for question, (kind, key) in pool[:N_QUESTIONS]:
        if r.random() < 0.15:
            question, kind = typo_in(r, question), "typo"
        questions.append(Question(question, newest[key], kind))
    return Talk(entries, questions)


def main() -> None:
    import recall_table

    part = sys.argv[1] if len(sys.argv) > 1 else "all"
    talk = build()
    kinds: dict[str, int] = {}
    for q in talk.questions:
        kinds[q.kind] = kinds.get(q.kind, 0) + 1
    print(
        f"Conversations: {len(talk.entries)} history entries, {len(talk.questions)} questions "
        f"({part}): " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    )
    for q in talk.questions[:6]:
        print(f"  e.g. {q.text!r} ({q.kind}) -> entry of {q.target}")
    with tempfile.TemporaryDirectory(prefix="lightgrep-talk-") as tmp:
        recall_table.report_kinds("talk", talk.entries, talk.questions, NOW, Path(tmp), part)


if __name__ == "__main__":
    main()
