"""Recall on long chats of two friends over many sessions: names in every entry, few shared words.

The other sets (bench/recall_life.py, recall_eval.py, recall_talk.py) are one person's notes: a
name there tells entries apart. Here each entry is one session of a long chat between two
friends, kept whole as a transcript ("Maya: …" / "Jonas: …") or as a consolidated summary
("Maya told Jonas that …"), 1 to 4 KB, many small topics per session. Both friends' names are
in nearly every entry, so names discriminate little; three pairs of friends share the file.
What a question needs is one event told in passing among a dozen others, in other words than
the question's ("got back from Porto" / "when did Maya visit Porto", "ceramics course" /
"pottery class"), often with a relative day ("yesterday", "last weekend") that only the
entry's date resolves. Threads recur (Maya's painting, Jonas's running, the kids, work), so
the common words of an event are in many sessions and its rare ones (a place, a name, a title)
in one.

Questions are asked the ways a person or a model types them: natural ("When did Maya go to the
pottery class?"), temporal ("when did …"), about a detail said in passing, and as keywords
("Maya pottery class"). A question is kept only when exactly one entry holds what it asks (its
key), so every question has one right answer. Seeded; the questions are shuffled and split
into a tuning half (even positions) and a held-out half (odd) that no decision looks at.

Run: python bench/recall_friends.py [tune|held|all]
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

from memory.search.numbers import cardinal

SEED = 20261202
NOW = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
START = datetime(2024, 3, 4, 19, 0)
SESSIONS_PER_PAIR = 90
N_QUESTIONS = 1500


@dataclass(frozen=True)
class Person:
    name: str
    partner: str
    kids: tuple[str, ...]
    pet: tuple[str, str]  # (animal, name)
    hobbies: tuple[str, ...]
    job: str
    pronoun: str  # "she" / "he"


PAIRS = [
    (
        Person("Maya", "Daniel", ("Lily", "Sam"), ("dog", "Biscuit"), ("painting", "hiking"),
               "nurse", "she"),
        Person("Jonas", "Ines", ("Theo",), ("cat", "Pixel"), ("running", "guitar"),
               "teacher", "he"),
    ),
    (
        Person("Priya", "Arjun", ("Anika",), ("cat", "Mango"), ("baking", "yoga"),
               "architect", "she"),
        Person("Tomasz", "Kasia", ("Olek", "Zofia"), ("dog", "Rocky"), ("cycling", "chess"),
               "electrician", "he"),
    ),
    (
        Person("Elena", "Marco", ("Luca",), ("dog", "Nala"), ("gardening", "photography"),
               "lawyer", "she"),
        Person("Kwame", "Abena", ("Kofi", "Esi"), ("parrot", "Sunny"), ("football", "cooking"),
               "chef", "he"),
    ),
]  # fmt: skip

# Ways to say one thing: the entry picks one, the question often another.
CLASSES = [
    (["pottery class", "ceramics course", "clay workshop"], ["bowl", "vase", "mug", "teapot"]),
    (["watercolour workshop", "painting class", "art lesson"], ["lighthouse", "sunflowers",
                                                                 "harbour", "self-portrait"]),
    (["cooking class", "cookery course", "culinary workshop"], ["dumplings", "gnocchi", "curry",
                                                                "croissants"]),
    (["salsa lesson", "dance class", "dancing course"], ["a spin", "the basic step", "a dip"]),
    (["photography course", "camera workshop", "photo class"], ["long exposures", "portraits",
                                                                "night shots"]),
]  # fmt: skip
PLACES = ["Porto", "Kyoto", "the Dolomites", "Lake Bled", "Cinque Terre", "Big Sur", "Reykjavik"]
PLACES += ["Edinburgh", "Seville", "Dubrovnik", "Tallinn", "the Azores", "Zion Park", "Hallstatt"]
PLACES += ["Krakow", "Marrakesh", "Lofoten", "Santorini", "Banff", "Cornwall", "Ghent", "Bruges"]
PLACES += ["Sintra", "Tromso", "Naples", "Valletta", "Bergamo", "Granada", "Oaxaca", "Hanoi"]
PLACES += ["Montreux", "Galway", "Rovinj", "Salamanca", "Matera", "Kotor", "Riga", "Vilnius"]
SIGHTS = ["the old bridge", "a tiny fish market", "the cliffs", "a cable car", "the cathedral",
          "a night market", "the hot springs", "a lighthouse tour"]  # fmt: skip
TRIP_WORDS = [("just got back from", "trip to"), ("spent a long weekend in", "getaway to"),
              ("finally made it to", "visit to")]  # fmt: skip
BANDS = ["the Velvet Foxes", "Moonlit Harbour", "Paper Kites", "Glass Animals", "the Lumineers"]
BANDS += ["Copper Tide", "Saint Motel", "the Midnight Owls", "Fleet Foxes", "Bombay Bicycle"]
BANDS += ["the Staves", "Khruangbin", "Big Thief", "Bon Iver", "the Marias", "Arlo Parks"]
VENUES = ["the arena", "an open-air stage", "a small club downtown", "the old theatre"]
CONCERT = ["concert", "gig", "show"]
BOOKS = [("The Salt Path", "Raynor Winn"), ("Educated", "Tara Westover"),
         ("Project Hail Mary", "Andy Weir"), ("Circe", "Madeline Miller"),
         ("The Overstory", "Richard Powers"), ("Braiding Sweetgrass", "Robin Kimmerer"),
         ("Piranesi", "Susanna Clarke"), ("Station Eleven", "Emily Mandel"),
         ("The Midnight Library", "Matt Haig"), ("Pachinko", "Min Jin Lee"),
         ("Shuggie Bain", "Douglas Stuart"), ("Hamnet", "Maggie O'Farrell"),
         ("Lessons in Chemistry", "Bonnie Garmus"), ("The Vanishing Half", "Brit Bennett"),
         ("Tomorrow and Tomorrow", "Gabrielle Zevin"), ("Demon Copperhead", "Barbara Kingsolver"),
         ("Klara and the Sun", "Kazuo Ishiguro"),
         ("A Gentleman in Moscow", "Amor Towles")]  # fmt: skip
KID_EVENTS = [
    ("lost {his} first tooth", "first tooth"),
    ("started swimming lessons", "swimming lessons"),
    ("won second prize at the science fair", "science fair"),
    ("learned to ride a bike without stabilisers", "ride a bike"),
    ("had {his} school play, playing a tree", "school play"),
    ("got a certificate for reading fifty books", "reading certificate"),
]
COMPANIES = ["Northwind", "Brightline", "Helix Labs", "Cedar Health", "Orbital", "Fernway"]
COMPANIES += ["Quillon", "Marlowe Group", "Tessellate", "Vantor", "Bluegate", "Stonebridge"]
WORK_EVENTS = [("got promoted to team lead", "promotion"),
               ("had an interview at {co}", "interview"),
               ("gave a talk at the {co} conference", "talk"),
               ("started a new project with {co}", "project")]  # fmt: skip
INJURIES = [("sprained {his} ankle", "ankle"), ("pulled a muscle in {his} back", "back"),
            ("bruised {his} ribs", "ribs"), ("twisted {his} knee", "knee")]  # fmt: skip
INJURY_HOW = ["playing football", "on a wet staircase", "moving a sofa", "on an icy path",
              "at the climbing gym"]  # fmt: skip
ROOMS = ["living room", "bedroom", "kitchen", "hallway", "study"]
COLOURS = ["sage green", "terracotta", "navy blue", "mustard yellow", "dusty pink", "off-white"]
CAUSES = [("food bank", "a bake sale"), ("animal shelter", "a sponsored walk"),
          ("children's hospital", "a charity run"), ("homeless shelter", "a raffle")]  # fmt: skip
RACES = ["half marathon", "10K", "trail race", "charity 5K", "marathon"]
RACE_CITIES = ["Berlin", "Valencia", "Rotterdam", "Lisbon", "Chicago", "Dublin", "Seoul", "Prague"]
RACE_CITIES += ["Vienna", "Copenhagen", "Boston", "Athens"]
PLANTS = ["tomatoes", "courgettes", "sunflowers", "strawberries", "basil", "runner beans"]
PLANTS += ["dahlias", "garlic"]
BAKES = ["a lemon drizzle cake", "cinnamon rolls", "a sourdough loaf", "a carrot cake"]
BAKES += ["banana bread", "apple pie", "chocolate brownies"]
OCCASIONS = ["{kid}'s birthday", "the school fair", "a neighbour's farewell", "Mother's Day",
             "the office party"]  # fmt: skip
INSTRUMENTS = ["ukulele", "piano", "cello", "drums", "violin", "saxophone"]
TEACHERS = ["Mrs. Okafor", "a retired jazz player called Hugo", "a student named Priyanka",
            "an old neighbour, Mr. Haddad"]  # fmt: skip
FILMS = ["Dune Part Two", "Past Lives", "Oppenheimer", "Perfect Days", "The Holdovers"]
FILMS += ["Inside Out 2", "Anatomy of a Fall", "Poor Things", "Aftersun", "The Zone of Interest"]
FILMS += ["Wicked", "Conclave", "Flow", "The Substance", "Paddington in Peru", "Challengers"]
CAMP_SPOTS = ["Loch Lomond", "the Black Forest", "Lake Garda", "the Peak District", "Snowdonia"]
CAMP_SPOTS += ["Dartmoor", "the Ardennes", "Lake District", "the Vosges", "Glencoe", "Exmoor"]
CAMP_ANIMALS = ["a deer", "a family of foxes", "an owl", "wild boar", "a heron"]
BUYS = [("a second-hand camper van", "van"), ("an electric bike", "bike"),
        ("a standing desk", "desk"), ("a vintage record player", "record player"),
        ("a kayak", "kayak"), ("a telescope", "telescope"), ("a sewing machine", "sewing machine")]
NEIGHBOURS = ["Greta", "Omar", "Beatrice", "Yusuf", "Colette", "Ravi", "Hilde", "Mateus", "Ingrid"]
NEIGHBOURS += ["Bogdan", "Leonie", "Farah"]
MOVES = ["Vancouver", "Lyon", "Melbourne", "Bergen", "Montreal", "Bologna", "Auckland", "Leipzig"]
WHEN_SAID = ["yesterday", "last weekend", "on Saturday", "last Friday", "two days ago",
             "this morning", "last week", "on Sunday"]  # fmt: skip
FILLER = [
    ("How's work been?", "Busy as always, but fine."),
    ("How are the kids?", "Loud, happy, always hungry."),
    ("Did you get any sleep this week?", "Not much, honestly."),
    ("Any plans for the weekend?", "Nothing yet, maybe just rest."),
    ("How is {pet} doing?", "Spoiled as ever."),
    ("Still keeping up with the {hobby}?", "Trying to, a bit every week."),
    ("How's {partner}?", "Good, working a lot lately."),
    ("The weather has been awful here.", "Same here, rain all week."),
    ("I miss our long talks.", "Me too, we should do this more often."),
    ("Work is stressing me out a bit.", "Take it easy, you deserve a break."),
]
# Chat around the events: the common words of the questions ("trip", "class", "movie") said
# of nothing in particular, as friends do, so that only an event's rare words tell it apart.
SMALL_TALK = [
    "We should plan a trip together one day.", "I'd love to travel more next year.",
    "Have you been to any concert lately?", "I need a new book to read, any ideas?",
    "We keep saying we'll watch a movie and then fall asleep.", "I keep meaning to take a class.",
    "Money is tight this month.", "Thinking about doing another race in spring.",
    "The garden needs so much work.", "I haven't baked anything in weeks.",
    "I always wanted to learn an instrument.", "Camping sounds fun until it rains.",
    "Our neighbours are so noisy.", "I'm thinking of moving somewhere quieter.",
    "My knee has been bothering me again.", "We need to paint the house at some point.",
    "The vet bills are getting expensive.", "School runs are exhausting.",
    "There might be a promotion coming up at work.", "I hate job interviews.",
    "What colour would you pick for a bedroom?", "Do you still go running?",
    "I saw a great film trailer yesterday.", "We should visit your parents soon.",
    "The kids want a pet, of course.", "I bought way too much stuff online.",
    "Charity events always make me happy.", "I need a holiday.",
    "Remember that workshop we wanted to do?", "The weekend went by too fast.",
]
REACT = ["That's amazing!", "Oh wow.", "No way!", "That sounds lovely.", "I'm so glad.",
         "Ouch, sorry to hear.", "Haha, classic.", "Tell me more!"]  # fmt: skip


@dataclass
class Topic:
    """One thing told in a session: the teller's lines, what a summary says, and questions.

    Each question has a key: the entry meant is the only one whose topics hold that key (a
    question whose key two sessions hold is ambiguous and not asked)."""

    lines: list[str]  # the teller's words, first person
    summary: str  # a consolidator's sentence, third person
    questions: list[tuple[str, str, tuple[str, ...]]]  # (text, kind, key)


Maker = Callable[[random.Random, Person], Topic]


def _his(p: Person) -> str:
    return "her" if p.pronoun == "she" else "his"


def _pick(r: random.Random, ways: list[str]) -> tuple[str, str]:
    """One way for the entry, and the question's: another way two times in three."""
    said = r.choice(ways)
    asked = said if r.random() < 0.34 else r.choice([w for w in ways if w != said])
    return said, asked


