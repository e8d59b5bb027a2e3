"""/link in cluster mode, as real processes: two `lightgrep ingress`es (one serving the fake
Telegram, one the fake Discord) and two `lightgrep worker`s over a real nats-server. The two
accounts' keys hash to partitions of different workers: a code made through one ingress works
through the other, the joining side's files move to the worker of the person's partition, and
from then on both platforms' messages are answered there, from one memory."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.harness import BotProcess
from bot.cluster.partition import partition_of
from bot.cluster.people import SharedPeople
from bot.inbound import Inbound
from bot.keys import session_key
from tests.rigs.agent import make_agent, session_records
from tests.rigs.cli import STEP_TIMEOUT, write_config
from tests.rigs.cluster import SIGNING_KEY, ask, ingress, serving, settings
from tests.rigs.fakes.discord_server import FakeDiscord
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram
from tests.rigs.link import CODE, GROUP, TG, Person, llm_that_files
from tests.rigs.nats_server import NatsServer

pytestmark = pytest.mark.timeout(120)
PARTITIONS = 4
RANGES = ("0-1", "2-3")  # discord-77 is in partition 0, telegram-42 in 2: two workers
OTHER = 45  # a member of Bea's Telegram group; partition 0: worker 0


def cluster_section(nats: NatsServer) -> str:
    return (
        f'[cluster]\nnats_url = ["{nats.url}"]\npartitions = {PARTITIONS}\nack_wait_s = 2\n'
        f'lease_ttl_s = 3\nprivate_network = true\nsigning_key = "{SIGNING_KEY}"\n'
    )


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, dc: FakeDiscord, nats: NatsServer,
    env: dict[str, str],
) -> AsyncIterator[list[BotProcess]]:  # fmt: skip
    section = cluster_section(nats)
    platforms = {
        "telegram": (
            f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
            f'api_base = "{tg.api_base}"\npoll_timeout_s = 1\n',
            "telegram is ready",
        ),
        "discord": (
            f'[discord]\nenabled = true\ntoken = "{dc.token}"\nallow_from = ["*"]\n'
            f'api_base = "{dc.api_base}"\ngateway_url = "{dc.gateway_url}"\n',
            "discord is ready",
        ),
    }
    procs: list[BotProcess] = []
    for i, chosen in enumerate(RANGES):
        home = tmp_path / f"worker{i}"
        home.mkdir()
        config = write_config(home, llm, section)
        procs.append(BotProcess(config, env, home / "log", command=("worker", "--partitions",
                                chosen), ready="worker: serving partitions"))  # fmt: skip
    for name, (platform, ready) in platforms.items():
        home = tmp_path / f"ingress-{name}"
        home.mkdir()
        config = write_config(home, llm, platform + section)
        procs.append(BotProcess(config, env, home / "log", command=("ingress",), ready=ready))
    try:
        await asyncio.gather(*(p.start() for p in procs))
        yield procs
    finally:
        for proc in procs:
            if proc.proc is not None and proc.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    await proc.kill()


def in_group(tg: FakeTelegram, text: str) -> bool:
    return any(text in m.text for m in tg.sent_to(GROUP))


def tails(procs: list[BotProcess]) -> str:
    return "\n".join(f"--- {p.log_path.parent.name}\n{p.log_tail(20)}" for p in procs)


async def test_a_link_made_through_one_ingress_is_honoured_through_the_other(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, nats_server: NatsServer, tmp_path: Path,
    child_env: dict[str, str],
) -> None:  # fmt: skip
    assert partition_of("discord-77", PARTITIONS) in (0, 1)
    assert partition_of("telegram-42", PARTITIONS) in (2, 3)
    assert partition_of(f"telegram-{OTHER}", PARTITIONS) in (0, 1)
    llm_that_files(
        fake_llm,
        "[2025-03-01 10:00] Bea said she keeps bees in Lisbon.",
        "## User Information\n\n- Keeps bees in Lisbon\n",
    )
    dc = await FakeDiscord().start()
    try:
        async with cluster(tmp_path, fake_llm, fake_telegram, dc, nats_server, child_env) as procs:
            bea = Person(fake_telegram, dc)
            try:
                # A group's trigger, set through worker 1 (Bea's), holds at the ingress for a
                # message of a member worker 0 serves (the chats' settings are the cluster's).
                fake_telegram.admins[GROUP].add(TG)
                fake_telegram.group(GROUP, TG, "/group trigger always")
                await fake_telegram.wait_until(
                    lambda: in_group(fake_telegram, "every message"), wait_s=STEP_TIMEOUT
                )
                fake_telegram.group(GROUP, OTHER, "nice weather")  # no @mention
                await fake_telegram.wait_until(
                    lambda: in_group(fake_telegram, "Noted."), wait_s=STEP_TIMEOUT
                )
                await bea.discord("I like green tea", "Noted.")  # worker 0 keeps it
                offer = await bea.telegram("/link", "Your link code")  # made by worker 1
                [code] = set(CODE.findall(offer))
                wrong = await bea.discord("/link ABCDEFGH", "not valid")
                assert "telegram" not in wrong
                question = await bea.discord(f"/link {code}", "/link confirm")  # worker 0
                assert "telegram-42" in question and "merged into that memory" in question
                linked = await bea.discord("/link confirm", "Linked:")
                assert "telegram-42" in linked and "discord-77" in linked
                assert not (tmp_path / "worker0" / "workspaces" / "discord-77").exists()
                reused = await bea.discord(f"/link {code}", "not valid")  # used: everywhere
                assert "Linked" not in reused

                await bea.telegram_told("now shared with discord-77")  # by worker 1
                await bea.telegram("I keep bees in Lisbon", "Noted.")
                await bea.telegram("/new", "fresh conversation")  # filed in the background
                history = tmp_path / "worker1" / "workspaces" / "telegram-42" / "HISTORY.md"
                await fake_telegram.wait_until(
                    lambda: history.exists() and "bees" in history.read_text(),
                    wait_s=STEP_TIMEOUT,
                )
                memory = await bea.discord("/memory", "Keeps bees in Lisbon")  # on worker 1
                assert "Keeps bees" in memory
                recall = await bea.discord("/recall bees", "Lisbon")
                assert "2025-03-01" in recall
                status = await bea.discord("/status", "Linked accounts")
                assert "telegram-42" in status

                await bea.discord("/unlink", "/unlink confirm")
                await bea.discord("/unlink confirm", "Unlinked")
                alone = await bea.discord("/memory", "I don't remember anything")  # worker 0
                assert "bees" not in alone
                await bea.telegram_told("discord-77 no longer shares your memory")
                still = await bea.telegram("/memory", "Keeps bees in Lisbon")
                assert "no longer shares" not in still
            except (AssertionError, TimeoutError) as exc:
                raise AssertionError(f"{exc}\n{tails(procs)}") from None
            workers = [tmp_path / f"worker{i}" / "workspaces" for i in range(2)]
            # The Discord side's files left worker 0 at the link; its conversation stayed with
            # the memory (worker 1's), with what was said before the link and after it.
            sessions = workers[1] / "telegram-42" / "sessions"
            [dm] = [p for p in sessions.iterdir() if p.name.startswith("discord")]
            assert "green tea" in dm.read_text()
            assert "discord-77" not in (workers[1] / ".links.json").read_text()
    finally:
        await dc.stop()


async def test_a_message_published_before_the_link_is_answered_by_the_persons_worker(
    fake_llm: FakeOpenAI, nats_server: NatsServer, tmp_path: Path
) -> None:
    """Queued for the old partition (its worker was down when the link was made): the worker
    that fetches it forwards it to the person's partition instead of writing a second copy."""
    fake_llm.default = lambda request: completion("Noted.")
    cluster = settings(nats_server)
    agents, people = [], []
    for i in range(2):
        shared = SharedPeople(tmp_path / f"w{i}")
        agent = make_agent(fake_llm, tmp_path / f"w{i}", people=shared)
        agents.append(agent)
        people.append(shared)
    said = Inbound("discord", session_key("discord", "dm", "77"), "discord-77", "hello there")
    try:
        async with ingress(cluster) as core, serving(
            agents[1], cluster, tmp_path / "w1", [2, 3], people[1]
        ):  # fmt: skip
            asking = asyncio.create_task(ask(core, said))  # to partition 0: nobody serves it
            await people[1].change(lambda doc: {**doc, "links": {"discord-77": "telegram-42"}})
            async with serving(agents[0], cluster, tmp_path / "w0", [0, 1], people[0]):
                answer = await asking
        assert answer.reply.text == "Noted."
        kept = session_records(agents[1].workspaces.base_dir, "42")  # the Discord chat's
        assert [r.get("content") for r in kept if r.get("role") == "user"] == ["hello there"]
        assert not (agents[0].workspaces.base_dir / "discord-77").exists()
    finally:
        for agent in agents:
            await agent.aclose()


