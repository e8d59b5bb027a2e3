"""The file work of /link and /unlink: one person's workspaces merged into one, or split again.

Merging `member` into `into`'s workspace moves everything of the member over without losing
anything: MEMORY.md facts join the surviving MEMORY.md's sections (the version before is kept,
so /memory undo takes the merge back), HISTORY.md entries are merged by time, sessions, media
and earlier memory versions move, usage lines join, preferences the survivor has not chosen are
taken, reminders join (each keeps its own records). Each file is written atomically (or moved
by one rename) before the member's copy goes, and every step can run again without doing
anything twice, so a journal file beside the
workspaces (`.link-journal.json`, written first, removed last) is all a crash needs: the next
writer to open the folder (`finish_pending`) runs the step it names again to its end.

Splitting takes a key out of its person: a member leaves the table, and the key whose folder
holds the workspace hands the folder to the next member (one rename); either gets back what it
had before the link (memory.control.link_snapshots), never the others' memory.

In cluster mode the two workspaces may be on two workers: the one that stops writing a key packs
its folder (`pack`, a tar), and the worker of the person's partition merges it in (`absorb`,
journalled as a merge is) before it serves the person again (bot/cluster/people.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from memory.atomic import atomic_write_text, fsync_dir
from memory.control import history_merge, link_snapshots
from memory.control.notices import NOTICES_FILE
from memory.control.wipe import delete, hide
from memory.keys import decode_key
from memory.links import LinkTable
from memory.media import MEDIA_DIR
from memory.preferences import MEMORY_IN_GROUPS, MODEL, TIMEZONE, VOICE
from memory.reminders.records import DELIVERED, ReminderFile
from memory.safefs import make_private_dir, read_bytes
from memory.search import history_index, meaning
from memory.store import VERSIONS_DIR, merged_memory
from memory.usage import SPEECH_FILE, USAGE_FILE
from memory.workspace import IMPORTED_FILE, KEY_FILE, SESSIONS_DIR, Workspace, Workspaces

log = logging.getLogger(__name__)

JOURNAL_FILE = ".link-journal.json"
_MOVED_FOLDERS = (SESSIONS_DIR, MEDIA_DIR, VERSIONS_DIR)


@dataclass(frozen=True)
class Merged:
    """What a merge moved, for the answer."""

    facts: int = 0  # MEMORY.md items added to the survivor
    entries: int = 0  # HISTORY.md entries added
    files: int = 0  # sessions, media and versions moved


def merge(workspaces: Workspaces, table: LinkTable, member: str, into: str) -> Merged:
    """Join `member` to the person of `into`: its files into that workspace, then the table.
    What each side had before its first link is kept first (memory.control.link_snapshots),
    for the day it leaves again. The caller holds both people's files still (no turn of
    either runs)."""
    home = table.resolve(into)
    _write_journal(workspaces.base_dir, {"action": "merge", "member": member, "into": home})
    if table.resolve(member) != home:  # (run again after the table changed: kept already)
        link_snapshots.keep(workspaces, member, home)
        if not table.is_linked(home):
            link_snapshots.keep(workspaces, home, home)
    merged = Merged()
    if workspaces.exists(member):
        source = workspaces.get(member)
        merged = _merge_files(source, workspaces.get(home))
    if table.resolve(member) != home:
        table.link(member, home)
    workspaces.forget_user(member)
    hidden = hide(workspaces.root_of(member))
    if hidden is not None:
        delete(hidden)
    _remove_journal(workspaces.base_dir)
    return merged


def split(workspaces: Workspaces, table: LinkTable, member: str, *, reminders: bool = True) -> None:
    """Take `member` out of its person: it gets back what it had before the link (empty when
    no copy was kept), and the shared memory stays with the others. `reminders`: the ones it
    set go with it (not in cluster mode, where its folder may be another worker's)."""
    home = table.resolve(member)
    others = [key for key in table.members(member) if key != home]
    if member == home and not others:
        return  # linked to nobody
    heir = others[0] if member == home else ""
    step = {"action": "split", "member": member, "heir": heir, "home": home}
    _write_journal(workspaces.base_dir, step | ({} if reminders else {"reminders": "stay"}))
    _split(workspaces, table, member, heir, home, reminders=reminders)
    _remove_journal(workspaces.base_dir)


def _split(
    workspaces: Workspaces,
    table: LinkTable,
    member: str,
    heir: str,
    home: str,
    *,
    reminders: bool = True,
) -> None:
    """The steps of `split`, each of which can run again."""
    if heir:
        _hand_over(workspaces, member, heir)
        if table.resolve(heir) != heir:
            table.unlink(member, heir)
    elif table.resolve(member) != member:
        table.unlink(member)
    rest = heir or home
    if rest:
        link_snapshots.restore(workspaces, member, rest)
    workspaces.forget_user(member)
    if rest and reminders:
        _move_reminders(workspaces, member, rest, table.members(rest))
    if rest and table.members(rest) == [rest]:
        link_snapshots.drop_all(workspaces, rest)  # alone again: it keeps the whole memory


def finish_pending(workspaces: Workspaces, table: LinkTable) -> str | None:
    """Run to its end a merge or split that a crash interrupted; what it was, or None."""
    journal = _read_journal(workspaces.base_dir)
    if journal is None:
        return None
    action, member = journal.get("action"), journal.get("member")
    if action == "merge" and isinstance(member, str) and isinstance(journal.get("into"), str):
        merge(workspaces, table, member, journal["into"])
    elif action == "split" and isinstance(member, str) and isinstance(journal.get("heir"), str):
        home, stay = str(journal.get("home", "")), journal.get("reminders") == "stay"
        _split(workspaces, table, member, journal["heir"], home, reminders=not stay)
        _remove_journal(workspaces.base_dir)
    elif action == "absorb" and isinstance(journal.get("into"), str):
        _absorb_from(workspaces, workspaces.base_dir / str(journal.get("source")), journal["into"])
        member = journal["into"]
    else:
        log.error("%s names no merge or split; left alone", workspaces.base_dir / JOURNAL_FILE)
        return None
    log.info("finished the interrupted %s of %s", action, member)
    return f"{action} of {member}"


# ---- between workers (cluster mode) -------------------------------------------------------

ARRIVING_PREFIX = ".arriving-"
SHIPPING_PREFIX = ".shipping-"


def shipping_root(workspaces: Workspaces, key: str, action: str) -> Path:
    """Where the workspace of `key` waits, hidden, while it is packed for another worker: by
    its name, the next start knows whose it was and whether the table took the change."""
    return workspaces.base_dir / f"{SHIPPING_PREFIX}{action}-{workspaces.root_of(key).name}"


def finish_shipping(workspaces: Workspaces, table: LinkTable) -> int:
    """After a crash mid-shipment: a workspace whose change the table has (a joined key is a
    member now; a key that left holds nobody) is another worker's already, and goes; one
    whose change it has not goes back where it was. The number of folders put right."""
    done = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(workspaces.base_dir.iterdir()):
            if not entry.name.startswith(SHIPPING_PREFIX) or not entry.is_dir():
                continue
            action, _, folder = entry.name[len(SHIPPING_PREFIX) :].partition("-")
            key = decode_key(folder)
            if key is None:  # a shortened name: the key is kept inside
                with contextlib.suppress(OSError):
                    key = read_bytes(entry / KEY_FILE).decode("utf-8", "replace")
            if not key:
                continue
            # A joined key is a member once the table has the change; a key that left holds
            # nobody any more.
            taken = table.resolve(key) != key if action == "join" else table.members(key) == [key]
            if taken:
                delete(entry)
            elif not (workspaces.base_dir / folder).exists():
                os.rename(entry, workspaces.base_dir / folder)
            done += 1
    return done


def pack(root: Path) -> bytes:
    """A workspace folder as a tar (b"" when there is none); the temp files of a write are not
    part of it."""
    if not root.is_dir():
        return b""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or (path.name.startswith(".") and path.name.endswith(".tmp")):
                continue
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    return buffer.getvalue()


def absorb(workspaces: Workspaces, bundle: bytes, person: str) -> Merged:
    """Merge a packed workspace (another worker's, of a key that joined `person`) into the
    person's, as `merge` merges a local one; journalled, so a crash mid-way is finished by the
    next start. The bundle is unpacked with tarfile's "data" filter (no links, nothing outside
    the folder) after its digest was checked by the caller."""
    source = workspaces.base_dir / f"{ARRIVING_PREFIX}{uuid.uuid4().hex}"
    _write_journal(workspaces.base_dir, {"action": "absorb", "source": source.name, "into": person})
    make_private_dir(source)
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r") as tar:
        tar.extractall(source, filter="data")
    return _absorb_from(workspaces, source, person)


def absorb_folder(workspaces: Workspaces, source: Path, person: str) -> Merged:
    """Merge an unpacked workspace at `source` (a folder named `.arriving-…` beside the
    workspaces: an imported /export archive) into the person's, journalled as `absorb` is."""
    _write_journal(workspaces.base_dir, {"action": "absorb", "source": source.name, "into": person})
    return _absorb_from(workspaces, source, person)


def _absorb_from(workspaces: Workspaces, source: Path, person: str) -> Merged:
    merged = Merged()
    if source.name.startswith(ARRIVING_PREFIX) and source.is_dir():
        merged = _merge_files(Workspace(person, source), workspaces.get(person))
        workspaces.forget_user(person)
        delete(source)
    _remove_journal(workspaces.base_dir)
    return merged


# ---- merging, file by file -----------------------------------------------------------------


def _merge_files(source: Workspace, target: Workspace) -> Merged:
    facts = _merge_memory(source, target)
    entries = _merge_history(source, target)
    files = sum(_move_folder(source.root / name, target.root / name) for name in _MOVED_FOLDERS)
    _merge_usage(source.root / USAGE_FILE, target.root / USAGE_FILE)
    _merge_usage(source.root / SPEECH_FILE, target.root / SPEECH_FILE)  # spoken: alike
    _merge_usage(source.reminders.path, target.reminders.path)  # records: the same union
    _merge_usage(source.root / NOTICES_FILE, target.root / NOTICES_FILE)  # and again
    _merge_usage(source.root / IMPORTED_FILE, target.root / IMPORTED_FILE)  # imports' ids
    _merge_preferences(source, target)
    return Merged(facts, entries, files)


def _merge_memory(source: Workspace, target: Workspace) -> int:
    theirs = source.memory.read()
    if theirs.strip():
        merged, added = merged_memory(target.memory.read(), theirs)
        target.memory.write(merged)  # keeps the version before: /memory undo
    else:
        added = 0
    with contextlib.suppress(FileNotFoundError):
        os.unlink(source.memory_path)
    return added


def _merge_history(source: Workspace, target: Workspace) -> int:
    """By time, never whole in RAM (memory.control.history_merge)."""
    if not source.history_path.exists():
        return 0
    added = history_merge.merge_into(source.history_path, target.history_path)
    if added:
        history_index.drop(target.history_path)  # rebuilt from the merged text when searched
    # the vectors of both, at the merged text's offsets (the missing embedded at first need)
    meaning.prune(target.history_path, extra=meaning.load(source.history_path))
    os.unlink(source.history_path)
    history_index.drop(source.history_path)
    meaning.drop(source.history_path)
    return added


def _move_folder(source: Path, target: Path) -> int:
    """Move every file of `source` into `target` by rename; a name the target holds already
    is the same content (media by hash) or an older copy, and the source's is dropped."""
    try:
        names = sorted(os.listdir(source))
    except FileNotFoundError:
        return 0
    make_private_dir(target)
    moved = 0
    for name in names:
        if name.startswith(".") and name.endswith(".tmp"):
            continue
        if (target / name).exists():
            log.warning("merge: %s exists in both workspaces; kept the surviving one", name)
            continue
        os.rename(source / name, target / name)
        moved += 1
    fsync_dir(target)
    return moved


def _merge_usage(source: Path, target: Path) -> None:
    theirs = _text(source)
    if theirs:
        ours = _text(target)
        present = set(ours.splitlines())
        lines = [line for line in theirs.splitlines() if line.strip() and line not in present]
        if lines:
            body = ours if not ours or ours.endswith("\n") else ours + "\n"
            atomic_write_text(target, body + "\n".join(lines) + "\n")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(source)


def _merge_preferences(source: Workspace, target: Workspace) -> None:
    for name in (MEMORY_IN_GROUPS, TIMEZONE, VOICE, MODEL):
        theirs = source.preferences.get(name)
        if theirs is not None and target.preferences.get(name) is None:
            target.preferences.set(name, theirs)


# ---- splitting -----------------------------------------------------------------------------


def _hand_over(workspaces: Workspaces, member: str, heir: str) -> None:
    """The workspace folder of `member` becomes `heir`'s (one rename; again: a no-op)."""
    old, new = workspaces.root_of(member), workspaces.root_of(heir)
    workspaces.forget_user(member)
    workspaces.forget_user(heir)
    if old.is_dir() and not new.exists():
        os.rename(old, new)
        fsync_dir(new.parent)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(new / KEY_FILE)  # a shortened folder name's key is written again by get()
    workspaces.get(heir)


def _move_reminders(workspaces: Workspaces, member: str, rest: str, staying: list[str]) -> None:
    """The reminders `member` set while linked follow it out: those asked on its platform (the
    `set` record says where), unless another account that stays is on that platform too (then
    whose they are is not known, and they stay). Appended to its file first, then taken out of
    the others' (one atomic rewrite); again after a crash, what it holds already is skipped."""
    platform = _platform(member)
    if any(_platform(key) == platform for key in staying):
        return
    source = ReminderFile(workspaces.root_of(rest))
    ours = [r for r in source.load() if r.record.get("platform") == platform]
    if not ours:
        return
    make_private_dir(workspaces.root_of(member))
    target = ReminderFile(workspaces.root_of(member))
    held = {r.id for r in target.load()}
    for reminder in ours:
        if reminder.id in held or not reminder.pending:
            continue  # moved already; or done, and its text goes from the others' file
        target.append(reminder.record)
        if reminder.delivered:  # a repeating one's next time counts from the last sent
            target.append({"type": DELIVERED, "id": reminder.id, "due": reminder.delivered[-1]})
    source.remove({r.id for r in ours})


def _platform(key: str) -> str:
    """`telegram` of `telegram-42` (keys are `<platform>-<user id>`: bot/keys.py)."""
    return key.partition("-")[0]


# ---- the journal ---------------------------------------------------------------------------


def _text(path: Path) -> str:
    try:
        return read_bytes(path).decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _write_journal(base_dir: Path, step: dict[str, str]) -> None:
    atomic_write_text(base_dir / JOURNAL_FILE, json.dumps(step, ensure_ascii=False) + "\n")


def _read_journal(base_dir: Path) -> dict[str, str] | None:
    try:
        value = json.loads(read_bytes(base_dir / JOURNAL_FILE))
    except (FileNotFoundError, NotADirectoryError):  # no folder (yet): no merge to finish
        return None
    except ValueError:
        return None  # written atomically: only a hand edit gets here
    return value if isinstance(value, dict) else None


def _remove_journal(base_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(base_dir / JOURNAL_FILE)
    fsync_dir(base_dir)
