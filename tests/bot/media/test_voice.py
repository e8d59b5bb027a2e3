"""Voice replies in the core: what of an answer is read aloud, the person's mode, the daily
allowance of characters, and a speech server that is slow, refuses, or sends the wrong format.
The real Speaker (openai SDK) against the fake speech endpoint; real workspace files."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.agent.agent import Agent
from bot.config import Config, LLMConfig, MemoryConfig, VoiceConfig
from bot.inbound import Attachment, Inbound
from bot.media.speech import Speaker
from bot.media.voice import FAILED, REST_IN_TEXT, VoiceReplies, speakable, spoken_part
from bot.outbound import BufferedOutbound, Reply
from memory import clock
from memory.control.link import merge
from memory.links import LinkTable
from memory.preferences import VOICE
from memory.usage import COMPACT_AFTER_LINES, SPEECH_FILE, SpeechLog
from memory.workspace import Workspaces
from tests.rigs.fakes.openai_server import Delay, Status
from tests.rigs.fakes.speech_server import FakeSpeech, is_ogg_opus

USER = "telegram-42"


def test_markdown_code_and_links_are_not_read_aloud() -> None:
    answer = (
        "# Plan for **Lyon**\n\n> Bring a coat.\n- walk by the *river*\n- eat at __Paul's__\n\n"
        "| Day | Weather |\n|-----|:-------:|\n| Monday | rain |\n\n"
        "![the old town](https://img.example/a.png) Book at [the site](https://book.example) "
        "or <https://other.example/x>, or www.third.example/page today.\n"
        "```python\nbook(city='Lyon')\n```\nRun `book` again tomorrow. 2*3*4 = 24, snake_case."
    )
    assert speakable(answer) == (
        "Plan for Lyon\n\nBring a coat.\nwalk by the river\neat at Paul's\n\n"
        "Day, Weather\n\nMonday, rain\n\n"
        "the old town Book at the site or, or today.\n\n"
        "Run book again tomorrow. 2*3*4 = 24, snake_case."
    )


def test_an_unclosed_code_block_is_not_read_either() -> None:
    assert speakable("Here it is:\n```\nwhile True:\n    pass") == "Here it is:"


def test_a_long_answer_is_spoken_to_a_sentence_end_within_the_cap() -> None:
    text = " ".join(f"Sentence {n} is here." for n in range(40))
    spoken = spoken_part(text, 120)
    assert len(spoken) <= 120 and spoken.endswith("is here." + REST_IN_TEXT)
    assert text.startswith(spoken.removesuffix(REST_IN_TEXT))
    assert spoken_part("Short.", 120) == "Short."
    unbroken = spoken_part("x" * 500, 120)
    assert len(unbroken) <= 120 and unbroken.endswith("…" + REST_IN_TEXT)


def test_speech_counts_survive_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / SPEECH_FILE
    log = SpeechLog(path)
    log.record(100)
    with path.open("ab") as file:
        file.write(b'{"at": "2026-')  # a crash mid-append
    again = SpeechLog(path)
    today = clock.now().date()
    assert again.day(today) == 100
    again.record(50)
    assert SpeechLog(path).day(today) == 150
    assert path.read_bytes().endswith(b', "chars": 50}\n')


def test_the_speech_count_stays_small_however_long_one_talks(tmp_path: Path) -> None:
    """Folded into a line per day from the previous month on, as usage.jsonl is: a person who
    has been read aloud to for years costs a small file and a quick first read."""
    path = tmp_path / SPEECH_FILE
    log = SpeechLog(path)
    start = datetime(2024, 1, 1, 9, tzinfo=UTC)
    for number in range(COMPACT_AFTER_LINES + 10):  # ~14 years of a voice reply a day
        log.record(100, when=start + timedelta(days=number))
    now = start + timedelta(days=COMPACT_AFTER_LINES + 9)
    assert len(path.read_bytes().splitlines()) < 80
    again = SpeechLog(path)
    assert again.day(now.date()) == 100
    assert again.day((now - timedelta(days=20)).date()) == 100


@pytest.fixture
async def speech() -> AsyncIterator[FakeSpeech]:
    server = await FakeSpeech().start()
    made.clear()
    yield server
    for replies in made:
        await replies.aclose()
    await server.stop()


made: list[VoiceReplies] = []  # closed after each test (their clients' connections)


def voices(
    speech: FakeSpeech, tmp_path: Path, *, admins: tuple[str, ...] = (), **settings: object
) -> VoiceReplies:
    config = VoiceConfig(enabled=True, base_url=speech.base_url, **settings)  # type: ignore[arg-type]
    speaker = Speaker(
        model=config.model,
        voice=config.voice,
        base_url=speech.base_url,
        api_key="sk-test",
        timeout_s=config.timeout_s,
        max_retries=0,
    )
    replies = VoiceReplies(config, speaker, Workspaces(tmp_path), lambda key: key in admins)
    made.append(replies)
    return replies


def message(voice: bool = False, user: str = USER) -> Inbound:
    audio = Attachment("audio", "audio/ogg", "voice.ogg", 10, b"OggS", voice=voice)
    return Inbound("telegram", "telegram:dm:42", user, "", attachments=(audio,))


async def answered(replies: VoiceReplies, inbound: Inbound, said: str) -> Reply:
    out = BufferedOutbound()
    await out.begin()
    await out.add_text(said)
    await replies.follow(inbound, said, out)
    await out.finish()
    return out.reply


async def test_auto_speaks_to_a_voice_message_only(speech: FakeSpeech, tmp_path: Path) -> None:
    replies = voices(speech, tmp_path)
    typed = Inbound("telegram", "telegram:dm:42", USER, "hello")
    assert (await answered(replies, typed, "Hi!")).files == ()
    reply = await answered(replies, message(voice=True), "Hi **there**!")
    [audio] = reply.files
    assert audio.voice and audio.mime == "audio/ogg" and is_ogg_opus(audio.read())
    assert reply.text == "Hi **there**!"
    assert speech.inputs == ["Hi there!"]
    # An audio file is not a voice message.
    assert (await answered(replies, message(voice=False), "Heard it.")).files == ()


async def test_modes_are_the_persons_and_default_to_the_setting(
    speech: FakeSpeech, tmp_path: Path
) -> None:
    replies = voices(speech, tmp_path, mode="off")
    assert (await answered(replies, message(voice=True), "Hi.")).files == ()
    Workspaces(tmp_path).get(USER).preferences.set(VOICE, "always")
    replies = voices(speech, tmp_path, mode="off")
    typed = Inbound("telegram", "telegram:dm:42", USER, "hello")
    assert len((await answered(replies, typed, "Hi.")).files) == 1


async def test_the_daily_allowance_is_told_once_and_admins_have_none(
    speech: FakeSpeech, tmp_path: Path
) -> None:
    replies = voices(speech, tmp_path, chars_per_day=30, admins=("telegram-1",))
    first = await answered(replies, message(voice=True), "Twenty characters ok")
    assert len(first.files) == 1
    over = await answered(replies, message(voice=True), "Twenty more of them.")
    assert over.files == () and "30 characters read aloud today" in over.text
    again = await answered(replies, message(voice=True), "Still more words.")
    assert again.files == () and again.text == "Still more words."  # told once
    admin = await answered(replies, message(voice=True, user="telegram-1"), "Twenty more of them.")
    assert len(admin.files) == 1
    assert len(speech.requests) == 2


@pytest.mark.parametrize("trouble", ["refused", "slow", "not ogg", "down"])
async def test_a_failing_speech_server_leaves_the_text_and_tells_once(
    speech: FakeSpeech, tmp_path: Path, trouble: str
) -> None:
    item = {
        "refused": Status(500, {"error": {"message": "overloaded"}}),
        "slow": Delay(5.0, None),
        "not ogg": b"ID3\x04 an mp3 instead",
        "down": "down",
    }[trouble]
    speech.queue(item, item)
    replies = voices(speech, tmp_path, mode="always", timeout_s=0.5)
    typed = Inbound("telegram", "telegram:dm:42", USER, "hello")
    started = time.monotonic()
    first = await answered(replies, typed, "The answer.")
    assert time.monotonic() - started < 3.0  # the text waits [voice] timeout_s, not the server
    assert first.files == () and first.text == "The answer.\n\n" + FAILED
    second = await answered(replies, typed, "Another answer.")
    assert second.files == () and second.text == "Another answer."
    third = await answered(replies, typed, "It works again.")
    assert len(third.files) == 1 and third.text == "It works again."
    # Failing again after a success: told again.
    speech.queue(item)
    assert FAILED in (await answered(replies, typed, "Down again.")).text


def test_the_choice_and_the_count_follow_a_link(tmp_path: Path) -> None:
    """/link: the joining account's /voice choice and what it had read aloud today move into
    the shared memory (kept where the other made no choice; counts added)."""
    workspaces = Workspaces(tmp_path)
    joining, staying = workspaces.get("discord-7"), workspaces.get(USER)
    joining.preferences.set(VOICE, "always")
    SpeechLog(joining.root / SPEECH_FILE).record(300)
    SpeechLog(staying.root / SPEECH_FILE).record(200)
    merge(workspaces, LinkTable(tmp_path), "discord-7", USER)
    shared = Workspaces(tmp_path).get(USER)
    assert shared.preferences.get(VOICE) == "always"
    assert SpeechLog(shared.root / SPEECH_FILE).day(clock.now().date()) == 500


async def test_voice_says_so_where_the_operator_set_up_none(tmp_path: Path) -> None:
    config = Config(
        llm=LLMConfig(base_url="http://127.0.0.1:9/v1", model="m"),
        memory=MemoryConfig(workspaces_dir=tmp_path),
    )
    agent = Agent(config)
    try:
        out = BufferedOutbound()
        await agent.handle(Inbound("telegram", "telegram:dm:42", USER, "/voice always"), out)
    finally:
        await agent.aclose()
    assert "its operator has not set up a voice" in out.reply.text
    assert Workspaces(tmp_path).get(USER).preferences.get(VOICE) is None  # nothing kept


async def test_voice_without_a_word_shows_the_mode_and_the_day(
    speech: FakeSpeech, tmp_path: Path
) -> None:
    config = Config(
        llm=LLMConfig(base_url="http://127.0.0.1:9/v1", model="m"),
        memory=MemoryConfig(workspaces_dir=tmp_path),
        voice=VoiceConfig(enabled=True, base_url=speech.base_url, chars_per_day=5000),
    )
    agent = Agent(config)
    SpeechLog(Workspaces(tmp_path).get(USER).root / SPEECH_FILE).record(1234)
    try:
        said = []
        for text in ("/voice", "/voice loud", "/voice default", "/usage"):
            out = BufferedOutbound()
            await agent.handle(Inbound("telegram", "telegram:dm:42", USER, text), out)
            said.append(out.reply.text)
    finally:
        await agent.aclose()
    assert said[0].startswith("Voice: auto (the bot's setting)")
    assert "Read aloud today: 1,234 of your 5,000 characters" in said[0]
    assert said[1].startswith("I didn't understand that.")
    assert said[2].startswith("Voice: auto (the bot's setting)")
    assert "Read aloud today: 1,234 characters (/voice)." in said[3]
    assert "5,000 characters read aloud a day" in said[3]