def test_a_shipment_a_crash_interrupted_is_finished_or_undone_by_the_table(
    tmp_path: Path,
) -> None:
    """Before serving, a worker looks at the workspaces it hid to pack (People._ship): one whose
    change the table has is the other worker's now; one whose change it has not comes back."""
    from memory.control.link import finish_shipping, shipping_root
    from memory.links import LinkTable
    from memory.workspace import Workspaces

    workspaces = Workspaces(tmp_path / "w")
    table = LinkTable(workspaces.base_dir)
    table.link("discord-77", "telegram-42")  # the shipped join made it into the table
    for key in ("discord-77", "cli-bob"):  # cli-bob's did not
        workspaces.get(key).memory.write(f"## User Information\n\n- {key} fact\n")
        workspaces.forget_user(key)
        workspaces.root_of(key).rename(shipping_root(workspaces, key, "join"))
    assert finish_shipping(workspaces, table) == 2
    assert sorted(p.name for p in workspaces.base_dir.iterdir() if p.is_dir()) == ["cli-bob"]
    assert "cli-bob fact" in workspaces.get("cli-bob").memory.read()


async def test_a_notice_arriving_for_a_workers_person_is_taken_at_once(
    fake_llm: FakeOpenAI, nats_server: NatsServer, tmp_path: Path
) -> None:
    """Files or notices for a person arriving in the cluster's table are taken by that
    person's worker as the table changes (People.arrive_soon), not at their next message:
    the notice is on file in their workspace, to be sent, with no message of theirs."""
    from memory.control.notices import NoticeFile

    shared = SharedPeople(tmp_path / "w")
    agent = make_agent(fake_llm, tmp_path / "w", people=shared)
    try:
        async with serving(agent, settings(nats_server), tmp_path / "w", people=shared):
            await shared.notify("telegram-42", "discord-77", "telegram-42 now shares memory")
            notices = NoticeFile(agent.workspaces.root_of("telegram-42"))
            deadline = asyncio.get_running_loop().time() + STEP_TIMEOUT
            while shared.arriving("telegram-42") or not notices.pending("discord-77"):
                assert asyncio.get_running_loop().time() < deadline, "not taken"
                await asyncio.sleep(0.05)
            [(_, to, text)] = notices.pending()
            assert (to, text) == ("discord-77", "telegram-42 now shares memory")
        assert fake_llm.chat_requests == []  # no message of theirs came
    finally:
        await agent.aclose()
