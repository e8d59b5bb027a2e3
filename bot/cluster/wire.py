"""What travels between the ingress and the workers: an Inbound, and the Outbound calls.

Both are plain data (bot/inbound.py, bot/outbound.py), serialised as JSON. The codec is generic
over dataclasses and their type hints, so a field added to Inbound (attachments, say) travels
without a change here: bytes become {"b64": …}, a Path its text, a tuple a list; a field the
receiver does not know is ignored and a field the sender did not send takes its default, so an
ingress and a worker one version apart still understand each other. A file is always sent as
its bytes: a path on the worker's machine means nothing to the ingress.

A message body larger than the server takes (1 MB by default) does not go as one message: an
answer's calls are split into parts, sent in order with the PART header and joined by the
receiver; an Inbound (a 20 MB voice message, say) is put in JetStream's object store and the
message names it in the BODY header, with SESSION so that the worker can keep it in its
session's order before it has fetched it.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from bot.inbound import Inbound
from bot.outbound import Button, Outbound, OutFile

# Headers. MSG_ID is JetStream's: a publish repeating one within the stream's duplicate window
# is dropped.
MSG_ID = "Nats-Msg-Id"
REPLY = "Lg-Reply"  # inbound: the subject its answer goes to (the ingress that holds the chat)
KEY = "Lg-Key"  # both ways: the ingress's name for one handle() call
ATTEMPT = "Lg-Attempt"  # answer: one worker's run of one delivery (a redelivery is another)
SEQ = "Lg-Seq"  # answer: the call's place in the answer, from 0
PART = "Lg-Part"  # "i/n" of a body split in n parts
BODY = "Lg-Body"  # inbound: the object holding the body (too large for a message)
SESSION = "Lg-Session"  # inbound with BODY: its session key
DESTINATION = "Lg-Destination"  # answer: where it goes if the ingress that asked is gone
DIGEST = "Lg-Digest"  # inbound with BODY: the SHA-256 of the stored body
MAC = "Lg-Mac"  # both ways: the HMAC of what the message says (signing.py)
TIME = "Lg-Time"  # both ways: when it was signed, ms since 1970 (signing.py: replays)
NONCE = "Lg-Nonce"  # both ways: a random id of its own (signing.py: replays)
HEADROOM = 8192  # bytes of a message kept for its headers: bodies are at most max_payload − this

Op = Literal["begin", "add_text", "attach_file", "offer", "notice", "finish", "error"]
_ARG: dict[str, Any] = {
    "begin": bool,  # private
    "add_text": str,
    "attach_file": OutFile,
    "offer": tuple[Button, ...],
    "notice": str,
    "finish": type(None),
    "error": str,  # the worker's core raised: the adapter apologises
}
ENDS: frozenset[str] = frozenset({"finish", "error"})


class WireError(ValueError):
    """A message that is not what this version sends (a bug, or a much newer peer)."""

    reason = "malformed"  # for /metrics (lightgrep_cluster_rejected)


class NotAuthentic(WireError):
    """A message, or a body it names, that does not carry its sender's signature."""

    reason = "unauthenticated"


class RemoteTurnFailed(Exception):
    """The worker's core raised on this message: the adapter answers with its apology."""


# ---- the generic codec ------------------------------------------------------------------------


def to_plain(value: Any) -> Any:
    """A JSON-able copy of plain data (dataclasses, bytes, paths, tuples, dicts)."""
    if isinstance(value, OutFile) and value.path is not None:
        value = dataclasses.replace(value, data=value.read(), path=None)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise WireError(f"{type(value).__name__} is not plain data")


def from_plain(hint: Any, data: Any) -> Any:
    """`data` (as to_plain made it) back into the type `hint` names; WireError if it is not."""
    if hint is Any:
        return data
    if hint is type(None):
        if data is not None:
            raise WireError(f"expected nothing, got {type(data).__name__}")
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        if data is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return from_plain(arg, data)
            except WireError:
                continue
        raise WireError(f"{data!r:.40} fits none of {hint}")
    if origin is Literal:
        if data not in args:
            raise WireError(f"{data!r:.40} is not one of {args}")
        return data
    if origin in (tuple, list):
        if not isinstance(data, list):
            raise WireError(f"expected a list, got {type(data).__name__}")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return tuple(from_plain(a, v) for a, v in zip(args, data, strict=True))
        items = [from_plain(args[0] if args else Any, v) for v in data]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(data, dict):
            raise WireError(f"expected an object, got {type(data).__name__}")
        value_hint = args[1] if args else Any
        return {k: from_plain(value_hint, v) for k, v in data.items()}
    if hint is bytes:
        if not (isinstance(data, dict) and isinstance(data.get("b64"), str)):
            raise WireError("expected bytes as {'b64': …}")
        try:
            return base64.b64decode(data["b64"], validate=True)
        except ValueError:
            raise WireError("bytes that are not base64") from None
    if hint is Path:
        if not isinstance(data, str):
            raise WireError(f"expected a path, got {type(data).__name__}")
        return Path(data)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _dataclass(hint, data)
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if hint in (str, int, float, bool):
        if type(data) is not hint:
            raise WireError(f"expected {hint.__name__}, got {type(data).__name__}")
        return data
    raise WireError(f"cannot decode a {hint!r}")