def class_topic(r: random.Random, p: Person) -> Topic:
    ways, made = r.choice(CLASSES)
    said, asked = _pick(r, ways)
    thing, when = r.choice(made), r.choice(WHEN_SAID)
    return Topic(
        [f"I went to a {said} {when}!",
         f"We did {thing}, mine came out a bit wonky but I love it."],
        f"{p.name} went to a {said} {when} and made {thing}.",
        [
            (f"When did {p.name} go to the {asked}?", "temporal", ("class", p.name, ways[0])),
            (f"What did {p.name} make at the {asked}?", "natural", ("class", p.name, ways[0])),
            (f"{p.name} {asked} {thing}", "keywords", ("class", p.name, ways[0], thing)),
        ],
    )


def trip_topic(r: random.Random, p: Person) -> Topic:
    place, sight = r.choice(PLACES), r.choice(SIGHTS)
    who = r.choice([p.partner, *p.kids, "my sister", "my parents"])
    told, noun = r.choice(TRIP_WORDS)
    return Topic(
        [f"We {told} {place} with {who}.", f"The best part was {sight}, unforgettable."],
        f"{p.name} {told} {place} with {who}; the highlight was {sight}.",
        [
            (f"When did {p.name} visit {place}?", "temporal", ("trip", p.name, place)),
            (f"Who did {p.name} travel to {place} with?", "natural", ("trip", p.name, place)),
            (f"What did {p.name} like most about {place}?", "passing", ("trip", p.name, place)),
            (f"{p.name} {place} {noun}", "keywords", ("trip", p.name, place)),
        ],
    )


