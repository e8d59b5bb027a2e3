"""Who is whom across a cluster: the link table, the /link codes and the files of a person on
their way from one worker to another, in NATS JetStream key-value buckets.

- `<prefix>-links`, key `table`: the whole link table (member → the key of its person) and the
  packed workspaces waiting to be merged in (`moving`: person → bundles in the object store
  `<prefix>-bodies`, each with its SHA-256). One value, so every change (a link, an unlink
  whose heir takes the workspace, a bundle added or taken) is one compare-and-set: two workers
  changing it at once never lose the other's change (the loser reads again and re-applies).
  One NATS message holds it: ~1 MB, some 20,000 links.
- Every process watches the key and keeps the latest value in RAM (`resolve` costs no round
  trip, on every message); a worker that gets a message whose person is not in its partitions
  reads the key again before it forwards the message (bot/cluster/worker.py), so a change the
  watch has not brought yet is never acted on. The watch is supervised (`supervise_watch`,
  chats.py's too): one that ends or fails is logged and opened again, re-reading the value,
  and one is opened again after each reconnection, since its consumer may have gone with the
  server; so a RAM copy is never left stale. A worker keeps `.links.json` in its folder as
  a copy, so `lightgrep memory KEY` and `recall` there follow the links.
- `<prefix>-linking` (keys expire an hour after their last write): the codes (`code.<CODE>`,
  with their own expiry inside, taken by a delete that names the revision read: once) and each
  key's wrong codes of the last hour (`wrong.<hex of the key>`), so a code made through one
  ingress and worker works through any other, and the throttle holds everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from bot.cluster.connection import Names, bodies
from bot.commands.linking import (
    ALPHABET,
    CODE_LENGTH,
    CODE_TTL_S,
    WRONG_PER_HOUR,
    Redeemed,
    normalise,
)
from bot.config import ClusterConfig
from bot.tasks import cancel_and_wait
from memory.control.link import pack
from memory.links import LinkError, LinkTable

log = logging.getLogger(__name__)

TABLE_KEY = "table"
WINDOW_S = 3600.0  # the throttle's hour; also how long a key of the linking bucket lives
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 30.0  # a failed watch is opened again after these, doubling
LIVENESS_S = 1.0  # how often a watch looks whether its connection reconnected meanwhile

Doc = dict[str, Any]  # {"links": {member: home}, "moving": {person: [{"bundle", "sha256"}]}}


def _empty() -> Doc:
    return {"links": {}, "moving": {}}


class SharedPeople(LinkTable):
    """The cluster's link table (a LinkTable: the agent and the merge code ask it as they ask
    the file) and the files moving between workers. `mirror`: a worker's workspaces folder,
    where `.links.json` is kept as a copy; None for an ingress."""

    def __init__(
        self, mirror: Path | None, owns: Callable[[str], bool] = lambda person: True
    ) -> None:
        """`owns(person)`: whether this worker serves the person (bot.cluster.partition.serves),
        so that files or notices arriving for them are taken here."""
        super().__init__(mirror or Path("."))
        self._mirror = mirror
        self._doc: Doc = _empty()
        self._revision = 0
        self._kv: KeyValue | None = None
        self._bodies: ObjectStore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watching: asyncio.Task[None] | None = None
        self.codes = SharedCodes()
        self._owns = owns
        # What the worker's agent does when files or notices for one of its people arrive
        # (bot.agent.people.People.arrive_soon: at once, not at their next message).
        self._on_arrival: Callable[[str], None] | None = None

    async def start(self, js: JetStreamContext, names: Names, settings: ClusterConfig) -> None:
        """Open (or make) the buckets, read the table, and watch it from here on. An ingress
        (no mirror) only reads the table: its NATS user may not change it."""
        self._loop = asyncio.get_running_loop()
        self._kv = await open_bucket(js, names.links_bucket, None, settings.replicas)
        if self._mirror is not None:
            self.codes.kv = await open_bucket(js, names.linking_bucket, WINDOW_S, settings.replicas)
            self._bodies = await bodies(js, names, settings)
        await self.refresh()
        kv = self._kv
        watcher = await kv.watch(TABLE_KEY)
        self._watching = asyncio.create_task(
            supervise_watch(
                names.links_bucket, js, watcher, lambda: kv.watch(TABLE_KEY), self._entry
            )
        )

    async def close(self) -> None:
        if self._watching is not None:
            await cancel_and_wait(self._watching)

    async def refresh(self) -> None:
        """Read the table now (a read-through, when the watch may lag)."""
        assert self._kv is not None, "start() first"
        try:
            entry = await self._kv.get(TABLE_KEY)
        except KeyNotFoundError:
            return
        self._take(entry.value or b"", entry.revision or 0)

    def _entry(self, entry: Any) -> None:
        if entry.value:
            self._take(entry.value, entry.revision or 0)

    def _take(self, value: bytes, revision: int) -> None:
        if revision <= self._revision:
            return  # older than what we have (our own write came first)
        try:
            doc = json.loads(value)
            links = {str(k): str(v) for k, v in dict(doc.get("links", {})).items()}
            moving = dict(doc.get("moving", {}))
        except (ValueError, TypeError, AttributeError):
            log.error("the cluster's link table (revision %s) is not ours; ignored", revision)
            return
        self._doc, self._revision = {"links": links, "moving": moving}, revision
        self._links = links
        if self._on_arrival is not None:
            for person in moving:
                if self._owns(person):
                    self._on_arrival(person)
        if self._mirror is not None:
            with contextlib.suppress(OSError):  # a copy for the CLI only
                super()._write(links)

    # ---- the LinkTable's reads and writes ---------------------------------------------

    def _load(self) -> dict[str, str]:
        return self._doc["links"]

    def _write(self, links: dict[str, str]) -> None:
        raise LinkError("the cluster's link table changes through _change only")

    def _change(self, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """From a thread (the merge and split code runs in one): the change applied to the
        shared table, waiting for it."""
        assert self._loop is not None, "start() first"
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("the shared link table is changed from a thread, or with change()")
        edit = self.change(lambda doc: {**doc, "links": change(dict(doc["links"]))})
        asyncio.run_coroutine_threadsafe(edit, self._loop).result()

    def drop_person(self, user_key: str) -> list[str]:
        """After /wipe: the person's links, and anything still on its way to them (a packed
        workspace merged in after the wipe would bring back what it erased)."""
        home = self.resolve(user_key)
        dropped = [k for k, v in self._load().items() if v == home]

        def edit(doc: Doc) -> Doc:
            links = {k: v for k, v in doc["links"].items() if v != home}
            moving = {k: v for k, v in doc["moving"].items() if k != home}
            return {"links": links, "moving": moving}

        if dropped or self.arriving(home):
            assert self._loop is not None, "start() first"
            asyncio.run_coroutine_threadsafe(self.change(edit), self._loop).result()
        return dropped

    async def change(self, edit: Callable[[Doc], Doc]) -> None:
        """Compare-and-set: `edit` applied to the latest value (again, if another process
        changed it meanwhile). LinkError from `edit` refuses the change."""
        assert self._kv is not None, "start() first"
        while True:
            try:
                entry = await self._kv.get(TABLE_KEY)
                doc, revision = json.loads(entry.value or b"{}"), entry.revision or 0
            except KeyNotFoundError:
                doc, revision = _empty(), 0
            doc = {**_empty(), **doc}
            new = edit(doc)
            body = json.dumps(new, ensure_ascii=False, sort_keys=True).encode()
            try:
                if revision:
                    written = await self._kv.update(TABLE_KEY, body, last=revision)
                else:
                    written = await self._kv.create(TABLE_KEY, body)
            except KeyWrongLastSequenceError:
                continue
            self._take(body, written)
            return

    # ---- a person's files on their way between workers --------------------------------

    def here(self, person: str) -> bool:
        """Whether this worker serves `person` (its workspace is in this folder)."""
        return self._owns(person)

    async def notify(self, person: str, to: str, text: str) -> None:
        """A notice for `to`, whose person another worker serves: it travels with the
        person's arrivals, and that worker writes it to the workspace and sends it."""

        def edit(doc: Doc) -> Doc:
            moving = dict(doc["moving"])
            notice = {"to": to, "text": text, "id": uuid.uuid4().hex}
            moving[person] = [*moving.get(person, []), notice]
            return {**doc, "moving": moving}

        await self.change(edit)

    def when_arriving(self, take: Callable[[str], None]) -> None:
        """`take(person)` is called when files or notices for a person this worker serves
        arrive in the table (the agent that takes them tells this once, as it is built)."""
        self._on_arrival = take

    def arriving(self, person: str) -> bool:
        """Whether files of `person` wait to be merged in (by the worker of their partition)."""
        return bool(self._doc["moving"].get(person))

    async def ship(
        self, root: Path, person: str, links: Callable[[dict[str, str]], dict[str, str]]
    ) -> None:
        """The workspace at `root` packed and stored for `person`'s worker, and the table's
        change `links` made in the same write: from then on the key's messages go there."""
        assert self._bodies is not None, "start() first"
        data = await asyncio.to_thread(pack, root)
        bundle: dict[str, str] | None = None
        if data:
            name = f"person-{uuid.uuid4().hex}"
            await self._bodies.put(name, data)
            bundle = {"bundle": name, "sha256": hashlib.sha256(data).hexdigest()}

        def edit(doc: Doc) -> Doc:
            moving = dict(doc["moving"])
            if bundle is not None:
                moving[person] = [*moving.get(person, []), bundle]
            return {"links": links(dict(doc["links"])), "moving": moving}

        await self.change(edit)

    async def arrivals(self, person: str) -> list[tuple[str, bytes]]:
        """What waits for `person`, each item named: the packed workspaces, each checked
        against its digest, and the notices (named "notice:<id>", their JSON as the bytes)."""
        assert self._bodies is not None, "start() first"
        found: list[tuple[str, bytes]] = []
        for item in list(self._doc["moving"].get(person, [])):
            if "to" in item:
                notice = {"to": str(item["to"]), "text": str(item.get("text", ""))}
                found.append((_name(item), json.dumps(notice).encode()))
                continue
            name = str(item.get("bundle", ""))
            try:
                data = (await self._bodies.get(name)).data or b""
            except NotFoundError:  # gone: nothing to merge (logged: it was someone's memory)
                log.error("the files of %s in %s are gone from NATS", person, name)
                data = b""  # (NATS away: raised, and taken again at the next message)
            if data and hashlib.sha256(data).hexdigest() != item.get("sha256"):
                log.error("the files of %s in %s are not the ones stored; not merged", person, name)
                data = b""
            found.append((name, data))
        return found

    async def arrived(self, person: str, names: list[str]) -> None:
        """The bundles `names` are merged in: out of the table, then out of the store."""
        assert self._bodies is not None, "start() first"

        def edit(doc: Doc) -> Doc:
            moving = dict(doc["moving"])
            left = [b for b in moving.get(person, []) if _name(b) not in names]
            if left:
                moving[person] = left
            else:
                moving.pop(person, None)
            return {**doc, "moving": moving}

        await self.change(edit)
        for name in names:
            if not name.startswith("notice:"):
                with contextlib.suppress(Exception):
                    await self._bodies.delete(name)


