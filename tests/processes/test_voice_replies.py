"""Voice replies as people hear them, with `lightgrep run` as a real process: the real
python-telegram-bot and discord.py against the fake Telegram and Discord, the real openai client
against the fake model (chat, transcription) and the fake speech endpoint (/v1/audio/speech).

A voice message is answered with the text and then a voice (Telegram: sendVoice with OGG/Opus;
Discord: an audio file); Markdown, code and links are not read aloud; /voice off|auto|always is
the person's and kept; a long answer is spoken up to [voice] max_chars; a failing speech server
leaves the text answer whole and the person is told once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memory.keys import encode_key
from tests.rigs.cli import STEP_TIMEOUT, read_until, start_run, stopped, write_config
from tests.rigs.conversation import last_said
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import FakeOpenAI, Status, completion, is_consolidation
from tests.rigs.fakes.speech_server import FakeSpeech, is_ogg_opus
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram, Sent
from tests.rigs.media import ogg

ANA = 42
GROUP = -100777
MARKDOWN_ANSWER = (
    "**Sunny** all day. See [the forecast](https://weather.example/lyon) or run `forecast`:\n"
    "```python\nprint(forecast('Lyon'))\n```\n"
    "Details: https://weather.example/lyon/today\n\nEnjoy the sun!"
)
LONG_ANSWER = " ".join(f"Sentence number {n} is about the weather in Lyon." for n in range(12))
NOT_SPOKEN = ("**", "```", "print(", "https://", "weather.example", "`", "[", "](")
FAILED = "couldn't read this answer aloud"


def model(request: dict[str, Any]) -> Any:
    if is_consolidation(request):
        return completion("nothing to keep")
    said = last_said(request)
    if "this is what was said" in said or "weather" in said:
        return completion(MARKDOWN_ANSWER)
    if "tell me more" in said:
        return completion(LONG_ANSWER)
    return completion(f"(answer to: {said.rsplit(chr(10), 1)[-1]})")


@pytest.fixture
async def speech() -> AsyncIterator[FakeSpeech]:
    server = await FakeSpeech().start()
    yield server
    await server.stop()


def voice_settings(speech: FakeSpeech) -> str:
    """[llm] max_retries = 0 continues the [llm] table write_config ends with."""
    return (
        "max_retries = 0\n"
        "[transcription]\nenabled = true\n"
        f'[voice]\nenabled = true\nbase_url = "{speech.base_url}"\nvoice = "nova"\n'
        "max_chars = 200\ntimeout_s = 10\n"
    )


async def test_voice_replies_on_telegram_as_a_process(
    fake_llm: FakeOpenAI,
    fake_telegram: FakeTelegram,
    speech: FakeSpeech,
    tmp_path: Path,
    child_env: dict[str, str],
) -> None:
    tg = fake_telegram
    fake_llm.default = model
    config = write_config(
        tmp_path,
        fake_llm,
        voice_settings(speech)
        + f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
        f'api_base = "{tg.api_base}"\npoll_timeout_s = 1\n',
    )
    proc = await start_run(config, child_env)

    async def answer(count: int) -> Sent:
        await tg.wait_until(lambda: len(tg.sent_to(ANA)) >= count, STEP_TIMEOUT)
        return tg.sent_to(ANA)[count - 1]

    async def voices(count: int) -> None:
        await tg.wait_until(lambda: len(tg.voices) >= count, STEP_TIMEOUT)

    try:
        assert proc.stderr is not None
        await read_until(proc.stderr, "telegram is ready")
        # "auto" (the bot's setting): a voice message gets the text, then a voice.
        tg.voice(ANA, ogg(1), duration=3)
        text = await answer(1)
        await voices(1)
        assert "print(forecast('Lyon'))" in text.text and "Enjoy the sun!" in text.text
        [voice] = tg.voices
        assert voice.chat_id == ANA and voice.filename == "answer.ogg"
        assert is_ogg_opus(voice.data)
        methods = [name for name, _ in tg.calls]
        assert methods.index("sendVoice") > max(
            i for i, name in enumerate(methods) if name == "sendMessage"
        ), "the voice follows the text"
        [asked] = speech.requests
        assert asked["response_format"] == "opus" and asked["voice"] == "nova"
        spoken = asked["input"]
        assert "Sunny all day. See the forecast or run forecast:" in spoken
        assert "Enjoy the sun!" in spoken
        assert not [mark for mark in NOT_SPOKEN if mark in spoken], spoken

        # A typed message in "auto": text only.
        tg.dm(ANA, "hello there")
        assert (await answer(2)).text == "(answer to: hello there)"
        # /voice always: every answer, and a long one is spoken up to max_chars.
        tg.dm(ANA, "/voice always")
        assert "Voice: always (your choice)" in (await answer(3)).text
        tg.dm(ANA, "tell me more")
        long_text = await answer(4)
        await voices(2)
        assert long_text.text == LONG_ANSWER  # the whole answer stays text
        spoken = speech.requests[-1]["input"]
        assert len(spoken) <= 200 and spoken.endswith(" The rest is in the text.")
        assert spoken.startswith("Sentence number 0 is about the weather in Lyon.")
        assert len(speech.requests) == 2  # "hello there" was not spoken
        # In a group's forum topic, the voice follows the text into the topic.
        tg.group(GROUP, ANA, "@lightgrep_bot the weather here?", topic=7)
        await tg.wait_until(lambda: len(tg.voices) >= 3, STEP_TIMEOUT)
        [in_topic] = tg.sent_to(GROUP)
        assert in_topic.params.get("message_thread_id") == "7"
        assert tg.voices[2].chat_id == GROUP
        assert tg.voices[2].params.get("message_thread_id") == "7"

        # The speech server fails: the text answer is whole, the person told once.
        speech.queue(Status(500, {"error": {"message": "overloaded"}}))
        tg.dm(ANA, "first while it is down")
        failed = await answer(5)
        assert failed.text.startswith("(answer to: first while it is down)")
        assert FAILED in failed.text
        speech.queue(Status(503, {"error": {"message": "still overloaded"}}))
        tg.dm(ANA, "second while it is down")
        assert (await answer(6)).text == "(answer to: second while it is down)"  # not again
        tg.dm(ANA, "it works again")
        await voices(4)
        assert (await answer(7)).text == "(answer to: it works again)"

        # A person who takes no voice messages (a Telegram privacy setting) gets a file.
        tg.fail_next("sendVoice", 400, "Bad Request: VOICE_MESSAGES_FORBIDDEN")
        tg.dm(ANA, "no voice messages for me")
        await tg.wait_until(lambda: len(tg.documents) == 1, STEP_TIMEOUT)
        assert tg.documents[0].filename == "answer.ogg" and is_ogg_opus(tg.documents[0].data)
        assert (await answer(8)).text == "(answer to: no voice messages for me)"

        # /voice off: not even a voice message is answered with a voice.
        tg.dm(ANA, "/voice off")
        assert "Voice: off (your choice)" in (await answer(9)).text
        requests = len(speech.requests)
        tg.voice(ANA, ogg(2), duration=2)
        assert "Enjoy the sun!" in (await answer(10)).text
        assert len(speech.requests) == requests and len(tg.voices) == 4
    finally:
        await stopped(proc)
    home = tmp_path / "workspaces" / encode_key(f"telegram-{ANA}")
    assert json.loads((home / "preferences.json").read_text())["voice"] == "off"
    spoken_lines = (home / "speech.jsonl").read_text().splitlines()
    assert len(spoken_lines) == 5  # what was read aloud is counted, per answer


DM = 600
MIA = user_payload(79, "mia")


async def test_voice_replies_on_discord_as_a_process(
    fake_llm: FakeOpenAI, speech: FakeSpeech, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.default = model
    fake = await FakeDiscord().start()
    config = write_config(
        tmp_path,
        fake_llm,
        voice_settings(speech)
        + f'[discord]\nenabled = true\ntoken = "{fake.token}"\nallow_from = ["*"]\n'
        f'api_base = "{fake.api_base}"\ngateway_url = "{fake.gateway_url}"\n'
        "message_content_intent = true\n",
    )
    proc = await start_run(config, child_env)

    async def voice_message() -> None:
        audio = fake.attachment(ogg(3), "voice-message.ogg", "audio/ogg", channel_id=DM,
                                voice_seconds=2.0)  # fmt: skip
        await fake.dispatch(
            "MESSAGE_CREATE", fake.message(MIA, "", channel_id=DM, attachments=[audio])
        )

    try:
        assert proc.stderr is not None
        await read_until(proc.stderr, "discord is ready")
        await voice_message()
        await fake.wait_until(lambda: fake.uploads(), STEP_TIMEOUT)
        [upload] = fake.uploads()
        assert list(upload.files) == ["answer.ogg"] and is_ogg_opus(upload.files["answer.ogg"])
        assert any("Enjoy the sun!" in seen for seen in fake.seen_in(DM))
        assert "https://" not in speech.requests[0]["input"]

        # The speech endpoint fails: the text is answered whole, and said to be text only.
        speech.queue(Status(500, {"error": {"message": "overloaded"}}))
        await voice_message()
        await fake.wait_until(lambda: any(FAILED in seen for seen in fake.seen_in(DM)),
                              STEP_TIMEOUT)  # fmt: skip
        [told] = [seen for seen in fake.seen_in(DM) if FAILED in seen]
        assert "print(forecast('Lyon'))" in told and "Enjoy the sun!" in told
        assert len(fake.uploads()) == 1
    finally:
        await stopped(proc)
        await fake.stop()
