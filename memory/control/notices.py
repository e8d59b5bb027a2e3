"""What a person's other accounts are told when a link is made or removed (/link, /unlink),
kept until it is delivered: one append-only file in the person's workspace, `notices.jsonl`.

Records, one JSON line each: `{"type": "notice", "id", "to", "text"}` (a sentence for the key
`to`), `{"type": "told", "id"}` (delivered, through the platform or under an answer), and
`{"type": "place", "key", "place"}` (where the key last wrote from: the plain ids its
platform's `send_to` needs to tell it at once; recorded when they change). An append is the
whole line or nothing (memory.safefs.append_line), so a crash leaves a file that loads, and a
notice not marked told is said again after a restart: at least once, and once unless a crash
falls between the platform taking it and the record.
"""

from __future__ import annotations

import json
import logging
import secrets
from pathlib import Path
from typing import Any

from memory.safefs import append_line, json_records, read_bytes

log = logging.getLogger(__name__)

NOTICES_FILE = "notices.jsonl"
_KINDS = ("notice", "told", "place")


class NoticeFile:
    """The notices of one workspace; its writer holds the person's lock (the agent) or the
    folder's (a merge)."""

    def __init__(self, workspace_root: Path) -> None:
        self.path = Path(workspace_root) / NOTICES_FILE

    def add(self, to: str, text: str) -> str:
        ident = secrets.token_hex(8)
        self._append({"type": "notice", "id": ident, "to": to, "text": text})
        return ident

    def told(self, ident: str) -> None:
        self._append({"type": "told", "id": ident})

    def note_place(self, key: str, place: dict[str, str]) -> None:
        """Where `key` writes from, unless that is what is on file already."""
        if self.places().get(key) != place:
            self._append({"type": "place", "id": key, "key": key, "place": place})

    def pending(self, to: str | None = None) -> list[tuple[str, str, str]]:
        """(id, key, text) of every notice not told yet (for `to` only, if given), in order."""
        notices: dict[str, tuple[str, str, str]] = {}
        for record in self._records():
            if record["type"] == "notice" and isinstance(record.get("text"), str):
                if to is None or record.get("to") == to:
                    notices[record["id"]] = (record["id"], str(record.get("to")), record["text"])
            elif record["type"] == "told":
                notices.pop(record["id"], None)
        return list(notices.values())

    def places(self) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for record in self._records():
            place = record.get("place")
            if record["type"] == "place" and isinstance(place, dict):
                found[str(record.get("key"))] = {str(k): str(v) for k, v in place.items()}
        return found

    def _records(self) -> list[dict[str, Any]]:
        try:
            data = read_bytes(self.path)
        except FileNotFoundError:
            return []
        return [
            record
            for _, record in json_records(data.split(b"\n"))
            if record.get("type") in _KINDS and record.get("id")
        ]

    def _append(self, record: dict[str, Any]) -> None:
        append_line(self.path, json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
