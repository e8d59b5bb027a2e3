"""Building the core: the one place the Agent is made, for every role of the CLI.

`chat` (the terminal) is handed the agent itself; `run` and `worker` hand their adapters (or the
worker) a MeteredCore, every message and consolidation counted for /metrics. A worker's agent
is built with the cluster's parts, given here rather than set on it afterwards: the link table
and its codes, the files moving between workers (bot/cluster/people.py) and the chats'
settings (bot/cluster/chats.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the heavy imports come with build_core, for the commands that need it
    from bot.agent.agent import Agent
    from bot.agent.sizing import Sizing
    from bot.cluster.chats import SharedChats
    from bot.cluster.people import SharedPeople
    from bot.config import Config
    from bot.platform import Core

Role = Literal["chat", "run", "worker"]


@dataclass(frozen=True)
class ClusterParts:
    """A worker's share of the cluster: who is whom and the files on their way between
    workers, and every chat's settings."""

    people: SharedPeople
    chats: SharedChats


@dataclass(frozen=True)
class BuiltCore:
    """`agent`: what the command runs and stops (reminders, pending memory work); `core`: what
    it hands the adapters, or the worker."""

    agent: Agent
    core: Core


def build_core(
    config: Config, sizing: Sizing, role: Role, cluster: ClusterParts | None = None
) -> BuiltCore:
    """The core for `role`, with the window as `sizing` (bot.cli.common.sized) found it; a
    worker's needs `cluster`. Only under bot.cli.common.only_writer: the agent writes."""
    from bot.agent.agent import Agent

    if (role == "worker") != (cluster is not None):
        raise ValueError(f"the cluster's parts are a worker's only (role {role!r})")
    # The config as asked, not with the planned figures filled in: an automatic window must
    # stay automatic, or a smaller one the server names when refusing is never learnt.
    if role == "chat":
        agent = Agent(config, sizing=sizing)
        return BuiltCore(agent, agent)
    from bot.llm.chain import ChainLLM, chain_of, consolidation_chain, measure_by
    from bot.observe.metrics import (
        MeteredCore,
        MeteredLLM,
        count_consolidation,
        count_endpoint_call,
        watch_breakers,
    )
    from memory.tokens import TokenEstimator

    # The chains measure a request for a fallback's window with the agent's own estimate.
    estimator = TokenEstimator(image_tokens=config.llm.image_tokens)
    measure = measure_by(estimator)
    chain = chain_of(sizing.applied(config).llm, config.fallbacks, measure, count_endpoint_call)
    memory = None
    if config.consolidation:
        memory = consolidation_chain(config.llm, config.consolidation, measure, count_endpoint_call)
        watch_breakers(memory)
    in_use = None
    if isinstance(chain, ChainLLM):
        watch_breakers(chain)
        in_use = chain.in_use
    llm = MeteredLLM(chain)
    make = functools.partial(
        Agent,
        config,
        llm,
        sizing=sizing,
        on_consolidation=count_consolidation,
        memory_llm=None if memory is None else MeteredLLM(memory),
        estimator=estimator,
        in_use=in_use,
    )
    if cluster is None:
        agent = make()
    else:
        people = cluster.people
        agent = make(
            links=people,
            codes=people.codes,
            moves=people,
            chats=cluster.chats,
        )
    return BuiltCore(agent, MeteredCore(agent))
