"""Pictures, voice messages and files on Telegram, end to end: real python-telegram-bot against
the fake Bot API (getFile, file downloads), the real Agent and openai client against the fake
OpenAI server (chat with image parts, /v1/audio/transcriptions), real files in the workspace."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram import TelegramConfig, create
from bot.agent.agent import Agent
from bot.config import Config, LLMConfig, MediaConfig, MemoryConfig, TranscriptionConfig
from memory.keys import encode_key
from tests.rigs.fakes.openai_server import BLIND_ANSWERS, FakeOpenAI, Status, completion, image_urls
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram, Sent
from tests.rigs.media import (
    jpeg,
    media_files,
    ogg,
    pdf,
    refs,
    session_file_text,
    sha,
    user_texts,
)


def config_for(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    workspaces: Path,
    *,
    vision: bool = True,
    transcription: bool = True,
    **llm_settings: Any,
) -> Config:
    return Config(
        llm=LLMConfig(
            base_url=llm.base_url,
            api_key="sk-test",
            model="fake-model",
            max_retries=0,
            vision=vision,
            **llm_settings,
        ),
        memory=MemoryConfig(workspaces_dir=workspaces),
        media=MediaConfig(),
        transcription=TranscriptionConfig(enabled=transcription, max_seconds=120),
        platforms={
            "telegram": TelegramConfig(
                enabled=True, token=TOKEN, allow_from=["*"], api_base=tg.api_base, poll_timeout_s=1
            )
        },
    )


@asynccontextmanager
async def serving(config: Config) -> AsyncIterator[Agent]:
    agent = Agent(config)
    adapter = create(config, agent)
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))
    try:
        await asyncio.wait_for(adapter.ready.wait(), 5)
        yield agent
    finally:
        stop.set()
        await asyncio.wait({task}, timeout=5)
        await agent.aclose()
        task.result()


def home(workspaces: Path, user: int) -> Path:
    return workspaces / encode_key(f"telegram-{user}")


def records(workspaces: Path, user: int) -> list[dict[str, Any]]:
    import json

    files = list((home(workspaces, user) / "sessions").glob("*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text("utf-8").splitlines()]


async def answer(tg: FakeTelegram, chat: int, count: int = 1) -> Sent:
    return (await tg.wait_sent(chat, count))[-1]


def answered_after(llm: FakeOpenAI, count: int) -> Callable[[], bool]:
    return lambda: len(llm.chat_requests) >= count


# ---- pictures ------------------------------------------------------------------------------


async def test_photo_reaches_the_model_as_an_image_part_and_is_stored_once(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    picture = jpeg(1)
    fake_llm.queue(completion("A red bicycle."), completion("Still the red bicycle."))
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.photo(42, picture, caption="what is this?")
        first = await answer(tg, 42)
        tg.photo(42, picture, caption="and again?")
        second = await answer(tg, 42, 2)

    assert first.text == "A red bicycle." and second.text == "Still the red bicycle."
    request = fake_llm.chat_requests[0]
    newest = request["messages"][-1]["content"]
    assert newest[0]["type"] == "text" and newest[0]["text"].endswith("what is this?")
    expected = "data:image/jpeg;base64," + base64.b64encode(picture).decode()
    assert image_urls(request) == [expected]
    # The largest of the three sizes Telegram offers was downloaded, through getFile.
    assert len(tg.downloads) == 2 and all(path.startswith("photos/") for path in tg.downloads)
    # Kept once by its hash, though sent twice; both requests of the second turn see it twice.
    assert [p.name for p in media_files(home(workspaces_dir, 42))] == [f"{sha(picture)}.jpg"]
    assert image_urls(fake_llm.chat_requests[1]) == [expected, expected]
    # The transcript holds references, never the bytes.
    saved = session_file_text(home(workspaces_dir, 42))
    assert "base64" not in saved and base64.b64encode(picture).decode()[:20] not in saved
    assert [r["sha256"] for r in refs(records(workspaces_dir, 42))] == [sha(picture)] * 2


async def test_only_the_newest_pictures_ride_along(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    config = config_for(tg, fake_llm, workspaces_dir, max_images_in_context=2)
    async with serving(config):
        for number in range(3):
            tg.photo(42, jpeg(number), caption=f"picture number {number}")
            await answer(tg, 42, number + 1)

    last = fake_llm.chat_requests[-1]
    urls = image_urls(last)
    assert len(urls) == 2
    assert urls[-1].endswith(base64.b64encode(jpeg(2)).decode())
    assert "[image: picture number 0]" in " ".join(user_texts(last))


async def test_without_vision_the_bot_says_it_cannot_see_pictures(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(completion("Happy birthday to your cat!"))
    async with serving(config_for(tg, fake_llm, workspaces_dir, vision=False)):
        tg.photo(42, jpeg(5), caption="my cat turns ten today")
        captioned = await answer(tg, 42)
        tg.photo(42, jpeg(6))
        alone = await answer(tg, 42, 2)

    assert captioned.text.startswith("Happy birthday to your cat!")
    assert "can't see pictures" in captioned.text
    [request] = fake_llm.chat_requests  # the picture without words was not sent to the model
    assert image_urls(request) == []
    assert isinstance(request["messages"][-1]["content"], str)  # a text-only model gets text
    assert "[image: my cat turns ten today]" in request["messages"][-1]["content"]
    assert "can't see pictures" in alone.text and "saved" in alone.text
    # Both pictures are kept, and both messages saved, with the answer given to the second.
    assert len(media_files(home(workspaces_dir, 42))) == 2
    messages = [r for r in records(workspaces_dir, 42) if "role" in r]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[-1]["content"] == alone.text


@pytest.mark.parametrize("server", sorted(BLIND_ANSWERS))
async def test_vision_on_with_a_model_that_cannot_see_answers_from_the_captions(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, server: str
) -> None:
    """[llm] vision = true, but the model cannot see: the provider refuses the request in its
    own words. The turn is asked again with its pictures as "[image: caption]" text and the
    person is told once; later pictures go as text at once, with the vision = false note."""
    fake_llm.blind = server
    fake_llm.queue(completion("What a nice red bicycle!"), completion("Blue suits it too."))
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.photo(42, jpeg(1), caption="my red bicycle")
        first = await answer(tg, 42)
        tg.photo(42, jpeg(2), caption="and my blue one")
        second = await answer(tg, 42, 2)

    assert first.text.startswith("What a nice red bicycle!")
    assert "not to take pictures" in first.text and "saved" in first.text
    assert second.text.startswith("Blue suits it too.")
    assert "not to take pictures" not in second.text
    assert "can't see pictures" in second.text
    assert fake_llm.refused_pictures == 1
    refused, retried, later = fake_llm.chat_requests
    assert image_urls(refused) and not image_urls(retried) and not image_urls(later)
    assert "[image: my red bicycle]" in retried["messages"][-1]["content"]
    assert "[image: and my blue one]" in later["messages"][-1]["content"]
    # Nothing lost: both pictures kept, each message saved once with its answer.
    assert len(media_files(home(workspaces_dir, 42))) == 2
    messages = [r for r in records(workspaces_dir, 42) if "role" in r]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]


async def test_an_oversized_file_is_refused_before_it_is_downloaded(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.photo(42, jpeg(1), size=25_000_000)  # Telegram reports the size of each photo size
        big_photo = await answer(tg, 42)
        tg.document(42, b"x" * 10, "notes.txt", "text/plain", size=300_000)
        big_text = await answer(tg, 42, 2)

    assert "25 MB" in big_photo.text and "10 MB" in big_photo.text  # [media] max_image_bytes
    assert "300 KB" in big_text.text and "100 KB" in big_text.text
    assert "didn't download" in big_photo.text
    assert tg.file_requests == [] and tg.downloads == []
    assert fake_llm.requests == []
    assert media_files(home(workspaces_dir, 42)) == []


@pytest.mark.parametrize("said", ["a size too small", "no size"])
async def test_a_file_larger_than_said_is_downloaded_only_up_to_the_limit(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, said: str
) -> None:
    """A document said to be 1 KB (or of no size) but served as 50 MB: the download stops at
    the limit for text files, and the person is told so; nothing is kept."""
    sized = said != "no size"
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.document(42, b"x" * 1000, "notes.txt", "text/plain", hidden=50_000_000, sized=sized)
        reply = await answer(tg, 42)

    [path] = tg.downloads
    assert tg.served[path] < 10_000_000  # of 50 MB: what the sockets held when the bot hung up
    assert reply.text == (
        "notes.txt is larger than 100 KB, the most I take for text files, so I stopped "
        "downloading it."
    )
    assert fake_llm.requests == []
    assert media_files(home(workspaces_dir, 42)) == []


# ---- files ---------------------------------------------------------------------------------


async def test_a_text_file_is_read_with_its_name(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(completion("Your list has three items."))
    notes = b"# Shopping\n- apples\n- flour\n- eggs\n"
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.document(42, notes, "shopping.md", None, caption="how many items?")
        reply = await answer(tg, 42)

    assert reply.text == "Your list has three items."
    text = fake_llm.chat_requests[0]["messages"][-1]["content"]
    assert isinstance(text, str)  # no picture: plain text, any model takes it
    assert "how many items?" in text and "[file: shopping.md]" in text and "- flour" in text
    assert [p.name for p in media_files(home(workspaces_dir, 42))] == [f"{sha(notes)}.md"]


async def test_a_pdf_is_read(tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    document = pdf("Invoice 2024-117: total 431.20 EUR", "Due by March 3")
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.document(42, document, "invoice.pdf", "application/pdf")
        await answer(tg, 42)

    text = fake_llm.chat_requests[0]["messages"][-1]["content"]
    assert "[file: invoice.pdf, PDF, 2 pages]" in text
    assert "total 431.20 EUR" in text and "Due by March 3" in text


async def test_a_damaged_pdf_gets_a_clear_answer(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.document(42, b"%PDF-1.4 this is not really a pdf", "broken.pdf", "application/pdf")
        reply = await answer(tg, 42)

    assert reply.text.startswith("I couldn't read broken.pdf:")
    assert fake_llm.requests == []


async def test_an_unsupported_file_gets_a_clear_answer_and_is_not_downloaded(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.document(42, b"PK\x03\x04 zipped", "photos.zip", "application/zip")
        reply = await answer(tg, 42)

    assert reply.text.startswith("I can't read photos.zip")
    for supported in ("pictures", "voice messages", "Markdown", "CSV", "JSON", "PDF"):
        assert supported in reply.text
    assert tg.file_requests == [] and fake_llm.requests == []
    assert not any((home(workspaces_dir, 42) / "sessions").glob("*.jsonl"))  # nothing to keep


# ---- voice messages and audio --------------------------------------------------------------


async def test_a_voice_message_is_transcribed_answered_and_kept(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.transcripts.append("remind me to water the plants on Sunday")
    fake_llm.queue(completion("I'll keep that in mind: plants on Sunday."))
    audio = ogg(1)
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.voice(42, audio, duration=4)
        reply = await answer(tg, 42)

    assert reply.text == "I'll keep that in mind: plants on Sunday."
    [upload] = fake_llm.transcriptions
    assert upload.data == audio and upload.model == "whisper-1"
    assert upload.filename.endswith(".ogg")
    said = fake_llm.chat_requests[0]["messages"][-1]["content"]
    assert "[voice message, 4 s] remind me to water the plants on Sunday" in said
    user = next(r for r in records(workspaces_dir, 42) if r.get("role") == "user")
    assert "water the plants" in user["content"][0]["text"]
    assert [p.name for p in media_files(home(workspaces_dir, 42))] == [f"{sha(audio)}.ogg"]


@pytest.mark.parametrize("trouble", ["not set up", "fails", "too long"])
async def test_a_voice_message_that_cannot_be_transcribed_is_kept_and_explained(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, trouble: str
) -> None:
    config = config_for(tg, fake_llm, workspaces_dir, transcription=trouble != "not set up")
    if trouble == "fails":
        fake_llm.transcripts.append(Status(500, {"error": {"message": "model overloaded"}}))
    audio = ogg(2)
    async with serving(config):
        tg.voice(42, audio, duration=600 if trouble == "too long" else 5)
        reply = await answer(tg, 42)

    expected = {
        "not set up": "transcription is not set up",
        "fails": "couldn't transcribe your voice message",
        "too long": "10:00 min long; I can transcribe up to 2:00 min",
    }[trouble]
    assert expected in reply.text and "saved" in reply.text
    assert fake_llm.chat_requests == []
    assert len(fake_llm.transcriptions) == (1 if trouble == "fails" else 0)
    # Nothing is lost: the audio is kept, and the message says it was not transcribed.
    assert [p.name for p in media_files(home(workspaces_dir, 42))] == [f"{sha(audio)}.ogg"]
    user = next(r for r in records(workspaces_dir, 42) if r.get("role") == "user")
    assert "[voice message, " in user["content"][0]["text"]
    assert "not transcribed" in user["content"][0]["text"]


async def test_an_audio_file_is_transcribed_under_its_name(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.transcripts.append("welcome to the weekly podcast")
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.audio(42, b"ID3" + b"\x00" * 100, "episode 12.mp3", "audio/mpeg", duration=75)
        await answer(tg, 42)

    assert fake_llm.transcriptions[0].filename == "episode 12.mp3"
    said = fake_llm.chat_requests[0]["messages"][-1]["content"]
    assert "[audio episode 12.mp3, 1:15 min] welcome to the weekly podcast" in said


# ---- isolation -----------------------------------------------------------------------------


async def test_media_of_one_user_never_reaches_another(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    secret = jpeg(9)
    async with serving(config_for(tg, fake_llm, workspaces_dir)):
        tg.photo(1, secret, caption="my passport")
        await answer(tg, 1)
        tg.dm(2, "what pictures have you seen?")
        await answer(tg, 2)
        tg.photo(2, secret, caption="the same picture, by chance")
        await answer(tg, 2, 2)

    second_user = fake_llm.chat_requests[1:]
    assert image_urls(second_user[0]) == []
    assert all("passport" not in text for r in second_user for text in user_texts(r))
    assert len(image_urls(second_user[1])) == 1  # their own copy only
    # Each person's copy is in their own folder; neither folder refers to the other.
    assert [p.name for p in media_files(home(workspaces_dir, 1))] == [f"{sha(secret)}.jpg"]
    assert [p.name for p in media_files(home(workspaces_dir, 2))] == [f"{sha(secret)}.jpg"]
    assert "passport" not in session_file_text(home(workspaces_dir, 2))