def concert_topic(r: random.Random, p: Person) -> Topic:
    band, venue, when = r.choice(BANDS), r.choice(VENUES), r.choice(WHEN_SAID)
    said, asked = _pick(r, CONCERT)
    return Topic(
        [f"Guess what, I saw {band} live {when}!", f"It was at {venue}, the crowd was wild."],
        f"{p.name} saw {band} in {said} at {venue} {when}.",
        [
            (f"When did {p.name} see {band}?", "temporal", ("concert", p.name, band)),
            (f"Where did {p.name} see {band} play?", "natural", ("concert", p.name, band)),
            (f"{p.name} {band.removeprefix('the ')} {asked}", "keywords",
             ("concert", p.name, band)),
        ],
    )  # fmt: skip


def pet_topic(r: random.Random, p: Person) -> Topic:
    animal, name = p.pet
    did, asked, details = r.choice([
        ("learned to {d}", "learn the new trick", ["fetch the newspaper", "open the back door",
                                                   "ring a bell"]),
        ("had to go to the vet for {d}", "go to the vet", ["a swollen paw", "an upset stomach",
                                                          "a tick bite"]),
        ("chewed up {d}", "destroy something", ["my favourite slippers", "the TV remote",
                                                "a library book"]),
    ])  # fmt: skip
    detail = r.choice(details)
    did = did.format(d=detail)
    return Topic(
        [f"{name} {did} {r.choice(WHEN_SAID)}.", f"That {animal} never stops surprising me."],
        f"{p.name}'s {animal} {name} {did}.",
        [
            (f"What happened with {p.name}'s {animal}?", "natural", ("pet", p.name)),
            (f"{name} {detail.split()[-1]}", "keywords", ("pet", p.name, did)),
            (f"When did {name} {asked}?", "temporal", ("pet", p.name, asked)),
        ],
    )


