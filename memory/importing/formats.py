"""The conversations of a ChatGPT or Claude export, read one at a time (docs/import.md shows
both shapes).

The file is a JSON list of conversations; ijson hands over one element at a time, so RAM holds
one conversation, never the export. ChatGPT keeps a conversation as a tree (`mapping`): an
edited question or a regenerated answer is a branch, and the branch the person kept is the
path from `current_node` up to the root. Claude keeps a plain list (`chat_messages`).
"""

from __future__ import annotations

import hashlib
import itertools
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

import ijson

from memory.importing.depth import DepthGuard
from memory.importing.sources import ImportRefused, checked_zip, open_json

SERVICES = ("chatgpt", "claude")
NAMES = {"chatgpt": "ChatGPT", "claude": "Claude"}
_MAX_NODES = 200_000  # the kept branch of one conversation, at most


@dataclass(frozen=True)
class Turn:
    role: str  # "user" or "assistant"
    text: str
    when: datetime | None


@dataclass(frozen=True)
class Conversation:
    id: str
    title: str
    when: datetime  # its start, UTC
    turns: tuple[Turn, ...]


def conversations(
    stream: IO[bytes] | DepthGuard, service: str, *, name: str = "the file"
) -> Iterator[Conversation]:
    """Each conversation of the export in `stream` (one without a word is skipped). A file
    that is not this service's export, or is cut short or broken, raises ImportRefused. A
    `DepthGuard` given is used as it is (its `consumed` is a progress bar's)."""
    read = _READERS[service]
    guard = stream if isinstance(stream, DepthGuard) else DepthGuard(stream, name)
    count = 0
    try:
        for item in ijson.items(guard, "item", use_float=True):
            count += 1
            conversation = read(item, NAMES[service])
            if conversation is not None:
                yield conversation
    except ijson.common.IncompleteJSONError as exc:
        why = "cut short" if "premature EOF" in str(exc) else "not valid JSON"
        raise ImportRefused(f"{name} is {why} (after {count:,} conversations)") from None
    except ijson.common.JSONError as exc:
        raise ImportRefused(f"{name} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ImportRefused(f"{name} nests deeper than any export does") from None
    if count == 0:
        raise ImportRefused(
            f"{name} holds no list of conversations: is it a {NAMES[service]} export?"
        )


def detect(path: Path) -> str:
    """Which export `path` is, from its first conversation's keys (or a LightGrep archive's
    files): "chatgpt", "claude" or "lightgrep"; ImportRefused when it is none of them."""
    if zipfile.is_zipfile(path):
        with checked_zip(path) as archive:
            names = [PurePosixPath(info.filename).parts for info in archive.infolist()]
        if any(parts[1:] in (("MEMORY.md",), ("HISTORY.md",)) for parts in names):
            return "lightgrep"
    with open_json(path) as opened:
        try:
            events = ijson.parse(DepthGuard(opened.stream, path.name))
            for prefix, event, value in itertools.islice(events, 100_000):
                if prefix == "item" and event == "map_key":
                    if value in ("mapping", "current_node"):
                        return "chatgpt"
                    if value in ("chat_messages", "uuid"):
                        return "claude"
                if prefix == "item" and event == "end_map":
                    break  # the first conversation said nothing of either
        except ijson.common.JSONError:
            pass
    raise ImportRefused(f"{path.name} is not an export I know (ChatGPT's or Claude's)")


def chatgpt(item: Any, service: str = "ChatGPT") -> Conversation | None:
    """One ChatGPT conversation: its kept branch, the person's and the model's messages."""
    if not isinstance(item, dict) or not isinstance(item.get("mapping"), dict):
        raise _wrong(service, item)
    mapping: dict[str, Any] = item["mapping"]
    chain: list[dict[str, Any]] = []
    node_id = item.get("current_node")
    if node_id not in mapping:
        node_id = _last_leaf(mapping)
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict) or len(chain) > _MAX_NODES:
            break
        chain.append(node)
        node_id = node.get("parent")
    turns = []
    for node in reversed(chain):
        message = node.get("message")
        if not isinstance(message, dict):
            continue
        author = message.get("author")
        role = author.get("role") if isinstance(author, dict) else None
        text = _chatgpt_text(message.get("content"))
        if role in ("user", "assistant") and text:
            turns.append(Turn(role, text, _epoch(message.get("create_time"))))
    when = _epoch(item.get("create_time")) or _first_time(turns)
    ident = item.get("id") or item.get("conversation_id")
    return _conversation(ident, item.get("title"), when, turns)


