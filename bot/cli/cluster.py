"""`lightgrep ingress`, `worker` and `partitions`: several processes over NATS (bot/cluster/)."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from bot.cli.common import (
    EXIT_USAGE,
    UserError,
    describe_endpoint,
    load,
    only_writer,
    platform_factory,
    require_credentials,
    sized,
    workspaces_dir,
)
from bot.cli.core import BuiltCore, ClusterParts, build_core

if TYPE_CHECKING:
    import asyncio

    from bot.cluster.worker import Worker
    from bot.config import Config

log = logging.getLogger("lightgrep")


async def cmd_ingress(args: argparse.Namespace) -> int:
    """The enabled platforms, answered by the workers through NATS JetStream."""
    from bot.chats import ChatBook
    from bot.cli.serve import observed, serve, stop_on_signals
    from bot.cluster.chats import SharedChats
    from bot.cluster.connection import ClusterError
    from bot.cluster.ingress import BrokerCore, ingress_id_for
    from bot.platform import Resender

    config = load(args.config)
    names = config.enabled_platforms()
    if not names:
        raise UserError(
            f"no platform is enabled in {config.source or 'the configuration'}: an ingress "
            "serves the platforms whose section says enabled = true",
            EXIT_USAGE,
        )
    factories = {name: platform_factory(name) for name in names}
    # The platforms keep their state here (Telegram's spool): one ingress per folder.
    with only_writer(config):
        # The chats' settings are the cluster's: its adapters decide by the workers' book.
        chats = SharedChats(workspaces_dir(config))
        ChatBook.install(workspaces_dir(config), chats)
        core = BrokerCore(config.cluster, ingress_id_for(workspaces_dir(config)), chats)
        with stop_on_signals() as stop:
            try:
                try:
                    if not await core.start(stop):
                        return 0
                except ClusterError as exc:
                    raise UserError(str(exc)) from None
                adapters = [factories[name](config, core) for name in names]
                for adapter in adapters:  # before any await: answers may be waiting already
                    if isinstance(adapter, Resender):
                        core.send_with(adapter.name, adapter)
                async with observed(config.metrics.listen, adapters, None, core.health):
                    await serve(adapters, stop)
            finally:
                await core.close()
    log.info("stopped")
    return 0


async def cmd_worker(args: argparse.Namespace) -> int:
    """The agent, answering the messages of some partitions from NATS JetStream."""
    import asyncio

    from bot.cli.serve import close_agent, observed, stop_on_signals
    from bot.cluster.chats import SharedChats
    from bot.cluster.connection import ClusterError
    from bot.cluster.lease import this_worker
    from bot.cluster.partition import RangeError, describe_ranges, parse_ranges, serves
    from bot.cluster.people import SharedPeople
    from bot.cluster.worker import Worker

    config = load(args.config)
    try:
        partitions = parse_ranges(args.partitions, config.cluster.partitions)
    except RangeError as exc:
        raise UserError(f"--partitions: {exc}", EXIT_USAGE) from None
    require_credentials(config)
    log.info(
        "worker for partitions %s: %s; memory in %s",
        describe_ranges(partitions),
        describe_endpoint(config),
        workspaces_dir(config),
    )
    sizing = await sized(config)
    with only_writer(config):  # its own workspaces folder, as `run` has
        # The link table and codes are the cluster's (people.py), read at the connection; so
        # are the chats' settings (a group's, for every worker).
        people = SharedPeople(
            workspaces_dir(config), owns=serves(partitions, config.cluster.partitions)
        )
        chats = SharedChats(workspaces_dir(config))
        built = build_core(config, sizing, "worker", ClusterParts(people, chats))
        agent = built.agent
        agent.start()
        try:
            me = this_worker(workspaces_dir(config))
            worker = Worker(
                built.core, config.cluster, partitions, me, people,
                before_serving=agent.people.finish_shipping, chats=chats,
            )  # fmt: skip
            async with observed(config.metrics.listen, [], config.llm, worker.health):
                with stop_on_signals(agent.stopping) as stop:
                    reminders = asyncio.ensure_future(_remind(built, worker, config, stop))
                    try:
                        await worker.run(stop)
                    finally:
                        stop.set()
                        await reminders
        except ClusterError as exc:
            raise UserError(str(exc)) from None
        finally:
            log.info("stopping: finishing pending memory work")
            await close_agent(built)
    log.info("stopped")
    return 0


async def _remind(built: BuiltCore, worker: Worker, config: Config, stop: asyncio.Event) -> None:
    """Once the worker holds its partitions: the reminders of its people, sent through the
    ingresses (bot/cluster/push.py), one sender per platform the configuration knows."""
    import asyncio

    from bot.cli.serve import reminding

    serving = asyncio.ensure_future(worker.ready.wait())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    serving.cancel()
    stopping.cancel()
    if stop.is_set():
        return
    for platform in config.platforms:
        built.agent.send_with(platform, worker.sender(platform))
    async with reminding(built, stop, worker.owns):
        await stop.wait()


async def cmd_partitions(args: argparse.Namespace) -> int:
    """Each user of this workspaces folder with their partition: which folders to move or
    delete when partitions change workers (docs/cluster.md, "Workers")."""
    from bot.cluster.partition import RangeError, parse_ranges, partition_of
    from memory.workspace import Workspaces

    config = load(args.config, writer=False)
    count = config.cluster.partitions
    try:
        kept = set(parse_ranges(args.outside, count)) if args.outside else set()
    except RangeError as exc:
        raise UserError(f"--outside: {exc}", EXIT_USAGE) from None
    workspaces = Workspaces(workspaces_dir(config), writer=False)
    for key in workspaces.user_keys():
        partition = partition_of(key, count)
        if partition not in kept:
            print(f"{partition}\t{key}\t{workspaces.root_of(key)}")
    return 0