@functools.cache
def _init_fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, type hint) of each field `cls(...)` takes. Cached: resolving the hints of a
    dataclass (string annotations) was nine tenths of decoding an Inbound (1,335 → 129 µs)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls) if f.init)


def _dataclass(cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise WireError(f"expected a {cls.__name__} object, got {type(data).__name__}")
    fields = _init_fields(cls)
    values = {name: from_plain(hint, data[name]) for name, hint in fields if name in data}
    try:
        return cls(**values)  # a missing field takes its default; unknown ones are ignored
    except (TypeError, ValueError) as exc:
        raise WireError(f"not a valid {cls.__name__}: {exc}") from None


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:  # also UnicodeDecodeError
        raise WireError("not JSON") from None
    except RecursionError:  # nested deeper than the interpreter's stack: never ours
        raise WireError("JSON nested too deep") from None


def _dumps(plain: Any) -> bytes:
    # ASCII escapes: a lone surrogate (a platform's broken text) survives the round trip.
    return json.dumps(plain, separators=(",", ":")).encode("ascii")


# ---- messages -----------------------------------------------------------------------------------


def encode_inbound(inbound: Inbound) -> bytes:
    return _dumps(to_plain(inbound))


def decode_inbound(body: bytes) -> Inbound:
    result = from_plain(Inbound, _loads(body))
    assert isinstance(result, Inbound)
    return result


def destination(inbound: Inbound) -> str | None:
    """The DESTINATION header of the answer to `inbound`: its platform and destination."""
    if inbound.destination is None:
        return None
    return destination_of(inbound.platform, inbound.destination)


def destination_of(platform: str, where: dict[str, str]) -> str:
    """The DESTINATION header of a message for `where` on `platform` (a reminder's place)."""
    return _dumps({**where, "platform": platform}).decode("ascii")


def parse_destination(header: str) -> tuple[str, dict[str, str]]:
    """(platform, destination) of a DESTINATION header (WireError if it is not one)."""
    data = _loads(header.encode("utf-8", "surrogatepass"))
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise WireError(f"bad {DESTINATION} header")
    platform = data.pop("platform", None)
    if not platform:
        raise WireError(f"{DESTINATION} without a platform")
    return platform, data


def call(op: Op, arg: Any = None) -> dict[str, Any]:
    """One Outbound call as plain data: begin(private), add_text(text), attach_file(file),
    offer(buttons), notice(what), finish(); and error(reason) when the core raised instead."""
    plain = to_plain(arg)
    from_plain(_ARG[op], plain)  # the sender's mistake is caught where it is made
    return {"op": op, "arg": plain}


def encode_calls(calls: list[dict[str, Any]]) -> bytes:
    """Calls made one after the other, in one message body."""
    return _dumps(calls)


def decode_calls(body: bytes) -> list[tuple[str, Any]]:
    data = _loads(body)
    if not isinstance(data, list):
        raise WireError("not a list of Outbound calls")
    decoded = []
    for item in data:
        if not isinstance(item, dict) or item.get("op") not in _ARG:
            raise WireError("not an Outbound call")
        decoded.append((item["op"], from_plain(_ARG[item["op"]], item.get("arg"))))
    return decoded


async def replay(calls: Iterable[tuple[str, Any]], out: Outbound) -> None:
    """Make the calls on `out`, as the worker's core made them; RemoteTurnFailed for an error
    (finish is then not called, as when a core raises)."""
    for op, arg in calls:
        if op == "begin":
            await out.begin(private=arg)
        elif op == "add_text":
            await out.add_text(arg)
        elif op == "attach_file":
            await out.attach_file(arg)
        elif op == "offer":
            await out.offer(arg)
        elif op == "notice":
            await out.notice(arg)
        elif op == "finish":
            await out.finish()
        elif op == "error":
            raise RemoteTurnFailed(arg)


def split(body: bytes, limit: int) -> list[bytes]:
    """A body in parts of at most `limit` bytes (one part if it fits)."""
    if len(body) <= limit:
        return [body]
    return [body[i : i + limit] for i in range(0, len(body), limit)]


def part_of(headers: dict[str, str] | None) -> tuple[int, int]:
    """(index, count) of a message's part; (0, 1) for a whole body."""
    text = (headers or {}).get(PART)
    if not text:
        return 0, 1
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise WireError(f"bad {PART} header {text!r}") from None
    if not 0 <= i < n:
        raise WireError(f"bad {PART} header {text!r}")
    return i, n