def book_topic(r: random.Random, p: Person) -> Topic:
    title, author = r.choice(BOOKS)
    return Topic(
        [f"I just finished {title} by {author}.", "You have to read it, it made me cry."],
        f"{p.name} recommended the book {title} by {author}.",
        [
            (f"What book did {p.name} recommend?", "natural", ("book", p.name)),
            (f"Who wrote the book {p.name} finished, {title}?", "passing", ("book", p.name, title)),
            (f"{p.name} {title} book", "keywords", ("book", p.name, title)),
            (f"{author.split()[-1]} novel recommendation", "keywords", ("book", author)),
        ],
    )  # fmt: skip


def kid_topic(r: random.Random, p: Person) -> Topic:
    kid = r.choice(p.kids)
    event, short = r.choice(KID_EVENTS)
    did = event.format(his="their")
    return Topic(
        [f"Big news: {kid} {did} {r.choice(WHEN_SAID)}!", "We're so proud."],
        f"{p.name}'s child {kid} {did}.",
        [
            (f"When did {kid} have the {short}?", "temporal", ("kid", kid, short)),
            (f"{kid} {short}", "keywords", ("kid", kid, short)),
            (f"how did {p.name}'s kid do with the {short}", "natural", ("kid", kid, short)),
        ],
    )  # fmt: skip


