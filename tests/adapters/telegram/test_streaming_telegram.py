"""Answers shown on Telegram as they are written: real python-telegram-bot against the fake Bot
API, the real Agent streaming from the fake OpenAI server (server-sent events over a socket).

What a person notices: the answer appears early and grows (drafts in a private chat, a message
edited in groups, never faster than about once a second per chat), and in the end the chat holds
the model's whole answer exactly once, within Telegram's limits, in markup Telegram accepts."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from pathlib import Path

from adapters.intake.texts import FAILED
from bot.agent.turn import LLM_CUT_REPLY
from bot.config import AgentConfig
from tests.rigs.fakes.openai_server import FakeOpenAI, Streamed, pieces_of, tool_call
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.telegram import GROUP, make_config, running, session_lines

ANSWER = (
    "Here is **what I found** about <tags> & such:\n\n"
    "- first, a `code span`\n- second, an *unfinished* thought\n\n"
    "```python\nprint('a < b')\n```\n\nThat is all."
)


def slow(text: str, every_s: float = 0.05, **options: object) -> Streamed:
    """The model writing `text` at 1/every_s pieces per second (0.05: 20 tokens/s)."""
    return Streamed(pieces_of(text), every_s=every_s, **options)  # type: ignore[arg-type]


async def test_a_private_answer_grows_as_a_draft_then_is_sent_once(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    # 27 pieces 0.1 s apart: 2.7 s of writing. At 0.05 s (1.3 s) the third draft, due 1.0 s
    # after the first plus two calls to the fake, and the first draft's 1.0 s lead over the
    # end were left 0.3 s, which a loaded machine's stalls can take.
    fake_llm.queue(slow(ANSWER, every_s=0.1))
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.dm(42, "tell me")
        await tg.wait_sent(42, 1, wait_s=15)
    assert fake_llm.streamed == 1
    sent = tg.sent_to(42)
    assert len(sent) == 1 and sent[0].parse_mode == "HTML"
    assert tg.seen_in(42) == _visible(ANSWER)
    drafts = [d for d in tg.drafts if d.chat_id == 42]
    assert len(drafts) >= 3, "the answer should have grown in several drafts"
    assert drafts[0].at < sent[0].at - 1.0, "the first words should show well before the end"
    assert all(_visible(ANSWER).startswith(d.text[:10]) for d in drafts)
    assert not tg.refused and not tg.edits


async def test_a_group_answer_is_sent_then_edited_at_most_once_a_second(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    fake_llm.queue(slow(ANSWER, every_s=0.08))
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        asked = tg.group(GROUP, 7, "@lightgrep_bot tell me")
        await tg.wait_until(lambda: bool(tg.sent_to(GROUP)), 10)
        await _until_answered(tg, GROUP, ANSWER)
    sent = tg.sent_to(GROUP)
    assert len(sent) == 1
    assert json.loads(sent[0].params["reply_parameters"])["message_id"] == asked
    assert len(tg.edits) >= 2, "the message should have grown by edits"
    assert not tg.too_fast, f"edits came faster than once a second: {tg.too_fast}"
    assert not tg.refused and not tg.drafts
    times = [e.at for e in tg.edits]
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(times))


async def test_a_ten_thousand_character_answer_goes_on_in_new_messages(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    paragraphs = [f"Paragraph {n}: " + "word " * 90 for n in range(1, 24)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    assert len(text) > 10_000
    fake_llm.queue(Streamed(pieces_of(text), every_s=0.001), Streamed(pieces_of(text)))
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.group(GROUP, 7, "@lightgrep_bot a long one")
        await _until_answered(tg, GROUP, text, wait_s=30)
        tg.dm(8, "a long one")
        await _until_answered(tg, 8, text, wait_s=30)
    for chat in (GROUP, 8):
        sent = tg.sent_to(chat)
        assert len(sent) == 3, [len(s.text) for s in sent]
        assert all(len(s.text) <= 4096 for s in sent)
        assert "".join(s.text for s in sent) == text, "every character once, in order"
    assert not tg.too_fast and not tg.refused


async def test_text_before_a_tool_call_stays_and_the_answer_follows(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    look = tool_call("read_memory", {}, "call_9")
    fake_llm.queue(
        Streamed(pieces_of("Let me look that up."), [look], every_s=0.02),
        slow("You told me you like **tea**.", every_s=0.02),
    )
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.dm(42, "what do I like?")
        await _until_answered(tg, 42, "Let me look that up.\n\nYou told me you like **tea**.")
    assert len(tg.sent_to(42)) == 1
    second = fake_llm.chat_requests[1]["messages"]
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_9"
    lines = session_lines(workspaces_dir, "telegram-42", "telegram:dm:42")
    lines = [m for m in lines if "role" in m]  # the messages (not where the answer went)
    assert [m["role"] for m in lines][-3:] == ["assistant", "tool", "assistant"]
    assert lines[-1]["content"] == "You told me you like **tea**."


async def test_a_stream_cut_mid_answer_keeps_the_message_and_says_so(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    fake_llm.queue(slow("One two three four five six seven eight", every_s=0.1, cut_after=4))
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.group(GROUP, 7, "@lightgrep_bot count for me")
        await _until_answered(tg, GROUP, "One two three four\n\n" + LLM_CUT_REPLY)
        fake_llm.queue(slow("Five six.", every_s=0.01))
        tg.group(GROUP, 7, "@lightgrep_bot go on")
        await tg.wait_until(lambda: len(tg.sent_to(GROUP)) == 2, 10)
        await _until_answered(tg, GROUP, "One two three four\n\n" + LLM_CUT_REPLY, index=0)
    lines = session_lines(workspaces_dir, "telegram-7", f"telegram:group:{GROUP}:7")
    users = [m["content"] for m in lines if m.get("role") == "user"]
    assert [u.rpartition("\n")[2] for u in users] == ["count for me", "go on"]
    assert all(FAILED not in s.text for s in tg.sent_to(GROUP))


async def test_where_drafts_fail_the_answer_is_edited_instead(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    tg.drafts_supported = False  # an older Bot API server
    fake_llm.queue(slow(ANSWER, every_s=0.06))
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.dm(42, "tell me")
        await _until_answered(tg, 42, ANSWER)
    assert len(tg.sent_to(42)) == 1 and tg.edits and not tg.drafts and not tg.too_fast
    assert tg.refused == [("sendMessageDraft", "Not Found")], "tried once, then edits"


async def test_not_modified_and_flood_limits_on_edits_are_no_failure(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    tg.fail_next(
        "editMessageText",
        400,
        "Bad Request: message is not modified: specified new message content and reply markup "
        "are exactly the same as a current content and reply markup of the message",
    )
    tg.fail_next("editMessageText", 429, "Too Many Requests: retry after 1", retry_after=1)
    fake_llm.queue(slow(ANSWER, every_s=0.1))
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.group(GROUP, 7, "@lightgrep_bot tell me")
        await _until_answered(tg, GROUP, ANSWER, wait_s=15)
    assert len(tg.sent_to(GROUP)) == 1
    assert all(FAILED not in s.text for s in tg.sent_to(GROUP))


async def test_two_people_answered_at_once_in_one_group_share_its_pace(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    first, second = "Ana, " + ANSWER, "Ben, " + ANSWER.upper()

    def by_person(request: dict[str, object]) -> Streamed:
        text = str(request["messages"][-1]["content"])  # type: ignore[index]
        return slow(first if "Ana" in text else second, every_s=0.06)

    fake_llm.default = by_person
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        ana = tg.group(GROUP, 7, "@lightgrep_bot I am Ana")
        ben = tg.group(GROUP, 8, "@lightgrep_bot I am Ben")
        wanted = sorted([_visible(first), _visible(second)])
        await tg.wait_until(lambda: sorted(s.text for s in tg.sent_to(GROUP)) == wanted, 20)
    replies = {
        json.loads(s.params["reply_parameters"])["message_id"]: s.text for s in tg.sent_to(GROUP)
    }
    assert replies == {ana: _visible(first), ben: _visible(second)}
    assert not tg.too_fast and not tg.refused


async def test_stream_false_sends_the_whole_answer_at_once(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    config = make_config(tg, fake_llm, workspaces_dir)
    config = dataclasses.replace(config, agent=AgentConfig(stream=False))
    fake_llm.queue(slow(ANSWER, every_s=0.01), slow(ANSWER, every_s=0.01))
    async with running(config):
        tg.dm(42, "tell me")
        tg.group(GROUP, 7, "@lightgrep_bot tell me")
        await tg.wait_sent(42, 1, wait_s=10)
        await tg.wait_sent(GROUP, 1, wait_s=10)
    assert fake_llm.streamed == 0
    assert tg.seen_in(42) == _visible(ANSWER) == tg.seen_in(GROUP)
    assert not tg.drafts and not tg.edits


# ---- helpers ---------------------------------------------------------------------------------


def _visible(markdown: str) -> str:
    """What Telegram shows for the answer (its HTML rendering, read back)."""
    from adapters.telegram.markup import markdown_to_html
    from tests.rigs.fakes.telegram_server import visible_text

    return visible_text(markdown_to_html(markdown))


async def _until_answered(
    tg: FakeTelegram, chat: int, markdown: str, *, wait_s: float = 10, index: int | None = None
) -> None:
    """Until the chat shows `markdown` (rendered): the whole chat, or its message `index`."""

    def done() -> bool:
        if index is not None:
            sent = tg.sent_to(chat)
            return len(sent) > index and sent[index].text == _visible(markdown)
        return tg.seen_in(chat) == _visible(markdown) or _joined(tg, chat) == markdown

    try:
        await tg.wait_until(done, wait_s)
    except TimeoutError:
        raise AssertionError(f"the chat shows {tg.seen_in(chat)!r}") from None
    await asyncio.sleep(0)


def _joined(tg: FakeTelegram, chat: int) -> str:
    return "".join(s.text for s in tg.sent_to(chat))


async def test_quote_marks_a_model_wrote_as_entities_show_as_quote_marks(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Both small models behind llama-cpp-python's chatml-function-calling (whose template
    escapes the prompt) wrote "My sister&#39;s name": shown as it is meant, in every draft too,
    an escape split between two pieces included; saved so. A person who writes an entity
    themselves gets the answer as written."""
    tg = fake_telegram
    pieces = ["My sister", "&#3", "9;s name is ", "Ingrid. She said &quot;hi", "&quot;."]
    fake_llm.queue(Streamed(pieces, every_s=0.3))
    fake_llm.queue(Streamed(["Write &#39; for an apostrophe."]))
    meant = "My sister's name is Ingrid. She said \"hi\"."
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.dm(42, "who is my sister?")
        await _until_answered(tg, 42, meant)
        tg.dm(43, "what is &#39; in HTML?")
        await _until_answered(tg, 43, "Write &#39; for an apostrophe.")
    assert [d.text for d in tg.drafts if d.chat_id == 42 and "&" in d.text] == []
    assert any(d.text.startswith("My sister's") for d in tg.drafts if d.chat_id == 42)
    saved = session_lines(workspaces_dir, "telegram-42", "telegram:dm:42")
    assert [line["content"] for line in saved if line.get("role") == "assistant"] == [meant]
