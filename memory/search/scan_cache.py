"""What scanning HISTORY.md found for a keyword, remembered until the file changes.

A derived index, never the truth: an entry is keyed by the file's identity and version (device,
inode, size, modification and change times, and its last 4 KiB) and dropped as soon as any of
them differs, so an append, an atomic rewrite or an edit means a fresh scan. It is never
required (a miss scans the file, as without it) and bounded: at most ``MAX_ROWS`` matching
entries in all, the least recently used keywords evicted first. It pays off where people
repeat themselves: ``/recall … --page 2`` runs the same query again, and a question's keywords
recur in the next one.

``QueryCache`` remembers, the same way, the tally of a whole query (its few candidates and
counts, not its hits): asking the same again, or its next page, then merges nothing.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory.safefs import open_binary

__all__ = ["MAX_ROWS", "QueryCache", "ScanCache", "file_version"]

MAX_ROWS = 400_000  # matching entries kept in all: roughly 70 MB at the very most

Version = tuple[int, int, int, int, int, bytes]
TAIL_BYTES = 4096
# One region of the file as scanned: (file offset, bytes, estimated entries).
Region = tuple[int, int, int]


def file_version(path: Path) -> Version:
    """What identifies one content of the file; raises FileNotFoundError.

    The tail guards against a rewrite in place to the same size within one clock tick, which
    the times alone would miss (appends and atomic replaces change size or inode anyway).
    """
    with open_binary(path) as f:  # never through a link, like every workspace file
        st = os.fstat(f.fileno())
        f.seek(max(0, st.st_size - TAIL_BYTES))
        tail = f.read(TAIL_BYTES)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, tail


@dataclass
class _File:
    version: Version
    chunk: int  # the chunk size the regions were cut with
    regions: list[Region]
    terms: dict[Hashable, list[Any]] = field(default_factory=dict)  # key -> hits per region


class ScanCache:
    """Per file and keyword, the hits of each region; thread-safe (searches run in threads)."""

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._files: dict[str, _File] = {}
        self._used: OrderedDict[tuple[str, Hashable], int] = OrderedDict()  # -> rows held
        self._rows = 0
        self.queries = QueryCache()  # whole queries' tallies, forgotten with the rest

    def lookup(
        self, path: Path, version: Version, chunk: int, keys: list[Hashable | None]
    ) -> tuple[list[Region] | None, list[list[Any] | None]]:
        """The regions of this version of the file, and each key's hits (None: not known)."""
        name = str(path)
        with self._lock:
            known = self._files.get(name)
            if known is None or known.version != version or known.chunk != chunk:
                if known is not None:
                    self._drop_file(name)
                return None, [None] * len(keys)
            hits = []
            for key in keys:
                found = known.terms.get(key) if key is not None else None
                if found is not None:
                    self._used.move_to_end((name, key))
                hits.append(found)
            return known.regions, hits

    def store(
        self,
        path: Path,
        version: Version,
        chunk: int,
        regions: list[Region],
        key: Hashable,
        hits: list[Any],
        rows: int,
    ) -> None:
        """Remember one key's hits (per region) for this version of the file, if they fit."""
        if rows > self.max_rows:
            return
        name = str(path)
        with self._lock:
            known = self._files.get(name)
            if known is None or known.version != version or known.chunk != chunk:
                if known is not None:
                    self._drop_file(name)
                known = self._files[name] = _File(version, chunk, regions)
            elif known.regions != regions:
                return
            if key in known.terms:
                return
            while self._rows + rows > self.max_rows and self._used:
                (old_name, old_key), _ = next(iter(self._used.items()))
                self._forget(old_name, old_key)
            known.terms[key] = hits
            self._used[(name, key)] = rows
            self._rows += rows

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._used.clear()
            self._rows = 0
        self.queries.clear()

    @property
    def rows(self) -> int:
        return self._rows

    def _forget(self, name: str, key: Hashable) -> None:
        self._rows -= self._used.pop((name, key))
        known = self._files.get(name)
        if known is not None:
            known.terms.pop(key, None)
            if not known.terms:
                del self._files[name]

    def _drop_file(self, name: str) -> None:
        for key in list(self._files[name].terms):
            self._forget(name, key)
        self._files.pop(name, None)


class QueryCache:
    """The last few queries' tallies per file version, least recently used dropped first."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._tallies: OrderedDict[tuple[str, Version, Hashable], Any] = OrderedDict()

    def get(self, path: Path, version: Version, key: Hashable) -> Any:
        with self._lock:
            found = self._tallies.get((str(path), version, key))
            if found is not None:
                self._tallies.move_to_end((str(path), version, key))
            return found

    def put(self, path: Path, version: Version, key: Hashable, tally: Any) -> None:
        with self._lock:
            name = str(path)
            for old in [k for k in self._tallies if k[0] == name and k[1] != version]:
                del self._tallies[old]  # an older content of the file: never asked again
            self._tallies[(name, version, key)] = tally
            while len(self._tallies) > self.size:
                self._tallies.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._tallies.clear()
