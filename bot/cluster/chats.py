"""Chat settings (bot/chats.py: a group's trigger, a chat's persona) shared by the cluster: a
JetStream key-value bucket `<prefix>-chats`, one key per chat (`chat.<hex of the chat key>`,
its settings as JSON; deleted when it has the defaults again).

A group's members are served by different workers (each by their person's partition), and
whether a group message is for the bot at all is decided by the ingress's adapter, so every
process must see one book. Each watches the bucket and keeps it in RAM, so a question costs no
round trip; the watch is supervised (people.py's `supervise_watch`: opened again when it ends,
fails or the connection comes back, catching up). A worker's change (made by a command, on the
event loop, which cannot wait for NATS) is applied to its RAM copy at once and put into the
bucket in the background, tried again until NATS takes it; the other processes have it once
their watch brings it (milliseconds). Two workers changing one chat at once: the later write
wins, as with the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from bot.chats import ChatBook, ChatSettings, plain, settings_of
from bot.cluster.connection import Names
from bot.cluster.people import open_bucket, supervise_watch
from bot.config import ClusterConfig
from bot.tasks import cancel_and_wait

log = logging.getLogger(__name__)

RETRY_S = 1.0


SAVE_WAIT_S = 5.0  # how long a command's answer waits for NATS to take its change


class SharedChats(ChatBook):
    """The cluster's chat settings, in RAM from the watch (see above)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self._kv: KeyValue | None = None
        self._watching: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._pending: dict[str, ChatSettings | None] = {}  # ours, not yet in NATS

    async def start(self, js: JetStreamContext, names: Names, settings: ClusterConfig) -> None:
        """Open (or make) the bucket and read every chat before anything is asked."""
        kv = self._kv = await open_bucket(js, names.chats_bucket, None, settings.replicas)
        watcher = await kv.watchall()
        while (entry := await watcher.updates(timeout=30)) is not None:  # None: all read
            self._take(entry)
        self._watching = asyncio.create_task(
            supervise_watch(names.chats_bucket, js, watcher, kv.watchall, self._take)
        )

    async def close(self) -> None:
        if self._watching is not None:
            await cancel_and_wait(self._watching)
        if self._writes:  # what a command changed goes out before we stop (briefly)
            await asyncio.wait(self._writes, timeout=5)

    async def saved(self) -> OSError | None:
        """Wait, SAVE_WAIT_S at most, until this process's changes are in the bucket, so that a
        command's answer comes once the others can have it: the ingress deciding on a group's
        next message by the trigger just set (seen: `/group trigger always` answered, the next
        message not for the bot yet). NATS away: the change stays in RAM, tried again, and the
        answer is not held longer."""
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=SAVE_WAIT_S)
        return None

    def _take(self, entry: Any) -> None:
        key = _chat_key(entry.key)
        if key is None or key in self._pending:
            return  # not ours, or our own change is on its way (it wins)
        chats = dict(self._chats)
        try:
            value = json.loads(entry.value) if entry.value and not entry.operation else None
        except ValueError:
            value = None
        if isinstance(value, dict):
            chats[key] = settings_of(value)
        else:
            chats.pop(key, None)
        self._chats = chats

    def _refresh(self) -> None:
        return  # the watch keeps the RAM copy current

    def _write(self, chats: dict[str, ChatSettings]) -> None:
        old, self._chats = self._chats, chats
        for key in set(old) | set(chats):
            if old.get(key) != chats.get(key):
                self._pending[key] = chats.get(key)
                task = asyncio.get_running_loop().create_task(self._put(key))
                self._writes.add(task)
                task.add_done_callback(self._writes.discard)

    async def _put(self, key: str) -> None:
        assert self._kv is not None, "start() first"
        name = "chat." + key.encode("utf-8", "surrogatepass").hex()
        while key in self._pending:
            value = self._pending[key]
            try:
                if value is None:
                    await self._kv.delete(name)
                else:
                    await self._kv.put(name, json.dumps(plain(value), ensure_ascii=False).encode())
            except Exception as exc:  # NATS away: ours stays in RAM, tried again
                log.warning("could not store the settings of a chat (%s); retrying", exc)
                await asyncio.sleep(RETRY_S)
                continue
            if self._pending.get(key) == value:  # no newer change meanwhile
                with contextlib.suppress(KeyError):
                    del self._pending[key]


def _chat_key(name: str) -> str | None:
    if not name.startswith("chat."):
        return None
    try:
        return bytes.fromhex(name[len("chat.") :]).decode("utf-8", "surrogatepass")
    except ValueError:
        return None