def work_topic(r: random.Random, p: Person) -> Topic:
    co = r.choice(COMPANIES)
    event, noun = r.choice(WORK_EVENTS)
    did = event.format(co=co)
    return Topic(
        [f"Work update: I {did}.", f"Being a {p.job} is never boring."],
        f"{p.name} {did} {r.choice(WHEN_SAID)}.",
        [
            (f"When did {p.name} have the {noun} with {co}?", "temporal", ("work", p.name, did)),
            (f"{p.name} {co} {noun}", "keywords", ("work", p.name, did)),
        ]
        if "{co}" in event
        else [
            (f"When was {p.name} promoted?", "temporal", ("work", p.name, did)),
            (f"{p.name} promotion team lead", "keywords", ("work", p.name, did)),
        ],
    )


def injury_topic(r: random.Random, p: Person) -> Topic:
    hurt, part = r.choice(INJURIES)
    how = r.choice(INJURY_HOW)
    did = hurt.format(his="my")
    weeks = r.randrange(2, 7)
    return Topic(
        [f"I {did} {how}, so painful.", f"The doctor says no sport for {weeks} weeks."],
        f"{p.name} {hurt.format(his=_his(p))} {how}; no sport for {weeks} weeks.",
        [
            (f"How did {p.name} hurt {_his(p)} {part}?", "natural", ("injury", p.name, part)),
            (f"How long does {p.name} have to rest the {part}?", "passing",
             ("injury", p.name, part)),
            (f"{p.name} injury {part}", "keywords", ("injury", p.name, part)),
        ],
    )  # fmt: skip


def home_topic(r: random.Random, p: Person) -> Topic:
    room, colour = r.choice(ROOMS), r.choice(COLOURS)
    return Topic(
        [f"We finally repainted the {room}, it's {colour} now.", "Took the whole weekend."],
        f"{p.name} repainted the {room} {colour}.",
        [
            (f"What colour did {p.name} paint the {room}?", "natural", ("home", p.name, room)),
            (f"{p.name} {room} paint colour", "keywords", ("home", p.name, room)),
        ],
    )


