"""What a history entry must keep of what the person said (checks.said_names / keeps_said)."""

from __future__ import annotations

from memory.consolidation.checks import keeps_said, said_names

CHUNK = [
    "My sister Ingrid moved to Rotterdam in 2019.",
    "Big news: I started ceramics with Mrs. Okafor on Sunday, 2 hours a week!",
]


def test_names_places_numbers_and_rare_words_said() -> None:
    said = said_names(CHUNK)
    assert said.names == ["Ingrid", "Rotterdam", "2019", "Okafor"]  # not Sunday, not 2, not Big
    assert said.rare == ["ceramics"]


def test_an_entry_keeping_any_of_them_in_any_form_passes() -> None:
    said = said_names(CHUNK)
    for entry in (
        "Talked about Ingrid.",
        "Ingrid's move.",
        "Moved there in 2019.",
        "The user took up ceramic classes.",  # a rare word, another form
    ):
        assert keeps_said(entry, said) is None, entry
    assert keeps_said("Aged fifty-five.", said_names(["I turned 55 in Lisbon"])) is None


def test_an_entry_keeping_none_is_refused_saying_what_it_lost() -> None:
    problem = keeps_said("The user chatted with the assistant.", said_names(CHUNK))
    assert problem == (
        "the history entry keeps none of the names, places or numbers said "
        "(Ingrid, Rotterdam, 2019, Okafor)"
    )


def test_without_a_name_place_or_number_nothing_is_asked() -> None:
    for chunk in (["I am building a boat"], ["hello, how are you?"], ["See you on Sunday!"]):
        said = said_names(chunk)
        assert keeps_said("The user chatted.", said) is None, chunk
