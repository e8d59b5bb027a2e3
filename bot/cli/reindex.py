"""`lightgrep reindex [--user KEY]`: the vectors of [search] embeddings brought up to date.

The bot embeds entries in the background as they are written and a history at its first
search; this does it now, for one person or everyone, showing progress: after switching
embeddings on for a big folder, or changing [search] model (every entry again). It writes the
vectors beside each HISTORY.md, so it takes the workspaces folder lock and refuses while a bot
holds it (the bot does the same work itself in the background).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bot.cli import common
from bot.cli.control import folder_held, open_workspaces


def add_command(sub: Any, common_options: argparse.ArgumentParser) -> None:
    """Add `reindex` to `lightgrep`'s parser (`sub`: its add_subparsers())."""
    reindex = sub.add_parser(
        "reindex",
        parents=[common_options],
        help="embed the history entries [search] embeddings has no vectors of yet",
    )
    reindex.add_argument("--user", metavar="KEY", help="only this user (e.g. telegram-42)")
    reindex.set_defaults(func=cmd_reindex)


async def cmd_reindex(args: argparse.Namespace) -> int:
    import asyncio  # (here: `lightgrep memory`, which loads this module, runs without a loop)

    from bot.llm.embeddings import meaning_of
    from memory.search.meaning import EmbedError

    config = common.load(args.config)
    meaning = meaning_of(config)
    if meaning is None:
        raise common.UserError(
            "[search] embeddings is off (or numpy, the embeddings extra, is missing): "
            "nothing to reindex"
        )
    if args.user:
        common.require_workspace(config, args.user)
    with folder_held(config, "recall"):
        workspaces = open_workspaces(config)
        keys = [args.user] if args.user else sorted(workspaces.user_keys())
        total = 0
        for key in keys:
            history = workspaces.get(key).history_path
            if not history.exists():
                continue
            try:
                total += await asyncio.to_thread(meaning.index, history, _progress(key))
            except EmbedError as exc:
                raise common.UserError(f"{key}: the embeddings endpoint failed: {exc}") from None
            print(f"{key}: up to date", file=sys.stderr)
    print(f"embedded {total} entries of {len(keys)} people with {meaning.embedder.model}")
    return 0


def _progress(key: str) -> Any:
    started = time.monotonic()

    def said(done: int, todo: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-9)
        print(f"{key}: {done}/{todo} entries ({rate:.1f}/s)", file=sys.stderr, flush=True)

    return said
