"""One folder per user key: MEMORY.md, HISTORY.md, sessions/ and the rest of what is kept about
them (preferences, usage, media, reminders)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from memory.atomic import atomic_write_text, remove_stale_temp_files
from memory.keys import decode_key, encode_key, is_hashed_name
from memory.media import MEDIA_DIR, MediaStore
from memory.preferences import PREFERENCES_FILE, Preferences
from memory.reminders.records import REMINDERS_FILE, ReminderFile
from memory.safefs import is_link, make_private_dir, read_bytes
from memory.session import SessionStore
from memory.store import HISTORY_FILE, MEMORY_FILE, VERSIONS_DIR, MemoryStore
from memory.usage import SPEECH_FILE, USAGE_FILE

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)

KEY_FILE = ".key"
SESSIONS_DIR = "sessions"
IMPORTED_FILE = "imported.jsonl"  # the conversations imported (memory/importing/history.py)
PRE_LINK_DIR = ".pre-link"  # while linked: what each account had before (control/link_snapshots)
# Every name of a workspace that the bot opens; none of them may be a link.
FILES = (
    MEMORY_FILE,
    HISTORY_FILE,
    KEY_FILE,
    PREFERENCES_FILE,
    USAGE_FILE,
    SPEECH_FILE,
    REMINDERS_FILE,
    IMPORTED_FILE,
)
FOLDERS = (SESSIONS_DIR, VERSIONS_DIR, MEDIA_DIR)


class WorkspaceError(ValueError):
    """A user key that cannot be given a workspace safely."""


class UnsafeWorkspaceError(WorkspaceError):
    """A workspace holding a symbolic link: refused whole until the operator removes the link,
    since following it would read or write a file outside the workspace."""


class Workspace:
    """Everything the bot keeps about one user, in one folder."""

    def __init__(self, user_key: str, root: Path, keep_memory_versions: int = 10) -> None:
        self.user_key = user_key
        self.root = root
        self.memory = MemoryStore(root, keep_versions=keep_memory_versions)
        self.sessions = SessionStore(root / SESSIONS_DIR)
        self.preferences = Preferences(root)
        self.media = MediaStore(root)
        self.reminders = ReminderFile(root)
        self._memory_lock: asyncio.Lock | None = None

    @property
    def memory_lock(self) -> asyncio.Lock:
        """One writer of MEMORY.md at a time: the consolidator holds it across read → LLM →
        write, so two sessions of one user cannot overwrite each other's update. Made on first
        use: a command that only reads (`lightgrep memory`) then never imports asyncio (tens of
        milliseconds of its start-up)."""
        if self._memory_lock is None:
            import asyncio

            self._memory_lock = asyncio.Lock()
        return self._memory_lock

    @property
    def memory_path(self) -> Path:
        return self.memory.memory_path

    @property
    def history_path(self) -> Path:
        return self.memory.history_path

    @property
    def sessions_dir(self) -> Path:
        return self.sessions.sessions_dir


class Workspaces:
    """The workspaces folder; hands out one Workspace object per user key.

    Only the bot, which holds the folder lock (memory.folder_lock), is a `writer`: its get()
    creates a user's folders, records the key of a shortened folder name and sweeps the temp
    files a crash left behind. Anyone else (the operator commands, run beside a live bot) opens
    it with writer=False: get() then only opens what exists and writes nothing, since a sweep
    could delete the bot's temp file between its write and its rename.
    """

    def __init__(
        self, base_dir: Path, keep_memory_versions: int = 10, *, writer: bool = True
    ) -> None:
        self.base_dir = Path(base_dir)
        self.keep_memory_versions = keep_memory_versions
        self.writer = writer
        self._cache: dict[str, Workspace] = {}

    def get(self, user_key: str) -> Workspace:
        """The user's workspace; a writer creates its folders on first use."""
        workspace = self._cache.get(user_key)
        if workspace is None:
            root = self._root_for(user_key)
            _refuse_links(root)
            workspace = Workspace(user_key, root, self.keep_memory_versions)
            if self.writer:
                make_private_dir(root)
                make_private_dir(workspace.sessions_dir)
                remove_stale_temp_files(root)  # a crash mid-replace of MEMORY.md leaves one
            if is_hashed_name(root.name):
                self._check_key(root, user_key)
            self._cache[user_key] = workspace
        return workspace

    def cached(self, user_key: str) -> Workspace | None:
        """The user's Workspace if it is loaded (never loads or creates one)."""
        return self._cache.get(user_key)

    def loaded(self) -> list[str]:
        """The user keys whose Workspace is held in RAM."""
        return list(self._cache)

    def forget_user(self, user_key: str) -> None:
        """Drop the cached Workspace (after a wipe the next get() starts from the disk)."""
        self._cache.pop(user_key, None)

    def root_of(self, user_key: str) -> Path:
        """Where the user's workspace is or would be (checked to lie inside the folder)."""
        return self._root_for(user_key)

    def exists(self, user_key: str) -> bool:
        """Whether the user has a workspace already (looking never creates one)."""
        return (self.base_dir / encode_key(user_key)).is_dir()

    def user_keys(self) -> Iterator[str]:
        """The keys of every existing workspace (a hashed folder name is read from its .key)."""
        if not self.base_dir.is_dir():
            return
        for entry in sorted(self.base_dir.iterdir()):
            if not entry.is_dir() or entry.name.startswith("."):
                continue  # hidden: e.g. the remnant of a wipe, never a workspace
            key = decode_key(entry.name)
            if key is None:
                with contextlib.suppress(OSError):
                    key = read_bytes(entry / KEY_FILE).decode("utf-8", "replace")
            if key:
                yield key

    def _root_for(self, user_key: str) -> Path:
        """base_dir/encode_key(user_key), refused unless it really resolves inside base_dir."""
        if self.writer:
            make_private_dir(self.base_dir)
        base = self.base_dir.resolve()
        root = self.base_dir / encode_key(user_key)
        if root.resolve().parent != base:
            raise WorkspaceError(f"workspace for {user_key!r} would lie outside {base}")
        return root

    def _check_key(self, root: Path, user_key: str) -> None:
        """A shortened folder name cannot be decoded, so the full key is kept beside it (by a
        writer); a folder whose recorded key is another one is refused."""
        key_file = root / KEY_FILE
        wanted = user_key.encode("utf-8", "surrogatepass")
        try:
            recorded = read_bytes(key_file)
        except FileNotFoundError:
            if self.writer:
                atomic_write_text(key_file, wanted)
            return
        if recorded != wanted:
            raise WorkspaceError(f"workspace folder {root.name} already belongs to another key")


def _refuse_links(root: Path) -> None:
    """Refuse a workspace that is, or holds, a link where the bot reads or writes (the folder,
    its files, sessions/, .memory_versions/, media/ and what is in them), saying where in the
    log."""
    found = [root] if is_link(root) else []
    if not found:
        found = [root / name for name in (*FILES, *FOLDERS) if is_link(root / name)]
    if not found:
        for name in FOLDERS:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                found += [entry for entry in (root / name).iterdir() if is_link(entry)]
    if found:
        log.error(
            "refusing the workspace %s: %s is a symbolic or hard link (remove it; the bot "
            "never follows links in a workspace)",
            root,
            ", ".join(str(path) for path in found),
        )
        raise UnsafeWorkspaceError(f"workspace folder {root.name} holds a link")
