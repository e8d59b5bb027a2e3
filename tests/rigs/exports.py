"""Generated exports in the shapes ChatGPT and Claude document (docs/import.md), written as a
stream so the benchmark can make hundreds of MB without holding them."""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tests.rigs.fakes.openai_server import save_memory_call

START = 1_680_000_000.0  # 2023-03-28 10:40 UTC
ANIMALS = ("quokka", "marmot", "pangolin", "axolotl")  # a fact of its own per conversation


def chatgpt_conversation(number: int, turns: int = 4, words: str = "") -> dict[str, Any]:
    """A ChatGPT conversation whose tree has a branch: the first answer was regenerated, and
    `current_node` follows the second (kept) one. `words` goes into the first question."""
    start = START + number * 86_400.0
    mapping: dict[str, Any] = {
        "root": {"id": "root", "message": None, "parent": None, "children": ["sys"]},
        "sys": {
            "id": "sys",
            "message": _gpt_message("system", "", start),
            "parent": "root",
            "children": ["u0"],
        },
    }
    parent = "sys"
    for turn in range(turns):
        question, answer = f"u{turn}", f"a{turn}"
        text = f"Question {turn} of conversation {number} {words if turn == 0 else ''}".strip()
        mapping[parent]["children"] = [question]
        mapping[question] = {
            "id": question,
            "message": _gpt_message("user", text, start + turn * 60),
            "parent": parent,
            "children": [answer],
        }
        mapping[answer] = {
            "id": answer,
            "message": _gpt_message(
                "assistant", f"Answer {turn} to conversation {number}.", start + turn * 60 + 5
            ),
            "parent": question,
            "children": [],
        }
        if turn == 0:  # regenerated: the first answer is a dropped branch
            mapping["dropped"] = {
                "id": "dropped",
                "message": _gpt_message("assistant", "A DROPPED answer nobody kept.", start + 2),
                "parent": question,
                "children": [],
            }
            mapping[question]["children"] = ["dropped", answer]
        parent = answer
    return {
        "title": f"Conversation {number}",
        "create_time": start,
        "update_time": start + turns * 60,
        "mapping": mapping,
        "current_node": parent,
        "id": f"gpt-{number:06d}",
        "conversation_id": f"gpt-{number:06d}",
    }


def _gpt_message(role: str, text: str, when: float) -> dict[str, Any]:
    return {
        "id": f"m-{role}-{when}",
        "author": {"role": role, "name": None, "metadata": {}},
        "create_time": when,
        "content": {"content_type": "text", "parts": [text]},
        "status": "finished_successfully",
        "metadata": {},
        "recipient": "all",
    }


def claude_conversation(number: int, turns: int = 3, words: str = "") -> dict[str, Any]:
    """A Claude conversation: answers as content blocks, questions as plain text."""
    start = START + number * 86_400.0
    messages = []
    for turn in range(turns):
        when = _iso(start + turn * 60)
        text = f"Question {turn} of chat {number} {words if turn == 0 else ''}".strip()
        messages.append(
            {
                "uuid": f"h{number}-{turn}",
                "text": text,
                "content": [],
                "sender": "human",
                "created_at": when,
                "attachments": [],
                "files": [],
            }
        )
        answer = f"Answer {turn} to chat {number}."
        messages.append({"uuid": f"a{number}-{turn}", "text": "",
                         "content": [{"type": "text", "text": answer}],
                         "sender": "assistant", "created_at": when, "attachments": [],
                         "files": []})  # fmt: skip
    return {
        "uuid": f"claude-{number:06d}",
        "name": f"Chat {number}",
        "created_at": _iso(start),
        "updated_at": _iso(start + turns * 60),
        "account": {"uuid": "acct-1"},
        "chat_messages": messages,
    }


def _iso(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def write_list(out: IO[str], items: Iterator[dict[str, Any]]) -> None:
    """A JSON list written an element at a time."""
    out.write("[")
    for number, item in enumerate(items):
        out.write(("," if number else "") + json.dumps(item))
    out.write("]")


def zipped(path: Path, items: Iterator[dict[str, Any]], folder: str = "") -> Path:
    """An export zip holding conversations.json (and a picture file, as exports do)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open(f"{folder}conversations.json", "w", force_zip64=True) as raw:
            import io

            text = io.TextIOWrapper(raw, encoding="utf-8")
            write_list(text, items)
            text.flush()
            text.detach()
        archive.writestr(f"{folder}file-abc.png", b"\x89PNG not really")
    return path


def learning(request: dict[str, Any]) -> dict[str, Any]:
    """A model learning from imported conversations of `chatgpt_conversation`: save_memory with
    a fact of its own per conversation in the request (the user keeps a quokka, …), well but for
    one thing: its MEMORY.md drops "Likes oboe music" (an update that only adds keeps it)."""
    text = request["messages"][1]["content"]
    current = text.split("## Current MEMORY.md\n", 1)[1].split("\n\n## Conversation", 1)[0]
    numbers = sorted(set(re.findall(r"USER: Question \d+ of conversation (\d+)", text)), key=int)
    facts = "".join(f"- The user keeps a {ANIMALS[int(n)]}\n" for n in numbers)
    update = current.replace("- Likes oboe music\n", "").rstrip("\n") + "\n" + facts
    said = ", ".join(f"Question 0 of conversation {n}" for n in numbers)
    return save_memory_call(f"[2023-04-01 10:00] The user asked {said}.", update)