class SharedCodes:
    """LinkCodes' interface over the linking bucket (see above); a wall clock, since several
    machines compare the times."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.kv: KeyValue | None = None
        self._clock = clock

    async def issue(self, owner: str) -> str:
        assert self.kv is not None, "start() first"
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        body = json.dumps({"owner": owner, "until": self._clock() + CODE_TTL_S}).encode()
        await self.kv.put(f"code.{code}", body)
        return code

    async def redeem(self, code: str, by: str) -> Redeemed:
        assert self.kv is not None, "start() first"
        now = self._clock()
        wrong_key = f"wrong.{by.encode('utf-8', 'surrogatepass').hex()}"
        wrong, revision = await self._wrong(wrong_key, now)
        if len(wrong) >= WRONG_PER_HOUR:
            return Redeemed(None, "throttled", wrong[0] + WINDOW_S - now)
        typed = normalise(code)
        owner = None
        if len(typed) == CODE_LENGTH and all(c in ALPHABET for c in typed):
            owner = await self._take(f"code.{typed}", now)
        if owner is not None:
            return Redeemed(owner)
        body = json.dumps([*wrong, now]).encode()
        with contextlib.suppress(Exception):  # counted best-effort: a lost count errs to the user
            if revision:
                await self.kv.update(wrong_key, body, last=revision)
            else:
                await self.kv.create(wrong_key, body)
        return Redeemed(None, "invalid")

    async def _wrong(self, key: str, now: float) -> tuple[list[float], int]:
        assert self.kv is not None
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:
            return [], 0
        try:
            times = [float(t) for t in json.loads(entry.value or b"[]")]
        except (ValueError, TypeError):
            times = []
        return [t for t in times if t > now - WINDOW_S], entry.revision or 0

    async def _take(self, key: str, now: float) -> str | None:
        """The owner of a live code, which is gone once this returns (a delete naming the
        revision read: of two takers at once, one wins)."""
        assert self.kv is not None
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:
            return None
        try:
            await self.kv.delete(key, last=entry.revision)
        except KeyWrongLastSequenceError:
            return None
        try:
            found = json.loads(entry.value or b"{}")
            owner, until = str(found["owner"]), float(found["until"])
        except (ValueError, TypeError, KeyError):
            return None
        return owner if now <= until else None


def _name(item: dict[str, Any]) -> str:
    return f"notice:{item.get('id')}" if "to" in item else str(item.get("bundle", ""))


async def supervise_watch(
    what: str, js: JetStreamContext, watcher: Any, reopen: Callable[[], Awaitable[Any]],
    take: Callable[[Any], None],
) -> None:  # fmt: skip
    """Each entry of `watcher` (a KV watch of the bucket `what`) given to `take`, for as long
    as the process runs (cancel it to stop). A watch that ends or fails (NATS away, `take`
    raising) is logged once and opened again with `reopen`, with a back-off; one is opened
    again at once after a reconnection (the server may have lost its consumer: nats-py would
    notice only after missed heartbeats, if ever). A new watch delivers the current values
    first, so the RAM copy catches up. A closed connection (the process stopping) ends it
    quietly."""
    client = js._nc  # nats-py keeps the connection there; it has no public accessor
    delay, warned = RETRY_FIRST_S, False

    def delivered() -> None:  # the watch works (again): the copy is current
        nonlocal delay, warned
        if warned:
            log.info("watching the bucket %s again", what)
        delay, warned = RETRY_FIRST_S, False

    while True:
        reconnects = client.stats["reconnects"]
        why: str | None = None
        following: asyncio.Future[None] | None = None
        try:
            if watcher is None:
                watcher = await reopen()
            # Followed in a task of its own, so that looking for a reconnection does not
            # time out a read (wait_for on nats-py's queue may drop an entry it just took).
            following = asyncio.ensure_future(_follow(watcher, take, delivered))
            while not following.done() and client.stats["reconnects"] == reconnects:
                await asyncio.wait({following}, timeout=LIVENESS_S)
            if following.done():
                following.result()  # raises what made it stop
                why = "it ended"
        except Exception as exc:  # any failure of a watch: opened again
            why = type(exc).__name__  # (its text may hold a server's address: not logged)
        finally:
            if following is not None:
                await cancel_and_wait(following)
        if watcher is not None:
            with contextlib.suppress(Exception):
                await watcher.stop()
            watcher = None
        if client.is_closed:
            return  # the process closed its connection: it is stopping
        if why is None:
            continue  # reconnected: opened again, and that is no error
        if not warned:
            warned = True
            log.warning(
                "the watch of the bucket %s stopped (%s); opening it again (back-off up to "
                "%.0f s)", what, why, RETRY_MAX_S,
            )  # fmt: skip
        await asyncio.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)


async def _follow(watcher: Any, take: Callable[[Any], None], delivered: Callable[[], None]) -> None:
    """Until the watch stops: each entry taken (None: all there was is delivered)."""
    async for entry in watcher:
        if entry is not None:
            take(entry)
        delivered()


async def open_bucket(
    js: JetStreamContext, name: str, ttl_s: float | None, replicas: int
) -> KeyValue:
    """A key-value bucket of history 1 (`ttl_s`: keys expire after their last write), made on
    first use."""
    try:
        return await js.key_value(name)
    except BucketNotFoundError:
        config = KeyValueConfig(
            bucket=name, history=1, replicas=replicas, storage=StorageType.FILE,
            ttl=ttl_s,
        )  # fmt: skip
        return await js.create_key_value(config)
