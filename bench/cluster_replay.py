"""Captured cluster messages published again (issue 32, finding 3): how many copies are
answered, and how many people's choices they undo. A worker with the real Agent and an ingress
in this process, over a real nats-server; someone who may read `<prefix>.in.>` keeps every
signed message.

Each of --people people says `/privacy groups on`, then `/privacy groups off`; the captured
"on" of each is published again, (a) after the age limit (`[cluster] max_message_age_s` = 2,
the copies 4 s later) and (b) within it (the default 60 s, the copies 1 s later). JetStream's
duplicate window (2 minutes) would drop a copy sent sooner than that; the bench shortens it on
the server as the review's 2 minutes of waiting did. Printed per case: copies answered, people
whose choice is "on" again afterwards, copies refused (lightgrep_cluster_rejected "replayed"),
and the median and worst time of the people's own /privacy meanwhile.

Run: python bench/cluster_replay.py [--people 10]   (about half a minute; a temp dir)
Runs on older code as well, for before/after figures.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nats  # noqa: E402
import nats.errors  # noqa: E402

from bot.cluster import wire  # noqa: E402
from bot.cluster.connection import Names  # noqa: E402
from bot.inbound import Inbound  # noqa: E402
from memory.workspace import Workspaces  # noqa: E402
from tests.rigs.agent import make_agent  # noqa: E402
from tests.rigs.cluster import ask, ingress, rejected, serving, settings  # noqa: E402
from tests.rigs.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.rigs.nats_server import NatsServer  # noqa: E402


def message(person: int, text: str, n: int) -> Inbound:
    return Inbound(
        "telegram", f"telegram:dm:{person}", f"telegram-{person}", text, message_id=f"{person}:{n}"
    )


async def case(folder: Path, people: int, max_age_s: float | None, wait_s: float) -> None:
    server = await NatsServer(folder / "nats", folder / "nats.log").start()
    llm = await FakeOpenAI().start()
    try:
        changes = {} if max_age_s is None else {"max_message_age_s": max_age_s}
        cluster = settings(server, **changes)
        names = Names(cluster.subject_prefix)
        agent = make_agent(llm, folder / "w")
        before = rejected("message", "replayed")
        raw = await nats.connect(server.url)
        async with serving(agent, cluster, folder / "w"), ingress(cluster) as core:
            tap = await raw.subscribe(f"{names.prefix}.in.>")
            await raw.flush()
            for p in range(people):
                await ask(core, message(p, "/privacy groups on", 1))
                await ask(core, message(p, "/privacy groups off", 2))
            captured = [await tap.next_msg(timeout=5) for _ in range(2 * people)]
            ons = [m for m in captured if b"/privacy groups on" in m.data]
            js = raw.jetstream()
            config = (await js.stream_info(names.in_stream)).config
            config.duplicate_window = 0.5
            await js.update_stream(config)
            answers = await raw.subscribe(names.out_subject(core.ingress_id))
            await raw.flush()
            await asyncio.sleep(wait_s)
            for m in ons:  # as they were, until JetStream stores each (it forgets an id on
                # a timer, a little after the window: the attacker just tries again)
                while True:
                    if not (await js.publish(m.subject, m.data, headers=m.headers)).duplicate:
                        break
                    await asyncio.sleep(0.2)
            waits = []
            for p in range(people):
                start = time.perf_counter()
                out = await ask(core, message(p, "/privacy", 3))
                waits.append(time.perf_counter() - start)
                assert "your choice" in out.reply.text
            copies = {(m.headers or {}).get(wire.KEY) for m in ons}
            answered_keys = set()
            while True:  # what came on the ingress's subject: the copies' answers are theirs
                try:
                    msg = await answers.next_msg(timeout=1.0)
                except nats.errors.TimeoutError:
                    break
                key = (msg.headers or {}).get(wire.KEY)
                if key in copies:
                    answered_keys.add(key)
            answered = len(answered_keys)
        await raw.close()
        await agent.aclose()
        from bot.commands.basic import MEMORY_IN_GROUPS

        workspaces = Workspaces(folder / "w")
        back_on = sum(
            workspaces.get(f"telegram-{p}").preferences.get(MEMORY_IN_GROUPS) is True
            for p in range(people)
        )
        label = "default 60 s" if max_age_s is None else f"{max_age_s:g} s"
        print(
            f"  copies {wait_s:g} s later (age limit {label}): answered {answered} of "
            f"{len(ons)}, choices turned back on {back_on} of {people}, refused as replays "
            f"{rejected('message', 'replayed') - before:g}; the people's /privacy meanwhile "
            f"median {statistics.median(waits) * 1000:.0f} ms, worst {max(waits) * 1000:.0f} ms"
        )
    finally:
        await llm.stop()
        await server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=10)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # each refused copy is logged: the figures say it
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{args.people} people, each /privacy groups on, off; the captured 'on' sent again:")
        await case(Path(tmp) / "after", args.people, 2.0, 4.0)
        await case(Path(tmp) / "within", args.people, None, 1.0)


if __name__ == "__main__":
    asyncio.run(main())
