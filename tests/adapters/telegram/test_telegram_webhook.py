"""The webhook under hostile input: connections that never finish a request, a body that never
comes, JSON nested too deep to parse, an update sent again after it was handled.

Real python-telegram-bot and the real Agent; the fake Bot API delivers by POST as Telegram does,
and a raw socket plays whoever else found the port (loopback only)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from adapters.telegram import webhook
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.telegram import by_prompt, eventually, make_config, running, webhook_config

UNFINISHED_HEAD = b"POST /tg/hook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_unfinished(port: int, count: int) -> list[Conn]:
    """`count` connections that each send the start of a request head and then nothing."""
    conns = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(UNFINISHED_HEAD)
        await writer.drain()
        conns.append((reader, writer))
    return conns


async def closed_by_server(reader: asyncio.StreamReader, wait_s: float) -> bool:
    """The server closed the connection within `wait_s` (whatever it sent before)."""
    try:
        async with asyncio.timeout(wait_s):
            while await reader.read(4096):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


def close_all(conns: list[Conn]) -> None:
    for _, writer in conns:
        writer.close()


async def test_a_request_head_that_never_ends_is_closed_at_its_deadline(
    tg: FakeTelegram,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Such connections were held for 59 s and more (aiohttp keeps a connection an hour);
    now each gets HEAD_TIMEOUT_S for its head, also one that keeps sending a header line."""
    monkeypatch.setattr(webhook, "HEAD_TIMEOUT_S", 0.5)
    config = webhook_config(tg, fake_llm, workspaces_dir)
    port = config.platforms["telegram"].webhook_port
    async with running(config):
        [(silent, silent_w)] = await open_unfinished(port, 1)
        [(trickling, trickling_w)] = await open_unfinished(port, 1)

        async def trickle() -> None:
            for n in range(100):
                trickling_w.write(f"X-Slow-{n}: x\r\n".encode())
                await asyncio.sleep(0.05)

        feeder = asyncio.create_task(trickle())
        try:
            assert await closed_by_server(silent, 5.0)
            assert await closed_by_server(trickling, 5.0)
            assert not feeder.done()  # it was still sending when it was cut off
        finally:
            feeder.cancel()
            close_all([(silent, silent_w), (trickling, trickling_w)])


async def test_a_delivery_gets_through_while_others_hold_more_connections_than_the_cap(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """At the fd limit the bot could not accept Telegram's POST; now at most MAX_CONNECTIONS
    are open, the longest waiting is closed for a new one, and the delivery is answered."""
    fake_llm.default = lambda request: completion("answered anyway")
    config = webhook_config(tg, fake_llm, workspaces_dir)
    port = config.platforms["telegram"].webhook_port
    over = 20
    async with running(config):
        conns = await open_unfinished(port, webhook.MAX_CONNECTIONS + over)
        try:
            tg.dm(42, "are you there?")
            assert await tg.deliver(tg.last_update_id, attempts=1) == [200]
            [answer] = await tg.wait_sent(42)
            closed = await asyncio.gather(*(closed_by_server(r, 1.0) for r, _ in conns))
        finally:
            close_all(conns)

    assert answer.text == "answered anyway"
    # The oldest ones made room (one more for the delivery's own connection); the newest stay.
    assert over <= sum(closed) <= over + 1
    assert closed[:over] == [True] * over and not any(closed[-50:])


async def test_a_body_that_never_comes_is_cut_off(
    tg: FakeTelegram,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(webhook, "BODY_TIMEOUT_S", 0.5)
    config = webhook_config(tg, fake_llm, workspaces_dir)
    port = config.platforms["telegram"].webhook_port
    async with running(config):
        assert tg.webhook is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                b"POST /tg/hook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n"
                b"X-Telegram-Bot-Api-Secret-Token: "
                + tg.webhook["secret_token"].encode()
                + b'\r\n\r\n{"update_id": 1'
            )
            async with asyncio.timeout(5.0):
                status = await reader.readline()
            assert await closed_by_server(reader, 5.0)
        finally:
            writer.close()
    assert status.startswith(b"HTTP/1.1 408")
    assert not fake_llm.chat_requests


async def test_json_nested_too_deep_is_refused_with_400_not_500(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """json.loads raised RecursionError: a 500, which Telegram retries for ever."""
    fake_llm.default = lambda request: completion("still here")
    async with running(webhook_config(tg, fake_llm, workspaces_dir)):
        nested = b"[" * 100_000 + b"]" * 100_000
        assert await tg.deliver_body(b'{"update_id": 7, "message": ' + nested + b"}") == 400
        tg.dm(42, "hello")
        assert await tg.deliver(tg.last_update_id, attempts=1) == [200]
        [answer] = await tg.wait_sent(42)
    assert answer.text == "still here"


async def test_an_update_sent_again_after_it_was_handled_is_not_answered_again(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Telegram (its 200 lost) or a replay sends a handled update again, in the same run or
    after a restart: it is acknowledged, and neither answered nor run again."""
    fake_llm.default = by_prompt(
        {"first": completion("first answer"), "second": completion("second answer")}
    )
    config = webhook_config(tg, fake_llm, workspaces_dir)
    async with running(config) as adapter:
        tg.dm(42, "first")
        first = tg.last_update_id
        assert await tg.deliver(first) == [200]
        await tg.wait_sent(42)
        assert adapter.intake is not None
        intake = adapter.intake
        await eventually(lambda: intake.in_flight() == 0)  # its turn is over
        assert await tg.deliver(first) == [200]
        tg.dm(42, "second")  # one person's updates run in order: a second answer comes first
        assert await tg.deliver(tg.last_update_id) == [200]
        await tg.wait_sent(42, 2)
    async with running(config):  # a new run, a new secret: the same update once more
        assert await tg.deliver(first) == [200]
        tg.dm(42, "third")
        assert await tg.deliver(tg.last_update_id) == [200]
        await tg.wait_sent(42, 3)

    assert [s.text for s in tg.sent_to(42)] == ["first answer", "second answer", "ok"]
    assert len(fake_llm.chat_requests) == 3


async def test_a_polled_update_whose_acknowledgement_was_lost_is_not_answered_again(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Polling: the bot stopped before Telegram heard the offset that acknowledges a handled
    update; after the restart Telegram returns it, and it gets no second answer."""
    fake_llm.default = by_prompt({"blue": completion("the blue door it is")})
    config = make_config(tg, fake_llm, workspaces_dir)
    async with running(config):
        tg.dm(42, "remember the blue door")
        update = tg.last_update_id
        await tg.wait_sent(42)
        await eventually(lambda: tg.acked(update))
    tg.redeliver(update)
    async with running(config):
        await eventually(lambda: tg.acked(update))
        tg.dm(42, "and now?")
        await tg.wait_sent(42, 2)

    assert [s.text for s in tg.sent_to(42)] == ["the blue door it is", "ok"]
