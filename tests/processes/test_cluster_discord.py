"""`lightgrep ingress` on the fake Discord as a real process, a worker beside it: Discord does
not deliver a message again, so an answer on its way when the ingress dies must still be sent,
once, by the ingress that restarts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.harness import BotProcess, child_env
from bot.cluster.connection import connect
from tests.rigs.agent import make_agent
from tests.rigs.cluster import SIGNING_KEY, WAIT_S, serving, settings
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.nats_server import NatsServer

pytestmark = pytest.mark.timeout(120)
DM_CHANNEL = 555
READY = "discord: connected as"


def ingress_process(
    tmp_path: Path, fake: FakeDiscord, nats: NatsServer, name: str = "ingress"
) -> BotProcess:
    home = tmp_path / name
    home.mkdir()
    config = home / "config.toml"
    config.write_text(
        f"[memory]\nworkspaces_dir = {json.dumps(str(home / 'workspaces'))}\n"
        f'[discord]\nenabled = true\ntoken = "{fake.token}"\nallow_from = ["*"]\n'
        f'api_base = "{fake.api_base}"\ngateway_url = "{fake.gateway_url}"\n'
        f"[cluster]\nnats_url = [{json.dumps(nats.url)}]\npartitions = 4\nack_wait_s = 2\n"
        f'lease_ttl_s = 2\nprivate_network = true\nsigning_key = "{SIGNING_KEY}"\n'
    )
    return BotProcess(config, child_env(tmp_path), home / f"{name}.log", command=("ingress",),
                      ready=READY)  # fmt: skip


async def until(check: Callable[[], object], what: str, proc: BotProcess) -> None:
    async def poll() -> None:
        while not check():  # noqa: ASYNC110 - polled: it looks at the fakes
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), WAIT_S)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}\n{proc.log_tail(30)}") from None


async def messages_waiting(nats: NatsServer, stream: str) -> int:
    client = await connect(settings(nats), "test", asyncio.Event())
    assert client is not None
    try:
        return (await client.jetstream().stream_info(stream)).state.messages
    finally:
        await client.close()


async def killed_before_sending(
    ingress: BotProcess, nats: NatsServer, fake: FakeDiscord
) -> None:
    """A DM answered by the worker, its ingress SIGKILLed while Discord holds the send (the
    answer never reached Discord)."""
    await ingress.start()
    fake.hold_messages = True
    person = user_payload(42, "ada")
    await fake.dispatch("MESSAGE_CREATE", fake.message(person, "hello", channel_id=DM_CHANNEL))
    await until(lambda: fake.held, "the answer on its way to Discord", ingress)
    assert await messages_waiting(nats, "lightgrep-in") == 0  # the worker is done
    await ingress.kill()
    fake.hold_messages = False
    assert fake.seen_in(DM_CHANNEL) == []


async def sent_once(fake: FakeDiscord, nats: NatsServer, by: BotProcess) -> None:
    await until(lambda: fake.seen_in(DM_CHANNEL), "the answer, sent again", by)
    await asyncio.sleep(1.0)  # nothing more comes
    assert fake.seen_in(DM_CHANNEL) == ["Here is the one answer."]
    for _ in range(100):  # acknowledged once Discord took it
        if not await messages_waiting(nats, "lightgrep-out"):
            break
        await asyncio.sleep(0.05)
    assert await messages_waiting(nats, "lightgrep-out") == 0


async def test_an_answer_whose_ingress_was_killed_before_sending_it_is_sent_once(
    tmp_path: Path, nats_server: NatsServer, discord_fake: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.queue(completion("Here is the one answer."))
    agent = make_agent(fake_llm, tmp_path / "w")
    ingress = ingress_process(tmp_path, discord_fake, nats_server)
    async with serving(agent, settings(nats_server), tmp_path / "w"):
        await killed_before_sending(ingress, nats_server, discord_fake)
        await ingress.start()  # the same folder: the same answers
        await sent_once(discord_fake, nats_server, ingress)
        assert await ingress.terminate() == 0
    assert len(fake_llm.chat_requests) == 1
    await agent.aclose()


async def test_another_ingress_sends_the_answer_of_one_that_does_not_come_back(
    tmp_path: Path, nats_server: NatsServer, discord_fake: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.queue(completion("Here is the one answer."))
    agent = make_agent(fake_llm, tmp_path / "w")
    dead = ingress_process(tmp_path, discord_fake, nats_server, "dead")
    other = ingress_process(tmp_path, discord_fake, nats_server, "other")
    async with serving(agent, settings(nats_server), tmp_path / "w"):
        await killed_before_sending(dead, nats_server, discord_fake)
        await other.start()  # its own folder, its own id: it adopts the dead one's answers
        await sent_once(discord_fake, nats_server, other)
        assert "has stopped with answers on their way" in other.log_tail(50)
        assert await other.terminate() == 0
    assert len(fake_llm.chat_requests) == 1
    await agent.aclose()


async def test_a_slash_command_answer_whose_ingress_was_killed_before_sending_it_is_sent_once(
    tmp_path: Path, nats_server: NatsServer, discord_fake: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    """A slash command's answer counts as sent only once Discord took it: the ingress killed
    while Discord holds the interaction's callback, the restarted one sends it as a follow-up."""
    agent = make_agent(fake_llm, tmp_path / "w")
    ingress = ingress_process(tmp_path, discord_fake, nats_server)
    async with serving(agent, settings(nats_server), tmp_path / "w"):
        await ingress.start()
        discord_fake.hold_callbacks = True
        interaction = discord_fake.slash(user_payload(42, "ada"), "new", channel_id=DM_CHANNEL)
        await discord_fake.dispatch("INTERACTION_CREATE", interaction)
        await until(lambda: discord_fake.held, "the answer on its way to Discord", ingress)
        await ingress.kill()
        discord_fake.hold_callbacks = False
        followups = f"/webhooks/{discord_fake.app_id}/{interaction['token']}"
        assert discord_fake.calls("POST", followups) == []
        await ingress.start()  # the same folder: the same answers
        await until(lambda: discord_fake.calls("POST", followups), "the follow-up", ingress)
        await asyncio.sleep(1.0)  # nothing more comes
        [followup] = discord_fake.calls("POST", followups)
        assert followup.body["content"]
        for _ in range(100):  # acknowledged once Discord took it
            if not await messages_waiting(nats_server, "lightgrep-out"):
                break
            await asyncio.sleep(0.05)
        assert await messages_waiting(nats_server, "lightgrep-out") == 0
        assert await ingress.terminate() == 0
    await agent.aclose()
