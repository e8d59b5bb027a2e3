"""A worker's claim on its partitions: one key per partition in a JetStream key-value bucket.

Two workers consuming one partition would break the order of its users' messages and write
their workspaces from two machines. So a worker creates `partition-<n>` (create fails if the key
exists) before it consumes partition n, renews it every third of the bucket's TTL, and deletes
it when it stops. A worker that dies stops renewing: its claim expires after the TTL.

The claim names the workspaces folder: the host, its path, and an id kept in the folder. A
worker that finds a claim of its own folder takes it over at once: it holds the folder's lock
(memory/folder_lock.py), so the process that made the claim is gone. All three must match: a
copy of the folder (same id) on another machine, or at another path, is another folder. Any
other claim is refused, naming its holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from bot.cluster.connection import ClusterError, Names, expiring_keys
from bot.cluster.partition import describe_ranges
from memory.atomic import atomic_write_text

log = logging.getLogger(__name__)

FOLDER_ID_FILE = ".lightgrep-worker-id"


class LeaseHeld(ClusterError):
    """Another worker serves a partition this one was asked for."""


@dataclass(frozen=True)
class Holder:
    """Who holds a claim, as the refusal names them."""

    folder_id: str
    host: str
    pid: int
    workspaces: str

    def describe(self) -> str:
        return f"worker pid {self.pid} on {self.host} (workspaces {self.workspaces})"

    def same_folder(self, other: Holder) -> bool:
        return (self.folder_id, self.host, self.workspaces) == (
            other.folder_id, other.host, other.workspaces,
        )  # fmt: skip

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @staticmethod
    def decode(data: bytes) -> Holder | None:
        try:
            return Holder(**json.loads(data))
        except (ValueError, TypeError):
            return None


def this_worker(workspaces: Path) -> Holder:
    """This process, on the workspaces folder it holds the lock of."""
    return Holder(folder_id(workspaces), socket.gethostname(), os.getpid(), str(workspaces))


def folder_id(workspaces: Path) -> str:
    """The folder's own id, made once (a copy keeps it; its host or path tells it apart)."""
    path = workspaces / FOLDER_ID_FILE
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text().strip()
        if text:
            return text
    made = uuid.uuid4().hex
    atomic_write_text(path, made + "\n")
    return made


class Leases:
    """The claims of one worker on its partitions."""

    def __init__(
        self, js: JetStreamContext, names: Names, partitions: list[int], me: Holder, ttl_s: float,
        replicas: int,
    ) -> None:  # fmt: skip
        self._js = js
        self._names = names
        self._partitions = partitions
        self._me = me
        self._ttl_s = ttl_s
        self._replicas = replicas
        self._kv: KeyValue | None = None
        self._revisions: dict[int, int] = {}
        self._taken_over: dict[str, list[int]] = {}  # holder → partitions taken from it

    def holds(self, partition: int) -> bool:
        """Whether our claim on it stands (made, or renewed, and not released)."""
        return partition in self._revisions

    async def acquire(self) -> None:
        """Claim every partition, or none: LeaseHeld names the holders of those taken."""
        kv = self._kv = await expiring_keys(
            self._js, self._names.lease_bucket, self._ttl_s, self._replicas
        )
        refused: dict[int, str] = {}
        self._taken_over = {}
        for partition in self._partitions:
            holder = await self._claim(kv, partition)
            if holder is not None:
                refused[partition] = holder
        for who, numbers in self._taken_over.items():
            log.info(
                "%s: took over the claim of %s, an earlier run on this folder (gone: we hold "
                "the folder's lock)",
                _partitions(numbers),
                who,
            )
        if refused:
            await self.release()
            by: dict[str, list[int]] = {}
            for partition, who in sorted(refused.items()):
                by.setdefault(who, []).append(partition)
            listing = "; ".join(f"{_partitions(ps)} by {who}" for who, ps in by.items())
            raise LeaseHeld(
                f"partitions already served by another worker: {listing}. Stop that worker "
                f"first, or if it has died, wait {self._ttl_s:.0f} s for its claim to expire"
            )

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew every claim until `stop`; ClusterError if one was lost to another worker."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._ttl_s / 3)
            if stop.is_set():
                return
            for partition in self._partitions:
                try:
                    await self._renew(partition)
                except LeaseHeld:
                    raise
                except Exception as exc:  # NATS away: the next round tries again
                    log.warning("could not renew the claim on partition %s (%s)", partition, exc)

    async def release(self) -> None:
        """Give up every claim (a clean stop): the next worker need not wait for the TTL."""
        if self._kv is None:
            return
        for partition, revision in list(self._revisions.items()):
            try:
                await self._kv.delete(self._key(partition), last=revision)
            except Exception as exc:  # it expires anyway
                log.warning("could not release partition %s (%s)", partition, exc)
            self._revisions.pop(partition, None)

    async def _claim(self, kv: KeyValue, partition: int) -> str | None:
        """Claim one partition; None if done, else who holds it."""
        key = self._key(partition)
        for _ in range(3):  # a claim that expires or goes between our calls: look again
            try:
                self._revisions[partition] = await kv.create(key, self._me.encode())
                return None
            except KeyWrongLastSequenceError:
                pass
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                continue
            holder = Holder.decode(entry.value or b"")
            if holder is not None and holder.same_folder(self._me):
                try:
                    self._revisions[partition] = await kv.update(
                        key, self._me.encode(), last=entry.revision
                    )
                    if holder != self._me:
                        self._taken_over.setdefault(holder.describe(), []).append(partition)
                    return None
                except KeyWrongLastSequenceError:
                    continue
            return holder.describe() if holder is not None else "an unknown process"
        return "another worker (its claim keeps changing)"

    async def _renew(self, partition: int) -> None:
        assert self._kv is not None
        key = self._key(partition)
        try:
            self._revisions[partition] = await self._kv.update(
                key, self._me.encode(), last=self._revisions[partition]
            )
            return
        except KeyWrongLastSequenceError:
            pass
        # Expired while NATS was away (or renewed by a run we do not know of): claim it anew.
        holder = await self._claim(self._kv, partition)
        if holder is not None:
            raise LeaseHeld(f"lost partition {partition} to {holder}")
        log.info("partition %s: claimed again after its claim expired", partition)

    @staticmethod
    def _key(partition: int) -> str:
        return f"partition-{partition}"


def _partitions(numbers: list[int]) -> str:
    return f"partition{'s' if len(numbers) > 1 else ''} {describe_ranges(numbers)}"
