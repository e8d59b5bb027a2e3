"""Credentials for a test's nats-server, made here: an nkey user, and a .creds file (a user JWT
signed by an account that a JWT of an operator vouches for, as `nsc` would make them), with the
server options that accept them. Only for tests: real deployments make these with `nsc`."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import time
from pathlib import Path

import nats
import nkeys

from bot.config import ClusterConfig
from tests.rigs.cluster import WAIT_S

UNLIMITED = {
    "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
    "conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
}  # fmt: skip


def new_key(prefix: int) -> tuple[bytes, nkeys.KeyPair]:
    """A fresh seed (operator, account or user, by its prefix byte) and its key pair."""
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    return seed, nkeys.from_seed(bytearray(seed))


def nkey_user(folder: Path) -> tuple[Path, Path]:
    """(server config accepting one nkey user, that user's seed file)."""
    seed, user = new_key(nkeys.PREFIX_BYTE_USER)
    conf = folder / "nkey.conf"
    conf.write_text(f'authorization {{ users = [ {{ nkey: "{user.public_key.decode()}" }} ] }}\n')
    seed_file = folder / "user.nk"
    seed_file.write_bytes(seed + b"\n")
    return conf, seed_file


def creds_user(folder: Path) -> tuple[Path, Path]:
    """(server config in operator mode, with JetStream for its account; the user's .creds)."""
    _, operator = new_key(nkeys.PREFIX_BYTE_OPERATOR)
    _, account = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    _, system = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    user_seed, user = new_key(nkeys.PREFIX_BYTE_USER)
    op_jwt = _jwt(operator, operator, "operator", {"type": "operator"})
    account_jwt = _jwt(operator, account, "bot", {"type": "account", "limits": UNLIMITED})
    system_jwt = _jwt(operator, system, "SYS", {"type": "account"})
    user_jwt = _jwt(account, user, "bot", {"type": "user", "subs": -1, "data": -1, "payload": -1})
    acc, sys = account.public_key.decode(), system.public_key.decode()
    conf = folder / "operator.conf"
    conf.write_text(
        f'operator: "{op_jwt}"\nsystem_account: {sys}\nresolver: MEMORY\n'
        f'resolver_preload: {{ {acc}: "{account_jwt}", {sys}: "{system_jwt}" }}\n'
    )
    creds = folder / "bot.creds"
    creds.write_text(
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user_seed.decode()}\n------END USER NKEY SEED------\n"
    )
    return conf, creds


def _jwt(issuer: nkeys.KeyPair, subject: nkeys.KeyPair, name: str, nats: dict[str, object]) -> str:
    claims: dict[str, object] = {
        "iat": int(time.time()), "iss": issuer.public_key.decode(), "name": name,
        "sub": subject.public_key.decode(), "nats": {**nats, "version": 2},
    }  # fmt: skip
    digest = hashlib.sha256(json.dumps(claims).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(issuer.sign(f'{head}.{body}'.encode()))}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


async def violation(cluster: ClusterConfig, subject: str, kind: str) -> str:
    """What NATS says when a client with these credentials publishes or subscribes there."""
    said: asyncio.Queue[str] = asyncio.Queue()

    async def error(exc: Exception) -> None:
        said.put_nowait(str(exc).lower())

    client = await nats.connect(
        cluster.nats_url[0], user=cluster.user, password=cluster.password, error_cb=error,
    )  # fmt: skip
    try:
        if kind == "publish":
            await client.publish(subject, b"{}")
        else:
            await client.subscribe(subject)
        await client.flush()
        return await asyncio.wait_for(said.get(), WAIT_S)
    finally:
        await client.close()
