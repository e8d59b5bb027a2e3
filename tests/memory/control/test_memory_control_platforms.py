"""Memory control through the real clients: python-telegram-bot against the fake Bot API
(inline buttons, callback queries, sendDocument uploads), discord.py against the fake Discord
(button components, ephemeral answers, attachments) and the terminal adapter on a pipe. The
confirmation and the result of a command asked in a group stay private."""

from __future__ import annotations

import asyncio
import io
import os
import zipfile
from pathlib import Path

from adapters.intake.texts import SENT_PRIVATELY
from adapters.terminal.adapter import TerminalAdapter
from bot.agent.agent import Agent
from bot.config import Config, LLMConfig, MemoryConfig
from memory.workspace import Workspaces
from tests.rigs.discord import ALICE, CHANNEL, DM, EPHEMERAL, GUILD, callbacks
from tests.rigs.discord import make_config as discord_config
from tests.rigs.discord import running as discord_running
from tests.rigs.fakes.discord_server import FakeDiscord
from tests.rigs.fakes.openai_server import FakeOpenAI
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.memory_control import SECRET, all_bytes, files_holding, fill
from tests.rigs.telegram import GROUP
from tests.rigs.telegram import make_config as telegram_config
from tests.rigs.telegram import running as telegram_running


def unpacked(data: bytes, into: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(into)
    [folder] = list(into.iterdir())
    return all_bytes(folder)


# ---- Telegram ------------------------------------------------------------------------------


async def test_telegram_forget_in_a_private_chat_with_the_inline_button(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    workspace = Workspaces(workspaces_dir).get("telegram-42")
    fill(workspace)
    async with telegram_running(telegram_config(tg, fake_llm, workspaces_dir)):
        tg.dm(42, "/forget Elm Street")
        [question] = await tg.wait_sent(42)
        assert "Lives at 12 elm street" in question.text
        assert [label for label, _ in tg.buttons(question)] == ["Forget it", "Keep it"]
        assert files_holding(workspace.root, SECRET)  # nothing removed before the press
        confirm = tg.buttons(question)[0][1]
        tg.press(42, question, confirm)
        result = (await tg.wait_sent(42, 2))[1]
        # Pressing again (the keyboard was removed, but a client may lag) removes nothing more.
        tg.press(42, question, confirm)
        again = (await tg.wait_sent(42, 3))[2]
    assert "Forgotten" in result.text and "2 entries of HISTORY.md" in result.text
    assert "nothing waiting" in again.text
    assert files_holding(workspace.root, SECRET) == []
    assert len(tg.callback_answers) == 2  # each press was acknowledged (no endless spinner)
    assert tg.method_calls("editMessageReplyMarkup")
    assert fake_llm.requests == []


async def test_telegram_commands_asked_in_a_group_are_answered_privately(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, tmp_path: Path
) -> None:
    workspace = Workspaces(workspaces_dir).get("telegram-42")
    fill(workspace)
    tg.started_users.add(42)
    async with telegram_running(telegram_config(tg, fake_llm, workspaces_dir)):
        tg.group(GROUP, 42, "/forget Elm Street")
        [question] = await tg.wait_sent(42)
        assert tg.buttons(question) and "Lives at 12 elm street" in question.text
        tg.press(42, question, tg.buttons(question)[0][1])  # in the private chat
        result = (await tg.wait_sent(42, 2))[1]
        assert "Forgotten" in result.text

        tg.group(GROUP, 42, "/export")
        await tg.wait_until(lambda: tg.documents)
        [document] = tg.documents
        archive_text = (await tg.wait_sent(42, 3))[2]

        tg.group(GROUP, 42, "/wipe")
        wipe_question = (await tg.wait_sent(42, 4))[3]
        tg.group(GROUP, 42, "/wipe confirm")  # typed, in the group
        wiped = (await tg.wait_sent(42, 5))[4]
        await tg.wait_sent(GROUP, 4)  # one pointer per command asked there

    assert document.chat_id == 42 and document.filename.endswith(".zip")
    assert "everything I keep about you" in archive_text.text
    files = unpacked(document.data, tmp_path / "unpacked")
    assert "MEMORY.md" in files and not any(
        SECRET.lower().encode() in d.lower() for d in files.values()
    )
    assert "conversations (1 in groups)" in wipe_question.text
    assert "erased everything" in wiped.text
    assert not workspace.root.exists()
    # The group saw only the pointers to the private chat: no question, no result, no file.
    assert {s.text for s in tg.sent_to(GROUP)} == {SENT_PRIVATELY}
    assert all(not tg.buttons(s) for s in tg.sent_to(GROUP))


async def test_telegram_export_over_the_upload_limit_is_a_clear_answer(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fill(Workspaces(workspaces_dir).get("telegram-42"))
    async with telegram_running(telegram_config(tg, fake_llm, workspaces_dir)) as adapter:
        adapter.upload_limit = 200  # stands for Telegram's 50 MB
        tg.dm(42, "/export")
        sent = await tg.wait_sent(42, 2)
    assert not tg.documents
    notice = sent[1].text
    assert "more than Telegram lets me send" in notice and "lightgrep export" in notice


# ---- Discord -------------------------------------------------------------------------------


async def test_discord_forget_and_wipe_with_buttons_only_the_user_sees(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    workspace = Workspaces(workspaces_dir).get("discord-42")
    fill(workspace)
    async with discord_running(discord_config(discord_fake, fake_llm, workspaces_dir)):
        await discord_fake.dispatch(
            "INTERACTION_CREATE",
            discord_fake.slash(
                ALICE, "forget", {"words": "Elm Street"}, channel_id=CHANNEL, guild_id=GUILD
            ),
        )
        [question] = await discord_fake.wait_until(lambda: callbacks(discord_fake))
        buttons = discord_fake.buttons(question["data"])
        assert [label for label, _ in buttons] == ["Forget it", "Keep it"]
        press = discord_fake.press(ALICE, buttons[0][1], channel_id=CHANNEL, guild_id=GUILD)
        await discord_fake.dispatch("INTERACTION_CREATE", press)
        result = (await discord_fake.wait_until(lambda: callbacks(discord_fake)[1:]))[0]

        await discord_fake.dispatch(
            "INTERACTION_CREATE", discord_fake.slash(ALICE, "wipe", channel_id=DM)
        )
        wipe_question = (await discord_fake.wait_until(lambda: callbacks(discord_fake)[2:]))[0]
        erase = discord_fake.buttons(wipe_question["data"])[0][1]
        await discord_fake.dispatch(
            "INTERACTION_CREATE", discord_fake.press(ALICE, erase, channel_id=DM)
        )
        wiped = (await discord_fake.wait_until(lambda: callbacks(discord_fake)[3:]))[0]

    for answer in (question, result, wipe_question, wiped):
        assert answer["type"] == 4 and answer["data"]["flags"] & EPHEMERAL
    assert "Lives at 12 elm street" in question["data"]["content"]
    assert "Forgotten" in result["data"]["content"]
    assert "2 conversations (1 in groups)" in wipe_question["data"]["content"]
    assert "erased everything" in wiped["data"]["content"]
    assert not workspace.root.exists()
    assert discord_fake.sent_messages() == []  # nothing went to a channel
    assert fake_llm.requests == []


async def test_discord_export_is_an_ephemeral_attachment_within_the_interaction_limit(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path, tmp_path: Path
) -> None:
    workspace = Workspaces(workspaces_dir).get("discord-42")
    fill(workspace)
    async with discord_running(discord_config(discord_fake, fake_llm, workspaces_dir)):
        await discord_fake.dispatch(
            "INTERACTION_CREATE",
            discord_fake.slash(ALICE, "export", channel_id=CHANNEL, guild_id=GUILD),
        )
        [upload] = await discord_fake.wait_until(discord_fake.uploads)
        [(name, data)] = upload.files.items()
        small = discord_fake.slash(
            ALICE, "export", channel_id=CHANNEL, guild_id=GUILD, attachment_size_limit=300
        )
        await discord_fake.dispatch("INTERACTION_CREATE", small)
        refused = (await discord_fake.wait_until(lambda: callbacks(discord_fake)[1:]))[0]
        # Typed in the DM as a message, it comes back as a message with the file attached.
        typed = discord_fake.message(ALICE, "/export", channel_id=DM)
        await discord_fake.dispatch("MESSAGE_CREATE", typed)
        in_dm = (await discord_fake.wait_until(lambda: discord_fake.uploads()[1:]))[0]
    assert in_dm.path == f"/channels/{DM}/messages" and list(in_dm.files.values()) == [data]
    assert upload.path.endswith("/callback") and upload.body["data"]["flags"] & EPHEMERAL
    assert name.startswith("lightgrep-discord-42-") and name.endswith(".zip")
    assert unpacked(data, tmp_path / "unpacked") == all_bytes(workspace.root)
    assert refused["data"]["flags"] & EPHEMERAL and len(discord_fake.uploads()) == 2
    assert "more than Discord lets me send" in refused["data"]["content"]


# ---- the terminal --------------------------------------------------------------------------


async def test_terminal_export_writes_the_file_and_forget_takes_the_typed_confirmation(
    fake_llm: FakeOpenAI, workspaces_dir: Path, tmp_path: Path
) -> None:
    config = Config(
        llm=LLMConfig(base_url=fake_llm.base_url, api_key="sk-test", model="fake-model"),
        memory=MemoryConfig(workspaces_dir=workspaces_dir),
    )
    workspace = Workspaces(workspaces_dir).get("cli-ana")
    fill(workspace)
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"/export\n/forget Elm Street\n/forget confirm\n/wipe\n/wipe confirm\n")
    os.close(write_fd)
    screen = io.StringIO()
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    agent = Agent(config)
    adapter = TerminalAdapter(
        config, agent, user="ana", stdin_fd=read_fd, stdout=screen, files_dir=downloads
    )
    exported = all_bytes(workspace.root)
    try:
        await asyncio.wait_for(adapter.run(asyncio.Event()), 10)
    finally:
        await agent.aclose()
        os.close(read_fd)
    shown = screen.getvalue()
    [archive] = list(downloads.iterdir())
    assert f"Saved {archive.name}: {archive}" in shown
    assert unpacked(archive.read_bytes(), tmp_path / "unpacked") == exported
    assert "/forget confirm " in shown and "(Forget it)" in shown  # the commands to type
    assert "Forgotten" in shown and "erased everything" in shown
    assert not workspace.root.exists()
