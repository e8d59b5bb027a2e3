"""The operator's side of /link: `lightgrep link KEY INTO_KEY`, `unlink KEY` and `links`.

The same file work as the chat commands (memory.links, memory.control.link). Link and unlink
write, so they take the workspaces folder lock like `lightgrep wipe` (a running bot holds it:
the person then uses /link and /unlink in the chat); `links` only reads.

In cluster mode the table is the cluster's, in NATS (bot/cluster/people.py), and a worker's
`.links.json` is only its copy: link and unlink refuse there (the person uses the chat's
/link and /unlink, which work through any ingress), and `links` says it shows a copy. The
configuration has no switch for the mode (`lightgrep run` ignores [cluster]; the command
chooses): a folder is a cluster's once a worker or an ingress ran on it, which leaves the
folder's id file (bot/cluster/lease.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bot.cli import common
from bot.cli.control import folder_held, open_workspaces
from bot.config import Config


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add link, unlink and links to `lightgrep`'s parser (`sub`: its add_subparsers())."""
    link = sub.add_parser(
        "link", parents=[parent], help="join a user key to another's memory (merging it)"
    )
    link.add_argument("member", metavar="KEY", help="the key that joins, e.g. discord-7")
    link.add_argument("into", metavar="INTO_KEY", help="the key whose memory it joins")
    link.set_defaults(func=cmd_link)
    unlink = sub.add_parser("unlink", parents=[parent], help="separate a key from a shared memory")
    unlink.add_argument(
        "member", metavar="KEY", help="e.g. discord-7; it gets back what it had before the link"
    )
    unlink.set_defaults(func=cmd_unlink)
    links = sub.add_parser("links", parents=[parent], help="list the keys that share a memory")
    links.set_defaults(func=cmd_links)


def cluster_table(config: Config) -> str | None:
    """The name of the cluster's link table (its NATS bucket) when the workspaces folder is a
    cluster worker's or ingress's; None for one process's folder."""
    from bot.cluster.connection import Names
    from bot.cluster.lease import FOLDER_ID_FILE

    if not (Path(common.workspaces_dir(config)) / FOLDER_ID_FILE).exists():
        return None
    return Names(config.cluster.subject_prefix).links_bucket


def refuse_in_cluster(config: Config, command: str, instead: str) -> None:
    bucket = cluster_table(config)
    if bucket is not None:
        raise common.UserError(
            f"{common.workspaces_dir(config)} is a cluster's folder (a worker or an ingress ran "
            f"on it): the link table is the cluster's, in NATS (bucket {bucket}), and `lightgrep "
            f"{command}` would change this folder's copy only. {instead}"
        )


async def cmd_link(args: argparse.Namespace) -> int:
    from memory.control.link import merge
    from memory.links import LinkTable

    config = common.load(args.config)
    refuse_in_cluster(
        config, "link",
        "Let the person send /link in a private chat on one platform and /link <code> on the "
        "other (through any ingress): the cluster's workers merge the memory.",
    )  # fmt: skip
    if args.member == args.into:
        raise common.UserError("a key cannot be linked to itself", common.EXIT_USAGE)
    with folder_held(config, "link"):
        workspaces = open_workspaces(config)
        table = LinkTable(workspaces.base_dir)
        if table.resolve(args.member) == table.resolve(args.into):
            print(f"{args.member} and {args.into} share one memory already")
            return 0
        if table.is_linked(args.member):
            raise common.UserError(
                f"{args.member} is linked already ({', '.join(table.members(args.member))}): "
                f"lightgrep unlink {args.member} first"
            )
        merged = merge(workspaces, table, args.member, args.into)
        members = table.members(args.into)
    print(
        f"linked: {', '.join(members)} share one memory (merged {merged.facts} facts, "
        f"{merged.entries} history entries, {merged.files} files)"
    )
    return 0


async def cmd_unlink(args: argparse.Namespace) -> int:
    from memory.control.link import split
    from memory.links import LinkTable

    config = common.load(args.config)
    refuse_in_cluster(
        config, "unlink",
        f"Let the person send /unlink from the platform of {args.member} (through any ingress).",
    )  # fmt: skip
    with folder_held(config, "unlink"):
        workspaces = open_workspaces(config)
        table = LinkTable(workspaces.base_dir)
        if not table.is_linked(args.member):
            raise common.UserError(f"{args.member} is not linked to another key")
        others = [key for key in table.members(args.member) if key != args.member]
        split(workspaces, table, args.member)
    print(
        f"unlinked {args.member}: it has what it had before the link again; the memory stays "
        f"with {', '.join(others)}"
    )
    return 0


async def cmd_links(args: argparse.Namespace) -> int:
    from memory.links import LinkTable

    config = common.load(args.config, writer=False)
    table = LinkTable(common.workspaces_dir(config))
    people: dict[str, list[str]] = {}
    for member, home in table.all().items():
        people.setdefault(home, []).append(member)
    bucket = cluster_table(config)
    if bucket is not None:
        print(
            f"(a copy: the cluster's link table is in NATS, bucket {bucket}; this folder's "
            "worker wrote this as it last saw it)"
        )
    if not people:
        print("no linked keys")
    for home, members in sorted(people.items()):
        print(f"{home}: {', '.join(sorted(members))}")
    return 0
