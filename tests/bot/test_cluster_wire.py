"""What travels between ingress and workers, and which partition a user lands in."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg

from bot.cluster import wire
from bot.cluster.partition import RangeError, describe_ranges, parse_ranges, partition_of
from bot.inbound import Attachment as InboundAttachment
from bot.inbound import Delivered, Inbound, Quoted
from bot.outbound import BufferedOutbound, Button, OutFile
from tests.rigs import REPO


def test_an_inbound_arrives_as_it_was_sent() -> None:
    sent = Inbound(
        platform="telegram",
        session_key="telegram:group:-100:42",
        user_key="telegram-42",
        text="héllo \ud800 <b>&",  # a lone surrogate too: platforms send broken text
        is_private=False,
        message_id="-100:7",
        attachments=(
            InboundAttachment("image", "image/png", "photo.png", 6, b"\x89PNG\x00\xff"),
            InboundAttachment("audio", "audio/ogg", "voice.ogg", 10**8, skipped="too_large",
                              limit=20_000_000, voice=True, seconds=3),
        ),
        reply_to=Quoted("-100:5", "the part quoted", "Bea", partial=True),
        chat_key="telegram:group:-100",
        chat_admin=True,
    )  # fmt: skip
    assert wire.decode_inbound(wire.encode_inbound(sent)) == sent
    receipt = replace(sent, text="", delivered=Delivered("-100:7", ("-100:8", "-100:9")))
    assert wire.decode_inbound(wire.encode_inbound(receipt)) == receipt


@dataclass(frozen=True)
class Attachment:
    name: str
    data: bytes
    path: Path | None = None


@dataclass(frozen=True)
class NewerInbound:
    """What Inbound may become: fields the codec has never heard of, nested plain data."""

    text: str
    attachments: tuple[Attachment, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)


def test_new_fields_and_nested_plain_data_travel_without_a_change() -> None:
    sent = NewerInbound(
        "see file", (Attachment("a.png", b"\x89PNG\x00\xff", Path("/tmp/a.png")),), {"n": 1}
    )
    plain = json.loads(json.dumps(wire.to_plain(sent)))
    assert wire.from_plain(NewerInbound, plain) == sent


def test_peers_one_version_apart_understand_each_other() -> None:
    body = json.loads(wire.encode_inbound(Inbound("cli", "cli:dm:a", "cli-a", "hi")))
    body["mood"] = {"name": "x"}  # a newer sender's field: ignored
    del body["message_id"]  # an older sender: the default
    received = wire.decode_inbound(json.dumps(body).encode())
    assert received == Inbound("cli", "cli:dm:a", "cli-a", "hi", message_id=None)


def test_answer_messages_that_are_not_calls_are_wire_errors() -> None:
    for body in [b'{"op": "finish"}', b'[{"op": "shout"}]', b'[{"op": "begin", "arg": "x"}]']:
        with pytest.raises(wire.WireError):
            wire.decode_calls(body)


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"platform": 1}', b'{"platform":"x","session_key":"s"}'],
)
def test_a_message_that_is_not_an_inbound_is_a_wire_error(body: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.decode_inbound(body)


def test_json_nested_deeper_than_the_stack_is_a_wire_error_not_a_crash() -> None:
    nested = b"[" * 50_000 + b"]" * 50_000  # json.loads raises RecursionError on it
    with pytest.raises(wire.WireError, match="nested too deep"):
        wire.decode_inbound(nested)
    with pytest.raises(wire.WireError):
        wire.decode_calls(nested)
    with pytest.raises(wire.WireError):
        wire.parse_destination(nested.decode())


async def test_the_calls_of_an_answer_replay_into_any_outbound(tmp_path: Path) -> None:
    on_disk = tmp_path / "export.zip"
    on_disk.write_bytes(b"PK\x03\x04 zip bytes")
    calls = [
        wire.call("begin", True),
        wire.call("notice", "consolidating"),
        wire.call("add_text", "part one, "),
        wire.call("add_text", "part two"),
        # A path on the worker's machine means nothing to the ingress: its bytes travel.
        wire.call("attach_file", OutFile("export.zip", "application/zip", path=on_disk)),
        wire.call("offer", (Button("Yes", "/wipe confirm 1a2b"),)),
        wire.call("finish"),
    ]
    out = BufferedOutbound()
    body = wire.encode_calls(calls[:3]), wire.encode_calls(calls[3:])  # two messages
    await wire.replay([c for part in body for c in wire.decode_calls(part)], out)
    reply = out.reply
    assert reply.text == "part one, part two" and reply.private
    assert reply.files == (OutFile("export.zip", "application/zip", data=on_disk.read_bytes()),)
    assert reply.buttons == (Button("Yes", "/wipe confirm 1a2b"),)
    assert out.notices == ["consolidating"]


async def test_an_error_call_raises_as_a_failing_core_would() -> None:
    out = BufferedOutbound()
    calls = wire.decode_calls(wire.encode_calls(
        [wire.call("begin", False), wire.call("add_text", "half"), wire.call("error", "boom")]
    ))  # fmt: skip
    with pytest.raises(wire.RemoteTurnFailed):
        await wire.replay(calls, out)
    with pytest.raises(RuntimeError):
        out.reply  # noqa: B018 - never finished


def test_a_call_with_the_wrong_argument_is_refused_by_the_sender() -> None:
    with pytest.raises(wire.WireError):
        wire.call("add_text", 42)


def test_a_large_body_is_split_and_joins_back() -> None:
    body = bytes(range(256)) * 40
    parts = wire.split(body, 1000)
    assert len(parts) == 11 and all(len(p) <= 1000 for p in parts)
    assert b"".join(parts) == body
    assert wire.split(b"small", 1000) == [b"small"]
    assert wire.part_of({wire.PART: "3/11"}) == (3, 11)
    assert wire.part_of(None) == (0, 1)
    with pytest.raises(wire.WireError):
        wire.part_of({wire.PART: "11/11"})


def test_a_users_partition_is_the_same_in_every_process_and_version() -> None:
    keys = [f"telegram-{n}" for n in range(50)]  # their repr is valid Python
    here = [partition_of(key, 16) for key in keys]
    for seed in ("1", "2"):  # str hashes differ per process: the partition must not
        code = "from bot.cluster.partition import partition_of as p\n"
        code += f"print([p(k, 16) for k in {keys}])"
        there = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert json.loads(there.stdout) == here
    # Pinned: a change would move users away from the worker that holds their memory.
    assert partition_of("telegram-42", 16) == 2
    assert partition_of("discord-8123", 64) == 31


def test_users_spread_evenly_over_partitions() -> None:
    counts = Counter(partition_of(f"telegram-{n}", 16) for n in range(16_000))
    assert set(counts) == set(range(16))
    assert max(counts.values()) < 1.1 * 1000 and min(counts.values()) > 0.9 * 1000


def test_partition_ranges() -> None:
    assert parse_ranges("0-7", 16) == list(range(8))
    assert parse_ranges("0-3, 8-11,15", 16) == [0, 1, 2, 3, 8, 9, 10, 11, 15]
    assert describe_ranges([0, 1, 2, 3, 8, 9, 10, 11, 15]) == "0-3,8-11,15"
    for bad, said in [("0-16", "past the last partition, 15"), ("x", "not a partition"),
                      ("5-2", "lower to a higher"), ("-1", "not a partition")]:  # fmt: skip
        with pytest.raises(RangeError, match=said):
            parse_ranges(bad, 16)


class Published:
    """An answer message as the ingress receives it (the worker's headers, one attempt's seq)."""

    def __init__(self, attempt: str, seq: int, calls: list[tuple[str, object]]) -> None:
        self.headers = {wire.ATTEMPT: attempt, wire.SEQ: str(seq)}
        self.data = wire.encode_calls([wire.call(op, arg) for op, arg in calls])  # type: ignore[arg-type]


async def replayed(messages: list[Published]) -> BufferedOutbound:
    """What the adapter gets from these messages, arriving in this order one by one."""
    from bot.cluster.assembly import Assembly

    assembly = Assembly()
    out = BufferedOutbound()
    replay = asyncio.create_task(assembly.replay(out))
    for msg in messages:
        assembly.add(msg)  # type: ignore[arg-type]
        await asyncio.sleep(0)
    await asyncio.wait_for(replay, 5)
    return out


@pytest.mark.parametrize(
    ("second", "shown"),
    [
        ("Hello world, again.", "Hello world, again."),  # the same words: only the rest added
        ("Hi there.", "Hello wor\n\nHi there."),  # other words: nothing shown is taken back
    ],
)
async def test_an_answer_a_second_worker_finished_goes_on_after_what_was_shown(
    second: str, shown: str
) -> None:
    """The first worker died mid-answer ("Hello wor" shown); the next one's attempt starts
    over and is complete."""
    out = await replayed(
        [
            Published("a", 0, [("begin", False), ("add_text", "Hello wor")]),
            Published("b", 0, [("begin", False), ("add_text", second)]),
            Published("b", 1, [("finish", None)]),
        ]
    )
    assert out.reply.text == shown


async def test_a_second_attempt_after_the_first_finished_is_not_replayed() -> None:
    out = await replayed(
        [
            Published("a", 1, [("add_text", " world"), ("finish", None)]),  # out of order
            Published("a", 0, [("begin", True), ("add_text", "Hello")]),
            Published("b", 0, [("begin", True), ("add_text", "Other"), ("finish", None)]),
        ]
    )
    assert out.reply.text == "Hello world" and out.reply.private


def _delivered(
    subject: str, headers: dict[str, str], body: bytes, *, seq: int = 5, late_s: float = 0.0
) -> Msg:
    """A message as JetStream hands it over: its ack subject carries the stream, the sequence
    and when the stream stored it (`late_s` after it was signed)."""
    signed_ms = int(headers.get(wire.TIME, "0") or 0)
    stored_ns = (signed_ms * 1_000_000) + int(late_s * 1e9)
    reply = f"$JS.ACK.LG_IN.workers.1.{seq}.{seq}.{stored_ns}.0"
    return Msg(None, subject=subject, reply=reply, data=body, headers=dict(headers))  # type: ignore[arg-type]


def _why(signer: Any, kind: str, msg: Msg) -> str | None:
    refusal = signer.refusal(kind, msg)
    return None if refusal is None else refusal.detail


def test_a_signature_covers_kind_subject_headers_and_body() -> None:
    from bot.cluster.signing import Signer

    key = "k" * 40
    ours = Signer(key)
    body = wire.encode_inbound(Inbound("cli", "cli:dm:a", "cli-a", "hi"))
    headers = {wire.REPLY: "lightgrep.out.i1", wire.KEY: "k1", wire.MSG_ID: "m1"}
    ours.sign("message", "lightgrep.in.3", headers, body)
    assert _why(ours, "message", _delivered("lightgrep.in.3", headers, body)) is None
    changed = [
        ("answer", "lightgrep.in.3", headers, body),  # a message does not pass for an answer
        ("message", "lightgrep.in.4", headers, body),  # another partition
        ("message", "lightgrep.in.3", {**headers, wire.REPLY: "lightgrep.out.thief"}, body),
        ("message", "lightgrep.in.3", {**headers, wire.DESTINATION: "{}"}, body),  # added
        ("message", "lightgrep.in.3", headers, body.replace(b"hi", b"ho")),
        ("message", "lightgrep.in.3", {**headers, wire.TIME: "1"}, body),  # the time changed
    ]
    for seq, (kind, subject, said, sent) in enumerate(changed, start=10):
        why = _why(ours, kind, _delivered(subject, said, sent, seq=seq))
        assert why is not None and why.startswith("signed with none of"), why
    other = Signer("x" * 40)
    assert _why(other, "message", _delivered("lightgrep.in.3", headers, body)) is not None
    unsigned = {k: v for k, v in headers.items() if k != wire.MAC}
    assert _why(ours, "message", _delivered("lightgrep.in.3", unsigned, body)) == "not signed"
    # private_network = true: the unsigned are taken, another key's still not.
    lenient = Signer(key, required=False)
    assert _why(lenient, "message", _delivered("lightgrep.in.3", unsigned, body, seq=20)) is None
    strange = Signer("x" * 40, required=False)
    assert _why(strange, "message", _delivered("lightgrep.in.3", headers, body)) is not None
    assert _why(Signer(None), "message", _delivered("lightgrep.in.3", unsigned, body)) is None


def test_a_copy_is_refused_and_a_redelivery_taken() -> None:
    """The same stored message delivered again is taken; the signed message published again
    (a new sequence) is refused, and so is one stored long after it was signed. A key list:
    the first signs, every one verifies."""
    from bot.cluster.signing import Signer

    old, new = "o" * 40, "n" * 40
    sender, receiver = Signer(old), Signer([new, old], max_age_s=60)
    body = wire.encode_inbound(Inbound("cli", "cli:dm:a", "cli-a", "hi"))
    headers = {wire.REPLY: "lightgrep.out.i1", wire.KEY: "k1", wire.MSG_ID: "m1"}
    sender.sign("message", "lightgrep.in.3", headers, body)
    first = _delivered("lightgrep.in.3", headers, body, seq=7)
    assert _why(receiver, "message", first) is None  # signed with the old key: still taken
    again = _delivered("lightgrep.in.3", headers, body, seq=7)
    assert _why(receiver, "message", again) is None  # a redelivery of the same stored message
    copy = receiver.refusal("message", _delivered("lightgrep.in.3", headers, body, seq=8))
    assert copy is not None and copy.reason == "replayed"
    stale = dict(headers)
    sender.sign("message", "lightgrep.in.3", stale, body)
    late = receiver.refusal("message", _delivered("lightgrep.in.3", stale, body, seq=9, late_s=61))
    assert late is not None and late.reason == "replayed"
    assert Signer("x" * 40).refusal("message", _delivered("lightgrep.in.3", headers, body))


async def test_an_answer_read_aloud_crosses_as_a_voice() -> None:
    """Between a worker and an ingress, a voice reply stays a voice (Telegram's sendVoice)."""
    voice = OutFile("answer.ogg", "audio/ogg", data=b"OggS opus", voice=True)
    calls = [wire.call("begin", False), wire.call("attach_file", voice), wire.call("finish")]
    out = BufferedOutbound()
    await wire.replay(wire.decode_calls(wire.encode_calls(calls)), out)
    assert out.reply.files == (voice,)