def charity_topic(r: random.Random, p: Person) -> Topic:
    (cause, how), amount = r.choice(CAUSES), r.randrange(3, 40) * 50
    words = cardinal(amount)
    return Topic(
        [f"We did {how} for the {cause} {r.choice(WHEN_SAID)}.",
         f"We raised {words if r.random() < 0.5 else amount} dollars!"],
        f"{p.name} raised {words} dollars for the {cause} with {how}.",
        [
            (f"How much money did {p.name} raise for the {cause}?", "natural",
             ("charity", p.name, cause)),
            (f"{p.name} {cause} {amount}", "keywords", ("charity", p.name, cause)),
            (f"when did {p.name} do {how}", "temporal", ("charity", p.name, how)),
        ],
    )  # fmt: skip


def race_topic(r: random.Random, p: Person) -> Topic:
    race, city = r.choice(RACES), r.choice(RACE_CITIES)
    mins = r.randrange(25, 59)
    return Topic(
        [f"I ran the {city} {race} {r.choice(WHEN_SAID)}.",
         f"Finished with a time I'm proud of, shaved {mins} seconds off my best."],
        f"{p.name} ran the {city} {race} and beat {_his(p)} best time.",
        [
            (f"When did {p.name} run the {city} {race}?", "temporal", ("race", p.name, city)),
            (f"{p.name} {city} race result", "keywords", ("race", p.name, city)),
            (f"Which race did {p.name} do in {city}?", "natural", ("race", p.name, city)),
        ],
    )  # fmt: skip


def garden_topic(r: random.Random, p: Person) -> Topic:
    plants = r.sample(PLANTS, 2)
    return Topic(
        [f"Spent the day in the garden planting {plants[0]} and {plants[1]}.",
         "My back hurts but it's worth it."],
        f"{p.name} planted {plants[0]} and {plants[1]} in the garden.",
        [
            (f"When did {p.name} plant {plants[0]}?", "temporal", ("garden", p.name, plants[0])),
            (f"{p.name} garden {plants[1]}", "keywords", ("garden", p.name, plants[1])),
        ],
    )  # fmt: skip


def bake_topic(r: random.Random, p: Person) -> Topic:
    bake = r.choice(BAKES)
    occasion = r.choice(OCCASIONS).format(kid=r.choice(p.kids))
    short = bake.removeprefix("a ")
    return Topic(
        [f"I baked {bake} for {occasion}.", "It disappeared in ten minutes."],
        f"{p.name} baked {bake} for {occasion}.",
        [
            (f"What did {p.name} bake for {occasion}?", "natural", ("bake", p.name, occasion)),
            (f"{p.name} {short} {occasion.split()[-1]}", "keywords", ("bake", p.name, bake)),
        ],
    )


def instrument_topic(r: random.Random, p: Person) -> Topic:
    instrument, teacher = r.choice(INSTRUMENTS), r.choice(TEACHERS)
    return Topic(
        [f"I started learning the {instrument}!", f"My teacher is {teacher}, very patient."],
        f"{p.name} started {instrument} lessons with {teacher}.",
        [
            (f"What instrument did {p.name} start learning?", "natural", ("music", p.name)),
            (f"Who teaches {p.name} the {instrument}?", "passing", ("music", p.name, instrument)),
            (f"{p.name} {instrument} lessons", "keywords", ("music", p.name, instrument)),
        ],
    )


def film_topic(r: random.Random, p: Person) -> Topic:
    film = r.choice(FILMS)
    who = r.choice([p.partner, *p.kids])
    return Topic(
        [f"{who} and I watched {film} at the cinema.", "Still thinking about the ending."],
        f"{p.name} saw the film {film} with {who}.",
        [
            (f"What movie did {p.name} watch with {who}?", "natural", ("film", p.name, who)),
            (f"when did {p.name} see {film}", "temporal", ("film", p.name, film)),
            (f"{p.name} {film} movie", "keywords", ("film", p.name, film)),
        ],
    )


