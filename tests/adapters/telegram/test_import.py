"""/import through the real Telegram bot: python-telegram-bot against the fake Bot API, the real
Agent. An export sent with /import as its caption lands in HISTORY.md, /recall finds it, the
same file again adds nothing; too large a file is refused before it is downloaded; the question
to learn facts from it, answered yes, learns while another person is answered."""

from __future__ import annotations

import asyncio
import io
import zipfile
from pathlib import Path

from memory.keys import encode_key
from tests.rigs.exports import ANIMALS, chatgpt_conversation, claude_conversation, learning, zipped
from tests.rigs.fakes.openai_server import FakeOpenAI, Held, completion, is_consolidation
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.telegram import make_config, running


async def _reply(tg: FakeTelegram, count: int) -> str:
    return (await tg.wait_sent(42, count))[-1].text


async def test_an_export_sent_with_import_is_found_by_recall_and_not_added_twice(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, tmp_path: Path
) -> None:
    items = [chatgpt_conversation(n, 2, "the quokka sanctuary" if n == 1 else "") for n in range(3)]
    export = zipped(tmp_path / "export.zip", iter(items)).read_bytes()
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.document(42, export, "chatgpt-export.zip", "application/zip", caption="/import")
        first = await _reply(tg, 1)
        tg.dm(42, "/recall quokka")
        found = await _reply(tg, 2)
        tg.document(42, export, "chatgpt-export.zip", "application/zip", caption="/import")
        again = await _reply(tg, 3)
    assert first.startswith("Imported 3 ChatGPT conversations into your history (3 entries")
    assert "Conversation 1" in found and "2023-03-29" in found and "Conversation 2" not in found
    assert again == "Nothing new: every conversation of that ChatGPT export is in your history."
    history = (workspaces_dir / encode_key("telegram-42") / "HISTORY.md").read_text()
    assert history.count("import chatgpt:") == 3
    assert fake_llm.requests == []  # an import asks no model


async def test_a_large_export_is_said_to_be_importing_before_it_is_done(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, tmp_path: Path
) -> None:
    """An export of over 1 MB: "Importing your ChatGPT export (… MB)…" is shown at once (a
    draft, while the import runs), and the answer follows it; before, nothing was shown until
    the import had finished. A small one is answered without it."""
    import json

    export = json.dumps([chatgpt_conversation(n, 6, "word " * 300) for n in range(300)]).encode()
    assert len(export) > 1_000_000
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.document(42, export, "conversations.json", "application/json", caption="/import")
        answer = await _reply(tg, 1)
    said = f"Importing your ChatGPT export ({len(export) / 1e6:.1f} MB)…"
    assert answer.startswith(said + "\n\nImported 300 ChatGPT conversations"), answer
    assert any(draft.text.startswith(said) for draft in tg.drafts), tg.drafts


async def test_claude_json_and_a_broken_file(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    import json

    claude = json.dumps([claude_conversation(n) for n in range(2)]).encode()
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", b"[" + b" " * (30 << 20) + b"]")
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.document(42, claude, "conversations.json", "application/json", caption="/import")
        imported = await _reply(tg, 1)
        tg.document(42, bomb.getvalue(), "export.zip", "application/zip", caption="/import")
        refused = await _reply(tg, 2)
        tg.dm(42, "/import")
        how = await _reply(tg, 3)
    assert imported.startswith("Imported 2 Claude conversations")
    assert refused.startswith("I couldn't import that file: export.zip looks like a zip bomb")
    assert refused.endswith("Nothing was added.")
    assert how.startswith("Send your export as a file with /import as its caption")


async def test_an_export_larger_than_the_chat_takes_is_refused_before_downloading(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.document(42, b"PK", "export.zip", "application/zip", caption="/import", size=90_000_000)
        said = await _reply(tg, 1)
    assert "90 MB, more than I take in a chat (20 MB)" in said
    assert "lightgrep import chatgpt|claude FILE --user telegram-42" in said
    assert tg.downloads == []
    assert not (workspaces_dir / encode_key("telegram-42") / "HISTORY.md").exists()


async def test_import_asks_to_learn_facts_and_yes_learns_while_another_is_answered(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, tmp_path: Path
) -> None:
    export = zipped(tmp_path / "export.zip", iter([chatgpt_conversation(n, 2) for n in range(3)]))
    folder = workspaces_dir / encode_key("telegram-42")
    folder.mkdir(parents=True)
    (folder / "MEMORY.md").write_text("## Preferences\n\n- Likes oboe music\n")
    release = asyncio.Event()
    fake_llm.default = lambda r: learning(r) if is_consolidation(r) else completion("Hi, 43")
    fake_llm.queue(Held(release, learning))  # the first request of the learning waits
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        tg.document(42, export.read_bytes(), "export.zip", "application/zip", caption="/import")
        asked = (await tg.wait_sent(42, 1))[-1]
        assert fake_llm.requests == []  # the estimate asks no model
        (label, command), *_ = tg.buttons(asked)
        tg.press(42, asked, command)
        started = await _reply(tg, 2)
        await fake_llm.wait_requests(1)
        tg.dm(43, "hello")
        other = (await tg.wait_sent(43, 1))[-1].text  # answered while the learning waits
        release.set()
        for _ in range(100):
            if "pangolin" in (text := (folder / "MEMORY.md").read_text()):
                break
            await asyncio.sleep(0.05)
        tg.dm(42, "/import facts")
        again = await _reply(tg, 3)
    assert asked.text.startswith("Imported 3 ChatGPT conversations")
    assert (
        "Learn facts from them into your memory? That asks the model about 3 conversations, "
        in (asked.text)
    )
    assert label == "Learn facts" and command.startswith("/import facts confirm ")
    assert started.startswith("Learning facts from your imported conversations now")
    assert other == "Hi, 43"
    assert "- Likes oboe music" in text and all(a in text for a in ANIMALS[:3])
    assert again == "Every conversation you imported was learnt from already."
    usage = (folder / "usage.jsonl").read_text()
    assert usage.count("\n") >= 1
