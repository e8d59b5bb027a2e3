"""The `lightgrep` command.

Public: `main` (the entry point, `lightgrep = bot.cli.main:main`). Its subcommands live in
`common` (what they share), `core` (the one place the bot's core is built), `doctor`, `serve`
(running adapters until a signal), `control` (the operator's forget, export and wipe), `links`
(link, unlink, links) and `cluster` (ingress, worker, partitions).
"""

__all__ = ["main"]
