"""`lightgrep import … --facts`: facts learnt from the imported conversations into MEMORY.md.

The work is memory.importing.facts' (the consolidator's request and checks, only adding); here:
the agent built as `chat` builds it (its model, fallbacks, window, limits, usage book), the
estimate of tokens and cost shown and agreed to before any request (`--yes` agrees), every
call charged to the person and stopped politely when a limit is reached, and Ctrl-C. The same
command again continues where a run stopped.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from bot.cli import common

if TYPE_CHECKING:
    from bot.config import Config
    from memory.importing.facts import Estimate

AGAIN = "lightgrep import {kind} FILE --user {user} --facts"


async def learn_facts(config: Config, person: str, kind: str, *, yes: bool) -> int:
    """Estimate, ask, learn; the exit code."""
    from bot.cli.core import build_core
    from bot.usage import charged_to
    from memory.importing.facts import Learned, estimate, learn

    sizing = await common.sized(config)
    agent = build_core(config, sizing, "chat").agent
    again = AGAIN.format(kind=kind, user=person)
    try:
        writer = agent.consolidator.writer
        workspace = agent.workspaces.get(person)
        planned = await estimate(workspace, writer)
        if not planned.requests:
            print("facts: every imported conversation was learnt from already")
            return 0
        print(describe(planned, config, agent.memory_llm.model), flush=True)
        if not yes and not _agreed():
            print("facts: nothing asked; --facts again (or with --yes) learns them")
            return 0
        done = Learned()

        def show(so_far: Learned) -> None:
            nonlocal done
            done = so_far
            if sys.stderr.isatty():
                print(f"\r{so_far.conversations:,} conversations", end="", file=sys.stderr)

        try:
            with charged_to(person):
                done = await learn(
                    workspace, writer, stop=lambda: agent.limits.used_up(person), progress=show
                )
        except asyncio.CancelledError:  # Ctrl-C: the conversation in hand is asked again
            print(
                f"stopped after {done.conversations:,} conversations ({done.facts:,} facts "
                f"added); `{again}` goes on",
                file=sys.stderr,
            )
            raise
    finally:
        await agent.aclose()
    print(
        f"facts: {done.facts:,} added to MEMORY.md from {done.conversations:,} conversations "
        f"({done.requests:,} requests)"
        + (f"; {done.failed:,} answers failed the checks" if done.failed else "")
    )
    if done.stopped:
        print(
            f"stopped: {done.stopped}; {done.left:,} conversations left: `{again}` goes on",
            file=sys.stderr,
        )
        return common.EXIT_FAILURE
    return 0


def describe(planned: Estimate, config: Config, model: str) -> str:
    """The line shown before any request: conversations, requests, tokens, cost at [prices]."""
    from bot.usage import priced_estimate

    cost = priced_estimate(config, model, planned.prompt_tokens, planned.completion_tokens)
    priced = f", {cost} at [prices]" if cost is not None else " (no price set)"
    left_out = (
        f"; {planned.too_long:,} messages too long for one request are left out"
        if planned.too_long
        else ""
    )
    return (
        f"facts: {planned.conversations:,} imported conversations in {planned.requests:,} "
        f"requests, about {planned.tokens:,} tokens ({planned.prompt_tokens:,} read, "
        f"{planned.completion_tokens:,} written){priced}{left_out}"
    )


def _agreed() -> bool:
    """The operator's yes, read from standard input (no answer: no)."""
    print("learn facts from them? [y/N] ", end="", flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")