def camping_topic(r: random.Random, p: Person) -> Topic:
    spot, animal = r.choice(CAMP_SPOTS), r.choice(CAMP_ANIMALS)
    return Topic(
        [f"We went camping at {spot} {r.choice(WHEN_SAID)}.",
         f"At dawn we saw {animal} right by the tent!"],
        f"{p.name} went camping at {spot} and saw {animal}.",
        [
            (f"What animal did {p.name} see while camping at {spot}?", "passing",
             ("camp", p.name, spot)),
            (f"When did {p.name} go camping at {spot}?", "temporal", ("camp", p.name, spot)),
            (f"{p.name} camping {spot}", "keywords", ("camp", p.name, spot)),
        ],
    )  # fmt: skip


def buy_topic(r: random.Random, p: Person) -> Topic:
    thing, short = r.choice(BUYS)
    return Topic(
        [f"I finally bought {thing}.", "Best decision of the year, honestly."],
        f"{p.name} bought {thing}.",
        [
            (f"When did {p.name} get the {short}?", "temporal", ("buy", p.name, short)),
            (f"{p.name} new {short}", "keywords", ("buy", p.name, short)),
            (f"did {p.name} purchase a {short}", "natural", ("buy", p.name, short)),
        ],
    )


def neighbour_topic(r: random.Random, p: Person) -> Topic:
    name, city = r.choice(NEIGHBOURS), r.choice(MOVES)
    return Topic(
        [f"Oh, and my neighbour {name} is moving to {city}.",
         "I'll miss our chats over the fence."],
        f"In passing, {p.name} said {_his(p)} neighbour {name} is moving to {city}.",
        [
            (f"Where is {p.name}'s neighbour {name} moving?", "passing", ("move", p.name, name)),
            (f"{name} moving {city}", "keywords", ("move", p.name, name)),
        ],
    )  # fmt: skip


MAKERS: list[Maker] = [class_topic, trip_topic, concert_topic, pet_topic, book_topic, kid_topic]
MAKERS += [work_topic, injury_topic, home_topic, charity_topic, race_topic, garden_topic]
MAKERS += [bake_topic, instrument_topic, film_topic, camping_topic, buy_topic, neighbour_topic]


@dataclass
class Question:
    text: str
    target: str  # the stamp of the entry meant
    kind: str


@dataclass
class Friends:
    entries: list[str]
    questions: list[Question]
    kinds: dict[str, int] = field(default_factory=dict)


def _filler(r: random.Random, asker: Person, teller: Person) -> list[str]:
    if r.random() < 0.5:
        return [f"{asker.name}: {r.choice(SMALL_TALK)}", f"{teller.name}: {r.choice(REACT)}"]
    ask, answer = r.choice(FILLER)
    fill = {"pet": teller.pet[1], "hobby": r.choice(teller.hobbies), "partner": teller.partner}
    return [f"{asker.name}: {ask.format(**fill)}", f"{teller.name}: {answer}"]


def _transcript(r: random.Random, n: int, a: Person, b: Person,
                told: list[tuple[Person, Topic]]) -> str:  # fmt: skip
    lines = [f"Session {n} of {a.name} and {b.name}'s chat."]
    for teller, topic in told:
        friend = b if teller is a else a
        if r.random() < 0.6:
            lines += _filler(r, friend, teller)
        lines.append(f"{teller.name}: {topic.lines[0]}")
        lines.append(f"{friend.name}: {r.choice(REACT)}")
        lines.append(f"{teller.name}: {topic.lines[1]}")
    return "\n".join(lines)


def _summary(r: random.Random, a: Person, b: Person, told: list[tuple[Person, Topic]]) -> str:
    parts = [f"{a.name} and {b.name} caught up."]
    last = None
    for teller, topic in told:
        if r.random() < 0.4:
            friend = b if teller is a else a
            if r.random() < 0.5:
                parts.append(f"{friend.name} asked about {r.choice(teller.hobbies)}.")
            else:
                talk = r.choice(SMALL_TALK)
                parts.append(f"{friend.name} said: \"{talk}\"")
            last = None
        said = topic.summary
        if teller is last and said.startswith(teller.name + " ") and r.random() < 0.6:
            said = teller.pronoun + said[len(teller.name) :]  # "She went …": no name again
        parts.append(said[0].upper() + said[1:])
        last = teller
    return " ".join(parts)


