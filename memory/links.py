"""The link table: which user keys are one person, and whose workspace they all read and write.

`/link` joins a platform's user key (e.g. `discord-7`) to another's workspace (e.g. that of
`telegram-42`). The table maps every joined key to the key whose folder holds the person's
memory; a key not in it is its own person. It is the one place the rest of the code asks
(`resolve`), so everything else keeps working with keys.

One small JSON file beside the workspaces (`.links.json`, hidden, so never taken for a
workspace), replaced atomically: a crash leaves the table before or after a change. Only the
folder's writer changes it; readers (the operator's `lightgrep links`) load it each time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from memory.atomic import atomic_write_text
from memory.safefs import make_private_dir, read_bytes

log = logging.getLogger(__name__)

LINKS_FILE = ".links.json"
LINKS_EXPORT = "links.json"  # the person's links, in their /export archive


class LinkError(ValueError):
    """A link that cannot be made or removed; the message says why, for the person."""


class LinkTable:
    """member key → the workspace key of its person, kept in `base_dir/.links.json`."""

    def __init__(self, base_dir: Path) -> None:
        self.path = Path(base_dir) / LINKS_FILE
        self._links: dict[str, str] | None = None

    def resolve(self, user_key: str) -> str:
        """The key of the workspace `user_key` reads and writes (itself unless linked)."""
        return self._load().get(user_key, user_key)

    def members(self, user_key: str) -> list[str]:
        """Every key of the person `user_key` belongs to, the workspace's key first."""
        home = self.resolve(user_key)
        others = sorted(key for key, into in self._load().items() if into == home)
        return [home, *others]

    def is_linked(self, user_key: str) -> bool:
        """Whether the key shares a workspace with any other key."""
        return len(self.members(user_key)) > 1

    def all(self) -> dict[str, str]:
        """A copy of the whole table (member → workspace key)."""
        return dict(self._load())

    def link(self, member: str, into: str) -> None:
        """Join `member` (a key of its own, linked to nobody) to the person of `into`."""
        self._change(lambda links: with_link(links, member, into))

    def unlink(self, member: str, heir: str | None = None) -> None:
        """Separate `member` from its person. When `member` is the workspace's own key, `heir`
        (another member, whose key the workspace folder now has) becomes the others' key."""
        self._change(lambda links: without_link(links, member, heir))

    def drop_person(self, user_key: str) -> list[str]:
        """Remove every link of the person (after /wipe); the keys that were linked."""
        home = _resolve(self._load(), user_key)
        dropped = [k for k, v in self._load().items() if v == home]
        if dropped:
            self._change(lambda links: {k: v for k, v in links.items() if v != home})
        return dropped

    def replace(self, links: Mapping[str, str]) -> None:
        """Write a whole table (from the cluster's shared copy)."""
        self._write(dict(links))

    def _change(self, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """Apply `change` (a pure function of the table; LinkError to refuse) and write the
        result. The cluster's table (bot/cluster/people.py) applies it to the shared copy."""
        self._write(change(self._load()))

    def reload(self) -> None:
        """Read the file again at the next question (another process changed it)."""
        self._links = None

    def _load(self) -> dict[str, str]:
        if self._links is None:
            self._links = _read(self.path)
        return self._links

    def _write(self, links: dict[str, str]) -> None:
        make_private_dir(self.path.parent)
        body = {"version": 1, "links": dict(sorted(links.items()))}
        atomic_write_text(self.path, json.dumps(body, indent=1, ensure_ascii=False) + "\n")
        self._links = links


def _resolve(links: Mapping[str, str], key: str) -> str:
    return links.get(key, key)


def with_link(links: dict[str, str], member: str, into: str) -> dict[str, str]:
    home = _resolve(links, into)
    if member == home:
        raise LinkError("a key cannot be linked to itself")
    if member in links or member in links.values():
        raise LinkError(f"{member} is linked already; unlink it first")
    return {**links, member: home}


def without_link(links: dict[str, str], member: str, heir: str | None) -> dict[str, str]:
    home = _resolve(links, member)
    if member != home:
        return {k: v for k, v in links.items() if k != member}
    if heir is None or links.get(heir) != home:
        raise LinkError(f"{member} holds the workspace: name the member that takes it over")
    moved = {k: heir for k, v in links.items() if v == home and k != heir}
    return moved | {k: v for k, v in links.items() if v != home}


def _read(path: Path) -> dict[str, str]:
    try:
        raw = json.loads(read_bytes(path))
    except FileNotFoundError:
        return {}
    except ValueError:
        # Written atomically, so only a hand edit gets here: refuse to guess who is whom.
        raise LinkError(f"{path} is not valid JSON; fix or remove it") from None
    links = raw.get("links") if isinstance(raw, dict) else None
    if not isinstance(links, dict):
        raise LinkError(f"{path} holds no links object; fix or remove it")
    return {str(k): str(v) for k, v in links.items() if isinstance(k, str) and isinstance(v, str)}


def links_json(members: list[str]) -> bytes:
    """The person's links as /export writes them: the workspace's key, then the others."""
    body = {"workspace": members[0], "linked": members[1:]} if members else {}
    return (json.dumps(body, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
