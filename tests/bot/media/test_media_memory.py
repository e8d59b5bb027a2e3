"""Media and memory: consolidation reads a picture as "[image: caption]", /forget takes the picture
with its message, /export carries media/, and a picture's token cost is a setting. The real Agent
and openai client against the fake OpenAI server; Inbound messages as an adapter builds them."""

from __future__ import annotations

import asyncio
import io
import zipfile
from dataclasses import replace
from pathlib import Path

from bot.inbound import Attachment, Inbound
from memory.tokens import TokenEstimator
from tests.rigs.agent import ask, dm, make_agent, user_home
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)
from tests.rigs.media import jpeg, media_files, sha


def photo(user: str, caption: str, data: bytes) -> Inbound:
    """A photo with a caption, downloaded, as the Telegram adapter hands it over."""
    picture = Attachment("image", "image/jpeg", "photo.jpg", size=len(data), data=data)
    return replace(dm(user, caption), attachments=(picture,))


async def test_consolidation_sees_a_picture_as_its_caption(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    def answer(request: dict) -> dict:
        if is_consolidation(request):
            return save_memory_call("[2026-01-01 10:00] Showed a photo of Tom.", "# Memory\n")
        return completion("ok")

    fake_llm.default = answer
    agent = make_agent(fake_llm, workspaces_dir, window=5000, vision=True, image_tokens=2000)
    try:
        await ask(agent, photo("7", "my cat Tom on the sofa", jpeg(1)))
        for topic in ("cats", "sofas"):
            await ask(agent, dm("7", f"tell me about {topic} " + "and more " * 1000))
    finally:
        await agent.aclose()  # waits for the background consolidation

    consolidation = fake_llm.consolidation_requests[0]
    chunk = consolidation["messages"][-1]["content"]
    assert "[image: my cat Tom on the sofa]" in chunk
    assert "base64" not in chunk and "sha256" not in chunk


async def test_forget_takes_the_picture_with_its_message_and_export_carries_media(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir, vision=True)
    kept, forgotten = jpeg(1), jpeg(2)
    try:
        await ask(agent, photo("7", "our new kitchen", kept))
        await ask(agent, photo("7", "my old passport scan", forgotten))
        home = user_home(workspaces_dir, "7")
        assert len(media_files(home)) == 2

        exported = await ask(agent, dm("7", "/export"))
        [archive] = exported.files
        names = zipfile.ZipFile(io.BytesIO(archive.read())).namelist()
        assert f"{home.name}/media/{sha(kept)}.jpg" in names
        assert f"{home.name}/media/{sha(forgotten)}.jpg" in names

        question = await ask(agent, dm("7", "/forget old passport"))
        assert "1 media file" in question.text
        await ask(agent, dm("7", "/forget confirm"))
    finally:
        await agent.aclose()

    assert [p.name for p in media_files(home)] == [f"{sha(kept)}.jpg"]
    later = make_agent(fake_llm, workspaces_dir, vision=True)  # from the disk again
    try:
        await ask(later, dm("7", "what have I shown you?"))
    finally:
        await later.aclose()
    urls = [
        part["image_url"]["url"]
        for message in fake_llm.chat_requests[-1]["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]
    assert len(urls) == 1  # the kitchen only


def test_a_picture_counts_at_the_configured_cost() -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_ref", "sha256": "0" * 64, "ext": "jpg", "mime": "image/jpeg"},
        ],
    }
    cheap, dear = TokenEstimator(image_tokens=85), TokenEstimator(image_tokens=1500)
    assert dear.count_message(message) - cheap.count_message(message) == 1500 - 85


async def test_a_redelivered_photo_is_kept_and_answered_once(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir, vision=True)
    message = replace(photo("7", "a sunset", jpeg(4)), message_id="7:100")
    try:
        first, again = await asyncio.gather(ask(agent, message), ask(agent, message))
    finally:
        await agent.aclose()
    assert first.text == "ok" and again.text == "ok"
    assert len(fake_llm.chat_requests) == 1
    assert len(media_files(user_home(workspaces_dir, "7"))) == 1
