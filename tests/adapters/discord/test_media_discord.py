"""Attachments on Discord, end to end: real discord.py against the fake Discord (gateway, REST and
its CDN for attachments), the real Agent and openai client against the fake OpenAI server."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

from bot.config import Config, LLMConfig, TranscriptionConfig
from memory.keys import encode_key
from tests.rigs.discord import ALICE, DM, make_config, running
from tests.rigs.fakes.discord_server import FakeDiscord
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, image_urls
from tests.rigs.media import media_files, png, sha


def media_config(fake: FakeDiscord, llm: FakeOpenAI, workspaces: Path) -> Config:
    config = make_config(fake, llm, workspaces)
    return dataclasses.replace(
        config,
        llm=LLMConfig(**{**vars(config.llm), "vision": True}),
        transcription=TranscriptionConfig(enabled=True),
    )


def home(workspaces: Path) -> Path:
    return workspaces / encode_key("discord-42")


async def send(fake: FakeDiscord, text: str, *attachments: dict[str, Any]) -> None:
    message = fake.message(ALICE, text, channel_id=DM, attachments=list(attachments))
    await fake.dispatch("MESSAGE_CREATE", message)


async def test_an_image_attachment_reaches_the_model(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    picture = png(3)
    fake_llm.queue(completion("A tiny red square."))
    async with running(media_config(discord_fake, fake_llm, workspaces_dir)):
        image = discord_fake.attachment(picture, "square.png", "image/png", channel_id=DM)
        await send(discord_fake, "what is it?", image)
        [sent] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))

    assert sent["content"] == "A tiny red square."
    expected = "data:image/png;base64," + base64.b64encode(picture).decode()
    assert image_urls(fake_llm.chat_requests[0]) == [expected]
    assert len(discord_fake.downloads) == 1
    assert [p.name for p in media_files(home(workspaces_dir))] == [f"{sha(picture)}.png"]


async def test_pictures_beyond_the_limit_per_message_are_left_out_with_a_word(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    async with running(media_config(discord_fake, fake_llm, workspaces_dir)):
        images = [
            discord_fake.attachment(png(n), f"p{n}.png", "image/png", channel_id=DM)
            for n in range(5)
        ]
        await send(discord_fake, "compare these", *images)
        [sent] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))

    assert len(image_urls(fake_llm.chat_requests[0])) == 4  # [media] max_images_per_message
    assert "at most 4 pictures per message" in sent["content"] and "left out 1" in sent["content"]
    assert len(discord_fake.downloads) == 4  # the fifth was never fetched


async def test_a_voice_message_is_transcribed(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.transcripts.append("book a table for two at eight")
    async with running(media_config(discord_fake, fake_llm, workspaces_dir)):
        voice = discord_fake.attachment(
            b"OggS" + b"\x01" * 50, "voice-message.ogg", "audio/ogg", channel_id=DM, voice_seconds=3
        )
        await send(discord_fake, "", voice)
        await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))

    assert fake_llm.transcriptions[0].filename == "voice-message.ogg"
    said = fake_llm.chat_requests[0]["messages"][-1]["content"]
    assert "[voice message, 3 s] book a table for two at eight" in said


async def test_an_oversized_attachment_is_refused_before_download(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    async with running(media_config(discord_fake, fake_llm, workspaces_dir)):
        report = discord_fake.attachment(
            b"%PDF-1.4", "report.pdf", "application/pdf", channel_id=DM, size=40_000_000
        )
        await send(discord_fake, "", report)
        [sent] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))

    assert sent["content"] == (
        "report.pdf is 40 MB; I can take PDFs up to 10 MB, so I didn't download it."
    )
    assert discord_fake.downloads == [] and fake_llm.requests == []


async def test_an_attachment_larger_than_said_is_downloaded_only_up_to_the_limit(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    async with running(media_config(discord_fake, fake_llm, workspaces_dir)):
        notes = discord_fake.attachment(
            b"x" * 1000, "notes.txt", "text/plain", channel_id=DM, hidden=50_000_000
        )
        await send(discord_fake, "", notes)
        [sent] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))

    [path] = discord_fake.downloads
    assert discord_fake.served[path] < 10_000_000  # of 50 MB
    assert sent["content"] == (
        "notes.txt is larger than 100 KB, the most I take for text files, so I stopped "
        "downloading it."
    )
    assert fake_llm.requests == [] and media_files(home(workspaces_dir)) == []