def claude(item: Any, service: str = "Claude") -> Conversation | None:
    """One Claude conversation: its messages in order."""
    if not isinstance(item, dict) or not isinstance(item.get("chat_messages"), list):
        raise _wrong(service, item)
    turns = []
    for message in item["chat_messages"]:
        if not isinstance(message, dict):
            continue
        role = {"human": "user", "assistant": "assistant"}.get(message.get("sender", ""))
        text = _claude_text(message)
        if role and text:
            turns.append(Turn(role, text, _iso(message.get("created_at"))))
    when = _iso(item.get("created_at")) or _first_time(turns)
    return _conversation(item.get("uuid"), item.get("name"), when, turns)


_READERS: dict[str, Callable[[Any, str], Conversation | None]] = {
    "chatgpt": chatgpt,
    "claude": claude,
}


def _conversation(
    ident: Any, title: Any, when: datetime | None, turns: list[Turn]
) -> Conversation | None:
    if not turns:
        return None
    title = " ".join(str(title or "").split())[:200] or "Untitled"
    when = when or datetime(1970, 1, 1, tzinfo=UTC)
    if not isinstance(ident, str) or not ident.strip():
        seed = f"{title}\n{when.isoformat()}\n{turns[0].text[:500]}"
        ident = "h" + hashlib.blake2b(seed.encode(), digest_size=12).hexdigest()
    return Conversation("".join(ident.split())[:100], title, when, tuple(turns))


def _wrong(service: str, item: Any) -> ImportRefused:
    other = ""
    if isinstance(item, dict):
        if "chat_messages" in item:
            other = " (it looks like Claude's: `lightgrep import claude`)"
        elif "mapping" in item:
            other = " (it looks like ChatGPT's: `lightgrep import chatgpt`)"
    return ImportRefused(f"this is not a {service} export{other}")


def _last_leaf(mapping: dict[str, Any]) -> str | None:
    """Without `current_node`: from the root, the newest child at each step."""
    roots = [
        key for key, node in mapping.items() if isinstance(node, dict) and not node.get("parent")
    ]
    node_id = roots[0] if roots else None
    for _ in range(_MAX_NODES):
        node = mapping.get(node_id) if isinstance(node_id, str) else None
        children = node.get("children") if isinstance(node, dict) else None
        if not children or not isinstance(children, list):
            break
        node_id = children[-1]
    return node_id


def _chatgpt_text(content: Any) -> str:
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts")
    if isinstance(parts, list):
        pieces = [part for part in parts if isinstance(part, str)]
        pieces += [
            part["text"]
            for part in parts
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return "\n".join(piece for piece in pieces if piece.strip()).strip()
    text = content.get("text")
    return text.strip() if isinstance(text, str) else ""


def _claude_text(message: dict[str, Any]) -> str:
    blocks = message.get("content")
    if isinstance(blocks, list):
        pieces = [
            block["text"]
            for block in blocks
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ]
        if any(piece.strip() for piece in pieces):
            return "\n".join(pieces).strip()
    text = message.get("text")
    return text.strip() if isinstance(text, str) else ""


def _first_time(turns: list[Turn]) -> datetime | None:
    return next((turn.when for turn in turns if turn.when), None)


def _epoch(value: Any) -> datetime | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e11:
        return datetime.fromtimestamp(value, UTC)
    return None


def _iso(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
