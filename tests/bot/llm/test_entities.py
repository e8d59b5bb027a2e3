"""Quote marks written as HTML entities (bot/llm/entities.py), piece by piece as a stream gives
them: what is shown is what the whole answer unescapes to, whatever the cuts."""

from __future__ import annotations

from bot.llm.entities import Unescaping, unescaped, writes_entities

ANSWERS = [
    "My sister&#39;s name is Ingrid; she said &quot;hi&quot; &#34;twice&#34; &#x27;x&#x27;.",
    "AT&T & Co. &amp; &lt;b&gt; stay as written, and so does a lone & at the end &",
    "An escape at the very end&#39;",
    "Copied from its own answer: they&amp;#39;re &amp;amp;#34;here&amp;amp;#34; &amp;amp;",
]


async def test_every_cut_of_a_stream_shows_what_the_whole_answer_unescapes_to() -> None:
    for answer in ANSWERS:
        whole = unescaped(answer)
        for cut in range(1, len(answer)):
            for size in (1, 2, 3, 5):
                shown: list[str] = []

                async def show(piece: str, shown: list[str] = shown) -> None:
                    shown.append(piece)

                stream = Unescaping(show)
                pieces = [answer[:cut]] + [
                    answer[i : i + size] for i in range(cut, len(answer), size)
                ]
                for piece in pieces:
                    await stream(piece)
                await stream.flush()
                assert "".join(shown) == whole, (answer, cut, size)
    assert unescaped(ANSWERS[0]) == "My sister's name is Ingrid; she said \"hi\" \"twice\" 'x'."
    assert unescaped(ANSWERS[1]) == ANSWERS[1]
    assert unescaped(ANSWERS[3]).endswith("they're \"here\" &amp;amp;")


def test_a_person_who_writes_an_entity_gets_answers_as_written() -> None:
    assert writes_entities([{"role": "user", "content": "what is &#39; in HTML?"}])
    assert writes_entities([{"role": "user", "content": [{"type": "text", "text": "&amp;?"}]}])
    assert not writes_entities([{"role": "user", "content": "AT&T and R&D"}])
    assert not writes_entities([{"role": "assistant", "content": "&#39;"}])