def _follow_ups(r: random.Random, text: str, a: Person, b: Person,
                back: list[tuple[Person, Topic]], transcript: bool) -> str:  # fmt: skip
    """A session coming back to events of the last one: their rare words again (a place, a
    title), without what was asked about them, so an older mention must outrank the newer."""
    lines = text.split("\n") if transcript else [text]
    for teller, topic in back:
        friend = b if teller is a else a
        ref = max((q[2] for q in topic.questions), key=len)[-1]
        if transcript:
            at = r.randrange(1, len(lines) + 1)
            lines[at:at] = [f"{friend.name}: So how was it after {ref}?",
                            f"{teller.name}: {r.choice(REACT)} Still happy about it."]
        else:
            lines.append(f"{friend.name} asked again about {ref}.")
    return "\n".join(lines) if transcript else " ".join(lines)


def build(seed: int = SEED) -> Friends:
    r = random.Random(seed)
    entries: list[str] = []
    holders: dict[tuple[str, ...], set[str]] = {}
    asked: list[tuple[str, str, tuple[str, ...], str]] = []
    clocks = [START + timedelta(hours=3 * i) for i in range(len(PAIRS))]
    sessions = [(p, n) for n in range(1, SESSIONS_PER_PAIR + 1) for p in range(len(PAIRS))]
    later: list[list[tuple[Person, Topic]]] = [[] for _ in PAIRS]  # events to come back to
    for p, n in sessions:
        a, b = PAIRS[p]
        clocks[p] += timedelta(days=r.randrange(3, 12), minutes=r.randrange(0, 600))
        stamp = f"{clocks[p]:%Y-%m-%d %H:%M}"
        transcript = r.random() < 0.6
        size = r.randrange(6, 18) if transcript else r.randrange(8, 20)
        told = [(t := r.choice([a, b]), r.choice(MAKERS)(r, t)) for _ in range(size)]
        back, later[p] = later[p], [x for x in told if r.random() < 0.3]
        text = _transcript(r, n, a, b, told) if transcript else _summary(r, a, b, told)
        text = _follow_ups(r, text, a, b, back, transcript)
        entries.append(f"[{stamp}] {text}")
        for _, topic in told:
            for question, kind, key in topic.questions:
                holders.setdefault(key, set()).add(stamp)
                asked.append((question, kind, key, stamp))
    entries.sort()  # the pairs' sessions interleave by date, as one log would hold them
    assert entries[-1][1:17] < f"{NOW:%Y-%m-%d %H:%M}", "every entry is filed before NOW"
    unique: dict[str, tuple[str, str]] = {}
    for question, kind, key, stamp in asked:
        if len(holders[key]) == 1:
            unique.setdefault(question, (kind, stamp))
    pool = sorted(unique.items())
    r.shuffle(pool)
    questions = [Question(q, stamp, kind) for q, (kind, stamp) in pool[:N_QUESTIONS]]
    out = Friends(entries, questions)
    for q in questions:
        out.kinds[q.kind] = out.kinds.get(q.kind, 0) + 1
    return out


def main() -> None:
    import recall_table

    part = sys.argv[1] if len(sys.argv) > 1 else "all"
    friends = build()
    sizes = sorted(len(e.encode()) for e in friends.entries)
    print(
        f"Friends: {len(friends.entries)} sessions ({sizes[0]}-{sizes[-1]} bytes, median "
        f"{sizes[len(sizes) // 2]}), {len(friends.questions)} questions ({part}): "
        + ", ".join(f"{k} {v}" for k, v in sorted(friends.kinds.items()))
    )
    for q in friends.questions[:6]:
        print(f"  e.g. {q.text!r} ({q.kind}) -> entry of {q.target}")
    with tempfile.TemporaryDirectory(prefix="lightgrep-friends-") as tmp:
        recall_table.report_kinds(
            "friends", friends.entries, friends.questions, NOW, Path(tmp), part
        )


if __name__ == "__main__":
    main()
