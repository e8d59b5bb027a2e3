"""Ranking by meaning: passages, their vectors beside HISTORY.md, and the fusion with keywords.

Keyword search misses an entry that shares no word with the question ("what is her identity?"
-> "a transgender woman"). An embedding model places both near each other. This module does
no network I/O: the bot hands it an ``Embedder`` (bot/llm/embeddings.py speaks to any
OpenAI-compatible /v1/embeddings endpoint). Entries are cut into passages of about
``PASSAGE_WORDS`` words; an entry's similarity to a question is its best passage's. The two
rankings are fused by reciprocal rank (``fuse``), so keyword search stays the floor: when the
vectors are missing or the endpoint fails, the keyword ranking is returned as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import queue
import re
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from memory.atomic import PRIVATE_FILE_MODE
from memory.safefs import append_all, open_binary, open_fd, read_bytes
from memory.threads import polite
from memory.usage import UsageLog

log = logging.getLogger(__name__)

PASSAGE_WORDS = 150
# Reciprocal-rank fusion: score = 1/(K + keyword rank) + WEIGHT/(K + meaning rank). K and WEIGHT
# were chosen on the tuning halves of bench/recall_table.py's sets (docs/benchmarks.md): the
# keyword ranking leads, and what only meaning finds comes after a short keyword list (a
# question sharing no word with its entry). Equal weights (K 20) lost 8-20 points of R@5 there.
K = 5
WEIGHT = 0.1
DEPTH = 30  # entries of each ranking fused (at least the page asked for)
LOADED = 4  # histories whose vectors stay in RAM between searches
DOWN_FOR_S = 60.0  # after a failed query embedding, keywords alone this long (no waiting)
USAGE_FILE = "embeddings.jsonl"
Kind = Literal["query", "passage"]


class EmbedError(Exception):
    """The endpoint gave no vectors (down, slow, refused); the message is fit for the log."""


@dataclass(frozen=True)
class Embedded:
    vectors: list[list[float]]
    tokens: int  # as the endpoint counted them (0 when it does not say)


class Embedder(Protocol):
    """What memory/ needs of an embeddings endpoint; the bot gives one (bot/llm/embeddings.py)."""

    model: str
    batch_size: int

    def embed(
        self, texts: Sequence[str], kind: Kind, *, timeout_s: float | None = None
    ) -> Embedded:
        """One vector per text (``kind``: a question, or a passage of an entry); blocking."""
        ...


_STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]\s*")


def passages(entry: str, size: int = PASSAGE_WORDS) -> list[str]:
    """The entry without its stamp, cut into near-equal runs of at most ``size`` words."""
    words = _STAMP.sub("", entry, count=1).split()
    if not words:
        return [""]
    n = math.ceil(len(words) / size)
    step = math.ceil(len(words) / n)
    return [" ".join(words[i : i + step]) for i in range(0, len(words), step)]


# --- the vectors beside HISTORY.md ---------------------------------------------------------------
# A header (magic, the model's name and the vectors' size as one JSON line), then one record per
# entry, appended as entries are embedded: the entry's SHA-1, where it lies in HISTORY.md
# (offset, length), its passages' count, and their vectors (float16). Vectors are found by the
# entry's text, so a rewrite of HISTORY.md (/forget, /link) keeps those of the entries it kept
# (`sync` rewrites the file, atomically, for the new offsets). Derived (a name ending in .index:
# /export and backups leave it out) and safe to delete.

MAGIC = b"LGVEC1\n"
_RECORD = struct.Struct("<20sQIH")  # sha1, offset, length, passages
_ENTRY_START = re.compile(rb"(?:^|\n\n)(?=\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\])")


def vectors_path(history: Path) -> Path:
    """Where the vectors of ``history`` live: beside it, hidden (per workspace)."""
    return history.with_name(f".{history.name}.meaning.index")


def entries_of(data: bytes) -> list[tuple[int, int, bytes]]:
    """(offset, length, sha1) of each entry of HISTORY.md's bytes, as the search reads them."""
    starts = [m.end() for m in _ENTRY_START.finditer(data)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    found = []
    for i, start in polite(enumerate(starts)):
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        text = data[start:end].rstrip()
        if text.strip():
            found.append((start, len(text), hashlib.sha1(text).digest()))
    return found


@dataclass
class Vectors:
    """One history's vectors as loaded: records in file order, passages stacked."""

    model: str
    dim: int
    records: list[tuple[bytes, int, int]] = field(default_factory=list)  # sha1, offset, length
    blocks: list[Any] = field(default_factory=list)  # per record, its passages' vectors
    whole: bool = True  # the file ends with a whole record (no torn append to write after)

    def matrix(self) -> tuple[Any, Any]:
        """All passages' vectors (float32) and, per passage, its record's number."""
        import numpy as np

        if not self.blocks:
            return np.zeros((0, self.dim), np.float32), np.zeros(0, np.int64)
        owner = np.repeat(np.arange(len(self.blocks)), [len(b) for b in self.blocks])
        return np.vstack(self.blocks).astype(np.float32), owner


def _header(model: str, dim: int) -> bytes:
    import json

    return MAGIC + json.dumps({"model": model, "dim": dim}).encode() + b"\n"


def _record(sha: bytes, offset: int, length: int, block: Any) -> bytes:
    import numpy as np

    data = np.asarray(block, dtype="<f2")
    return _RECORD.pack(sha, offset, length, len(data)) + data.tobytes()


def load(history: Path) -> Vectors | None:
    """The vectors file of ``history``, a torn last record left out; None when absent or not one."""
    import json

    try:
        data = read_bytes(vectors_path(history))
        import numpy as np
    except (FileNotFoundError, ImportError):
        return None
    if not data.startswith(MAGIC) or b"\n" not in data[len(MAGIC) :]:
        return None
    line_end = data.index(b"\n", len(MAGIC))
    try:
        head = json.loads(data[len(MAGIC) : line_end])
        vectors = Vectors(str(head["model"]), int(head["dim"]))
    except (ValueError, KeyError, TypeError):
        return None
    pos, size = line_end + 1, 2 * vectors.dim
    while pos + _RECORD.size <= len(data):
        sha, offset, length, n = _RECORD.unpack_from(data, pos)
        end = pos + _RECORD.size + n * size
        if end > len(data):
            break  # torn by a crash mid-append: embedded again
        block = np.frombuffer(data, "<f2", n * vectors.dim, pos + _RECORD.size)
        vectors.records.append((sha, offset, length))
        vectors.blocks.append(block.reshape(n, vectors.dim))
        pos = end
    vectors.whole = pos == len(data)
    return vectors


def _head(path: Path) -> tuple[str, int] | None:
    """The model and size a vectors file was written with (None: no such file, or not one)."""
    import json

    try:
        with open_binary(path) as f:
            first = f.read(4096)
    except FileNotFoundError:
        return None
    if not first.startswith(MAGIC) or b"\n" not in first[len(MAGIC) :]:
        return None
    try:
        head = json.loads(first[len(MAGIC) : first.index(b"\n", len(MAGIC))])
        return str(head["model"]), int(head["dim"])
    except (ValueError, KeyError, TypeError):
        return None


def _rewrite(history: Path, vectors: Vectors, more: Sequence[bytes] = ()) -> None:
    from memory.atomic import atomic_write_chunks

    chunks = [_header(vectors.model, vectors.dim)]
    for (sha, offset, length), block in zip(vectors.records, vectors.blocks, strict=True):
        chunks.append(_record(sha, offset, length, block))
    atomic_write_chunks(vectors_path(history), [*chunks, *more])


def drop(history: Path) -> None:
    """Delete the vectors of ``history`` (rebuilt at the next need)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(vectors_path(history))


def prune(history: Path, extra: Vectors | None = None) -> Vectors | None:
    """Keep only the vectors of entries HISTORY.md still holds, at their offsets now (after
    /forget: the forgotten entry's vector is in no file; after /link: ``extra``, the other
    person's vectors, merged in). Rewrites the file only when something changed."""
    if not vectors_path(history).exists() and extra is None:
        return None
    try:
        import numpy  # noqa: F401
    except ImportError:  # the embeddings extra is gone: the vectors cannot be read, nor kept
        drop(history)
        return None
    vectors = load(history)
    if extra is not None and (vectors is None or vectors.model == extra.model):
        vectors = vectors or Vectors(extra.model, extra.dim)
        vectors.records += extra.records
        vectors.blocks += extra.blocks
        changed = bool(extra.records)
    else:
        changed = False
    if vectors is None:
        return None
    try:
        current = entries_of(read_bytes(history))
    except FileNotFoundError:
        drop(history)
        return None
    return _kept(history, vectors, current, changed)


def _kept(
    history: Path, vectors: Vectors, current: list[tuple[int, int, bytes]], changed: bool
) -> Vectors:
    """``vectors`` less those of entries gone, at the entries' offsets now; written if changed."""
    by_sha = {sha: i for i, (sha, _, _) in enumerate(vectors.records)}
    kept = Vectors(vectors.model, vectors.dim)
    for offset, length, sha in current:
        i = by_sha.get(sha)
        if i is not None:
            kept.records.append((sha, offset, length))
            kept.blocks.append(vectors.blocks[i])
    if changed or kept.records != vectors.records or not vectors.whole:
        _rewrite(history, kept)
    return kept


# --- ranking -----------------------------------------------------------------------------------


def fuse(
    keyword: Sequence[str], meaning: Sequence[str], k: float = K, weight: float = WEIGHT
) -> list[str]:
    """Two rankings of the same keys, best first, fused by reciprocal rank: a key both rank
    high comes first; ties keep the keyword ranking's order."""
    score: dict[str, float] = {}
    for rank, key in enumerate(keyword, 1):
        score[key] = score.get(key, 0.0) + 1.0 / (k + rank)
    for rank, key in enumerate(meaning, 1):
        score[key] = score.get(key, 0.0) + weight / (k + rank)
    order: dict[str, int] = {}
    for key in [*keyword, *meaning]:
        order.setdefault(key, len(order))
    return sorted(score, key=lambda key: (-round(score[key], 12), order[key]))


_LOCKS = [threading.Lock() for _ in range(64)]


def _lock(history: Path) -> threading.Lock:
    """One of a fixed few locks, by the history's path: a write of its vectors at a time."""
    return _LOCKS[hash(str(history)) % len(_LOCKS)]


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


Progress = Callable[[int, int], None]  # (entries embedded, entries to embed)


class Meaning:
    """Ranking by meaning for every history of the process, with the ``Embedder`` it is given.

    Entries are embedded in one background thread, batched (``schedule``: after a write of
    HISTORY.md, and at the first search of a history with none), each batch's tokens counted
    in the workspace's embeddings.jsonl. A question is embedded within ``timeout_s``; when the
    endpoint fails, ``rank`` answers None at once for ``DOWN_FOR_S`` (the search then ranks by
    keywords alone) and the log says so once until it answers again."""

    def __init__(self, embedder: Embedder, *, timeout_s: float = 5.0) -> None:
        self.embedder = embedder
        self.timeout_s = timeout_s
        self._down_until = 0.0
        self._said_down = False
        self._queue: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._pending: set[Path] = set()
        self._pending_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # The vectors of the histories searched last, as matrices (a 100 MiB history's are
        # ~170 MB as float32): at most LOADED of them, the least recently searched dropped.
        self._loaded: OrderedDict[Path, tuple[Any, Vectors, Any, Any]] = OrderedDict()
        self._loaded_lock = threading.Lock()
        self._synced: dict[Path, Any] = {}  # a history's identity when last brought up to date

    # --- embedding entries ---

    def schedule(self, history: Path) -> None:
        """Embed ``history``'s entries that have no vectors, in the background (never waits)."""
        with self._pending_lock:
            if history in self._pending:
                return
            self._pending.add(history)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="embeddings", daemon=True)
                self._thread.start()
        self._queue.put(history)

    def close(self) -> None:
        """Stop the background thread after the history it is embedding."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)

    def _work(self) -> None:
        while (history := self._queue.get()) is not None:
            with self._pending_lock:
                self._pending.discard(history)
            try:
                self.index(history)
            except EmbedError as exc:
                self._fail(str(exc))
            except (OSError, ValueError) as exc:
                log.warning("embeddings of %s not brought up to date: %s", history.parent.name, exc)

    def index(self, history: Path, progress: Progress | None = None) -> int:
        """Bring the vectors of ``history`` up to date (blocking): a model other than the
        embedder's means all again; returns how many entries were embedded."""
        model = self.embedder.model
        with _lock(history):
            seen = _identity(history)
            if seen is None:
                drop(history)
                return 0
            old = load(history)
            if old is not None and old.model != model:
                drop(history)
                old = None
            data = read_bytes(history)
            current = entries_of(data)
            kept = _kept(history, old, current, False) if old is not None else None
        have = {sha for sha, _, _ in kept.records} if kept else set()
        missing = [e for e in current if e[2] not in have]
        del current, old
        done = 0
        batch: list[tuple[int, int, bytes, list[str]]] = []
        size = 0
        for offset, length, sha in missing:
            parts = passages(data[offset : offset + length].decode("utf-8", "replace"))
            batch.append((offset, length, sha, parts))
            size += len(parts)
            if size >= self.embedder.batch_size:
                if not self._embed_batch(history, seen[0], batch, fresh=kept is None and not done):
                    return done
                done += len(batch)
                if progress:
                    progress(done, len(missing))
                batch, size = [], 0
        if batch:
            if not self._embed_batch(history, seen[0], batch, fresh=kept is None and not done):
                return done
            done += len(batch)
            if progress:
                progress(done, len(missing))
        self._synced[history] = seen
        return done

    def _embed_batch(
        self, history: Path, ino: int, batch: list[tuple[int, int, bytes, list[str]]], fresh: bool
    ) -> bool:
        texts = [p for *_, parts in batch for p in parts]
        got = self.embedder.embed(texts, "passage")
        if len(got.vectors) != len(texts):
            raise EmbedError(f"{len(got.vectors)} vectors for {len(texts)} passages")
        # Counted once the endpoint answered (spent even if the history changed meanwhile), and
        # before the vectors are written: whoever sees them finds their tokens counted.
        self._count(history, got.tokens)
        model, dim = self.embedder.model, len(got.vectors[0])
        records, at = [], 0
        for offset, length, sha, parts in batch:
            records.append(_record(sha, offset, length, got.vectors[at : at + len(parts)]))
            at += len(parts)
        with _lock(history):
            now = _identity(history)
            if now is None or now[0] != ino:
                self.schedule(history)  # rewritten meanwhile (/forget, /link): again from it
                return False
            path = vectors_path(history)
            # index() left the file whole (and only this thread appends): its header suffices
            if fresh or _head(path) != (model, dim):
                from memory.atomic import atomic_write_chunks

                atomic_write_chunks(path, [_header(model, dim), *records])
            else:
                fd = open_fd(path, os.O_WRONLY | os.O_APPEND, PRIVATE_FILE_MODE)
                try:
                    append_all(fd, b"".join(records))
                finally:
                    os.close(fd)
        self._recovered()
        return True

    def _count(self, history: Path, tokens: int) -> None:
        try:
            UsageLog(history.parent / USAGE_FILE).record(tokens, 0, model=self.embedder.model)
        except OSError as exc:
            log.warning("embeddings' usage not counted: %s", exc)

    # --- asking ---

    def rank(self, history: Path, question: str, depth: int) -> list[tuple[int, int, bytes]] | None:
        """The ``depth`` entries (offset, length, sha1) nearest the question, best first; None
        when there is nothing to rank by (no vectors yet, another model, the endpoint failing),
        at once. Blocking (the question's embedding): off the loop."""
        import numpy as np

        if time.monotonic() < self._down_until:
            return None
        loaded = self._vectors(history)
        if self._synced.get(history) != _identity(history):
            self.schedule(history)
        if loaded is None:
            return None
        vectors, matrix, owner = loaded
        if not len(owner):
            return None
        try:
            got = self.embedder.embed([question], "query", timeout_s=self.timeout_s)
        except EmbedError as exc:
            self._fail(str(exc))
            return None
        self._recovered()
        sims = matrix @ np.asarray(got.vectors[0], np.float32)
        best = np.full(len(vectors.records), -np.inf, np.float32)
        np.maximum.at(best, owner, sims)
        top = np.argsort(-best, kind="stable")[:depth]
        return [(vectors.records[i][1], vectors.records[i][2], vectors.records[i][0]) for i in top]

    def _vectors(self, history: Path) -> tuple[Vectors, Any, Any] | None:
        seen = _identity(vectors_path(history))
        with self._loaded_lock:
            cached = self._loaded.pop(history, None)
        if seen is None:
            return None
        if cached is None or cached[0] != seen:
            vectors = load(history)  # (outside the lock: others' searches need not wait)
            if vectors is None:
                return None
            matrix, owner = vectors.matrix()
            cached = (seen, vectors, matrix, owner)
        with self._loaded_lock:
            self._loaded[history] = cached  # the most recent, last
            while len(self._loaded) > LOADED:
                self._loaded.popitem(last=False)
        if cached[1].model != self.embedder.model:
            return None  # being embedded again with this model (rank scheduled it)
        return cached[1], cached[2], cached[3]

    def _fail(self, why: str) -> None:
        self._down_until = time.monotonic() + DOWN_FOR_S
        if not self._said_down:
            self._said_down = True
            log.warning("embeddings endpoint failed (%s): search ranks by keywords alone", why)

    def _recovered(self) -> None:
        if self._said_down:
            self._said_down = False
            log.info("embeddings endpoint answers again: search ranks by meaning too")


def read_entry(history: Path, offset: int, length: int, sha: bytes) -> str | None:
    """The entry at ``offset`` as the search shows it; None when HISTORY.md moved on since."""
    with open_binary(history) as f:
        f.seek(offset)
        raw = f.read(length)
    if hashlib.sha1(raw).digest() != sha:
        return None
    return raw.decode("utf-8", "replace").rstrip()


# The process's ranking by meaning: set by the bot when [search] embeddings is on.
current: Meaning | None = None


def install(meaning: Meaning | None) -> None:
    """Use ``meaning`` for every search and history write of this process (None: keywords)."""
    global current
    if current is not None and current is not meaning:
        current.close()
    current = meaning


def written(history: Path) -> None:
    """HISTORY.md was appended to (memory/store.py): its new entries embedded in the background."""
    if current is not None:
        current.schedule(history)
