"""The connection to NATS, the names of everything LightGrep keeps there, and its streams.

Two JetStream streams, both work queues (a message is gone once acknowledged):
- `<prefix>-in`, subjects `<prefix>.in.<partition>`: the users' messages, one consumer per
  partition, no age limit (a message waits however long its worker is down);
- `<prefix>-out`, subjects `<prefix>.out.<ingress id>`: the answers' Outbound calls, one consumer
  per ingress process; answers for an ingress that never comes back expire after a day. Also
  `<prefix>.out.reminders-<platform>`: the reminders a worker sends, one consumer shared by the
  ingresses that serve that platform (push.py).
A key-value bucket `<prefix>-leases` holds which worker serves which partition (lease.py),
`<prefix>-ingresses` which ingresses run (adopt.py), `<prefix>-links` and `-linking` who is
whom and the /link codes (people.py), `<prefix>-chats` the chats' settings (chats.py), and
an object store `<prefix>-bodies` the messages too large for one NATS message (wire.py), each
deleted once its message is answered.

An outage is waited out, never an error: the client reconnects forever and the log says when the
connection goes and comes back. Credentials never reach the log (they are in [cluster]'s secret
keys, masked by bot.logsafe, not in the URLs).

Whoever can publish to NATS could ask a worker for anyone's memory, so the safe setup is the
only one that starts without a word from the operator: unless `[cluster] private_network =
true`, a process refuses to connect without credentials, without a `signing_key`
(signing.py), or to a NATS server that lets anyone in. Each role gets replies on its own inbox
prefix (`_INBOX.<prefix>-ingress`, `-worker`), so NATS permissions can keep one role from
reading another's replies (docs/cluster.md, "Who may do what").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import (
    KeyValueConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, BucketNotFoundError
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from bot.config import ClusterConfig

log = logging.getLogger(__name__)

DUPLICATE_WINDOW_S = 120.0  # JetStream's default: a redelivered platform message is dropped
ANSWER_MAX_AGE_S = 24 * 3600.0
STREAM_EXISTS = 10058  # JetStream's error code: a stream of that name with another config


class ClusterError(Exception):
    """Something about NATS the operator must fix (credentials, a stream's config): one line."""


@dataclass(frozen=True)
class Names:
    """Subjects, streams, consumers and the bucket, all under one prefix."""

    prefix: str

    @property
    def in_stream(self) -> str:
        return f"{self.prefix}-in"

    @property
    def out_stream(self) -> str:
        return f"{self.prefix}-out"

    @property
    def lease_bucket(self) -> str:
        return f"{self.prefix}-leases"

    @property
    def ingress_bucket(self) -> str:
        return f"{self.prefix}-ingresses"

    @property
    def links_bucket(self) -> str:
        return f"{self.prefix}-links"

    @property
    def linking_bucket(self) -> str:
        return f"{self.prefix}-linking"

    @property
    def chats_bucket(self) -> str:
        return f"{self.prefix}-chats"

    @property
    def body_bucket(self) -> str:
        return f"{self.prefix}-bodies"

    def in_subject(self, partition: int) -> str:
        return f"{self.prefix}.in.{partition}"

    def out_subject(self, ingress_id: str) -> str:
        return f"{self.prefix}.out.{ingress_id}"

    def push_subject(self, platform: str) -> str:
        return f"{self.prefix}.out.{self.push_consumer(platform)}"

    def push_consumer(self, platform: str) -> str:
        return "reminders-" + re.sub(r"[^A-Za-z0-9_-]", "-", platform)

    def partition_consumer(self, partition: int) -> str:
        return f"partition-{partition}"

    def ingress_consumer(self, ingress_id: str) -> str:
        return f"ingress-{ingress_id}"


PRIVATE = (
    "or private_network = true if nothing but this cluster's processes can reach NATS"
)


def inbox_prefix(settings: ClusterConfig, role: str) -> str:
    """Where a process of `role` ("ingress", "worker") gets the replies to its requests."""
    return f"_INBOX.{settings.subject_prefix}-{role}"


def require_protection(settings: ClusterConfig) -> None:
    """ClusterError unless NATS credentials and a signing key are set, or the operator said
    that only the cluster reaches NATS (private_network)."""
    if settings.private_network:
        return
    if credentials(settings, {}) is None:
        raise ClusterError(
            "[cluster] sets no NATS credentials (token, user and password, nkey_seed_file or "
            "creds_file): anyone who reaches NATS could read and change people's memory. Set "
            f'one (docs/cluster.md, "Who may do what"), {PRIVATE}'
        )
    if not settings.signing_key:
        raise ClusterError(
            "[cluster] signing_key is not set: every ingress and worker signs its messages with "
            "it, so that one from anyone else is dropped. Set the same random value of 32 "
            "characters or more in each (LIGHTGREP_CLUSTER_SIGNING_KEY, e.g. from `openssl rand "
            f"-hex 32`), {PRIVATE}"
        )


async def connect(
    settings: ClusterConfig, name: str, stop: asyncio.Event, *, role: str | None = None
) -> Client | None:
    """A connection that reconnects forever; None if `stop` came before NATS answered.

    The first connection is retried too (NATS may start after us), saying so once; credentials
    NATS refuses are a ClusterError, not a retry, and so is a setup anyone could use
    (require_protection, and a server that asks no credentials). `role` names the inbox."""
    require_protection(settings)
    made: list[Client] = []
    refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    where = ", ".join(settings.nats_url)
    said = False

    async def error(exc: Exception) -> None:
        nonlocal said
        if _refused(exc):
            if not refused.done():
                refused.set_result(None)
            log.error("NATS at %s refused our credentials", where)
        elif "permissions violation" in str(exc).lower():
            log.error(
                "NATS refused: %s (this process's NATS user may not do that: see its "
                'permissions, docs/cluster.md, "Who may do what")',
                _reason(exc),
            )
        elif not made and not said:
            said = True
            log.warning("NATS is not reachable at %s (%s); retrying", where, _reason(exc))
        else:
            log.debug("NATS: %s", _reason(exc))

    async def disconnected() -> None:
        if made and not made[0].is_closed:  # not our own close()
            log.warning(
                "NATS: disconnected; reconnecting (nothing is lost: messages wait in JetStream)"
            )

    options: dict[str, Any] = dict(
        servers=list(settings.nats_url),
        name=name,
        connect_timeout=2,
        reconnect_time_wait=1,
        max_reconnect_attempts=-1,  # forever, the first connection too: outages are waited out
        allow_reconnect=True,
        # Nothing is held in the client while NATS is away: a publish then fails at once and
        # its caller tries again once connected, signed afresh (signing.py). A held one would
        # reach NATS as old as the outage is long, and be refused as a replay.
        pending_size=0,
        error_cb=error,
        disconnected_cb=disconnected,
        reconnected_cb=_on_reconnected,
    )
    used = credentials(settings, options)
    if role is not None:
        options["inbox_prefix"] = inbox_prefix(settings, role)
    attempt = asyncio.ensure_future(nats.connect(**options))
    stopping = asyncio.ensure_future(stop.wait())
    waits: set[asyncio.Future[Any]] = {attempt, stopping, refused}
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not attempt.done():
        attempt.cancel()
        with contextlib.suppress(BaseException):
            await attempt
        if refused.done():
            if used is None:
                raise ClusterError(
                    f"NATS at {where} asks for credentials: set [cluster] token, user and "
                    "password, nkey_seed_file or creds_file"
                )
            raise ClusterError(f"NATS at {where} refused our credentials ([cluster] {used})")
        return None
    try:
        client = attempt.result()
    except ModuleNotFoundError as exc:
        raise ClusterError(
            f"[cluster] creds_file / nkey_seed_file need the {exc.name} package: "
            'pip install "lightgrep[nkeys]"'
        ) from None
    made.append(client)
    url = client.connected_url
    if not settings.private_network and not _asks_credentials(client):
        await client.close()
        raise ClusterError(
            f"NATS at {url.netloc if url is not None else where} lets anyone connect without "
            "credentials, who could then read and change people's memory: give it "
            'authorization (docs/cluster.md, "Who may do what"), or set [cluster] '
            "private_network = true if nothing but this cluster's processes can reach it"
        )
    log.info("NATS: connected to %s", url.netloc if url is not None else where)
    return client


def _asks_credentials(client: Client) -> bool:
    """Whether the server said it needs credentials (the INFO it greeted us with; nats-py keeps
    it only privately). True when that cannot be told: we refuse only what we know is open."""
    info = getattr(client, "_server_info", None)
    if not isinstance(info, dict) or not info:
        return True
    return bool(info.get("auth_required"))


def credentials(settings: ClusterConfig, options: dict[str, Any]) -> str | None:
    """Put the one configured way to authenticate into nats.connect's `options`; which it is,
    for the refusal's message (None: none). ClusterError for two at once, or a file we cannot
    read (nats-py would retry it forever)."""
    chosen: list[str] = []
    if settings.token:
        options["token"] = settings.token
        chosen.append("token")
    if settings.user or settings.password:
        if not (settings.user and settings.password):
            raise ClusterError("[cluster] user and password go together: set both")
        options["user"], options["password"] = settings.user, settings.password
        chosen.append("user and password")
    for key, option in (("nkey_seed_file", "nkeys_seed"), ("creds_file", "user_credentials")):
        path: Path | None = getattr(settings, key)
        if path is None:
            continue
        path = path.expanduser()
        try:
            path.read_bytes()
        except OSError as exc:
            raise ClusterError(
                f"[cluster] {key} {path}: cannot read it ({exc.strerror or exc})"
            ) from None
        options[option] = str(path)
        chosen.append(key)
    if len(chosen) > 1:
        raise ClusterError(f"[cluster] has {' and '.join(chosen)}: choose one way to authenticate")
    return chosen[0] if chosen else None


async def ensure_streams(js: JetStreamContext, names: Names, settings: ClusterConfig) -> None:
    """Create the two streams, or bring their settings up to date (replicas, say)."""
    common: dict[str, Any] = dict(
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        num_replicas=settings.replicas,
        # A copy of a signed message published again is refused by its age after
        # 2 × max_message_age_s at most (signing.py); until then, JetStream drops it here.
        duplicate_window=max(DUPLICATE_WINDOW_S, 2 * settings.max_message_age_s),
    )
    streams = [
        StreamConfig(name=names.in_stream, subjects=[f"{names.prefix}.in.*"], **common),
        StreamConfig(
            name=names.out_stream,
            subjects=[f"{names.prefix}.out.*"],
            max_age=ANSWER_MAX_AGE_S,
            **common,
        ),
    ]
    for config in streams:
        try:
            await js.add_stream(config)
        except BadRequestError as exc:
            if exc.err_code != STREAM_EXISTS:
                raise ClusterError(f"NATS would not create stream {config.name}: {exc}") from None
            try:
                await js.update_stream(config)
            except BadRequestError as update:
                raise ClusterError(
                    f"stream {config.name} exists in NATS with settings we cannot change "
                    f"({update.description}); delete it or choose another [cluster] "
                    "subject_prefix"
                ) from None


async def bodies(js: JetStreamContext, names: Names, settings: ClusterConfig) -> ObjectStore:
    """The object store of the messages too large for one NATS message."""
    try:
        return await js.object_store(names.body_bucket)
    except BucketNotFoundError:
        config = ObjectStoreConfig(storage=StorageType.FILE, replicas=settings.replicas)
        return await js.create_object_store(names.body_bucket, config=config)


async def expiring_keys(js: JetStreamContext, bucket: str, ttl_s: float, replicas: int) -> KeyValue:
    """A key-value bucket whose keys expire `ttl_s` after their last write (the workers' leases,
    the ingresses' liveness keys), made on first use."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        config = KeyValueConfig(bucket=bucket, ttl=ttl_s, history=1, replicas=replicas)
        return await js.create_key_value(config)


def _refused(exc: Exception) -> bool:
    return "authorization" in str(exc).lower()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _on_reconnected() -> None:
    log.info("NATS: reconnected")
