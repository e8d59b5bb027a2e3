"""/import: a ChatGPT or Claude export, sent as a file with the command, into the person's
HISTORY.md (memory.importing; docs/import.md).

The file was downloaded by the intake within [media] max_import_bytes (bot.media.rules,
`importing`); a larger one is the operator's, through `lightgrep import`. The import runs in a
thread, with the person's files held (exclusive()): no turn or consolidation of theirs writes
meanwhile, and other people's turns go on.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from bot.commands.context import CommandContext
from bot.inbound import Attachment
from bot.media.rules import EXPORT, TOO_LARGE
from memory.importing.formats import NAMES, conversations, detect
from memory.importing.history import Imported, import_conversations
from memory.importing.sources import ImportRefused, open_json
from memory.workspace import Workspace

HOW = (
    "Send your export as a file with /import as its caption: the zip ChatGPT mails you "
    "(Settings → Data controls → Export data), or Claude's (Settings → Privacy → Export data), "
    "or the conversations.json inside it."
)


async def cmd_import(ctx: CommandContext, args: str) -> str:
    files = [a for a in ctx.inbound.attachments if a.kind == EXPORT]
    if not files:
        return HOW
    file = files[0]
    if file.data is None:
        return _not_taken(ctx, file)
    with tempfile.TemporaryDirectory(prefix="lightgrep-import-") as folder:
        path = Path(folder) / _safe_name(file.name)
        path.write_bytes(file.data)
        so_far = Imported()

        def keep(progress: Imported) -> None:
            nonlocal so_far
            so_far = progress

        try:
            service = await asyncio.to_thread(detect, path)
            if service == "lightgrep":
                return (
                    "That is a LightGrep archive: the operator of this bot brings it in with "
                    f"`lightgrep import lightgrep FILE --user {ctx.inbound.user_key}` "
                    "(it restores or merges whole files)."
                )
            async with ctx.exclusive():
                done = await asyncio.to_thread(_run, ctx.workspace, service, path, keep)
        except ImportRefused as exc:
            kept = (
                f" The {so_far.conversations:,} conversations before that point are in your "
                "history; the same file again adds the rest of them."
                if so_far.conversations
                else " Nothing was added."
            )
            return f"I couldn't import that file: {exc}.{kept}"
    return _done_text(NAMES[service], done)


def _run(
    workspace: Workspace, service: str, path: Path, progress: Callable[[Imported], None]
) -> Imported:
    with open_json(path) as opened:
        return import_conversations(
            workspace.memory,
            service,
            conversations(opened.stream, service, name=path.name),
            progress,
        )


def _done_text(service: str, done: Imported) -> str:
    skipped = (
        f" {done.skipped:,} were imported before, and I left them as they were."
        if done.skipped
        else ""
    )
    if not done.conversations:
        return f"Nothing new: every conversation of that {service} export is in your history."
    return (
        f"Imported {done.conversations:,} {service} conversations into your history "
        f"({done.entries:,} entries, each at its own date): /recall finds them.{skipped}"
    )


def _not_taken(ctx: CommandContext, file: Attachment) -> str:
    if file.skipped == TOO_LARGE and file.limit:
        size = f"{file.size / 1e6:.0f} MB" if file.size else "larger than that"
        return (
            f"{file.name} is {size}, more than I take in a chat ({file.limit / 1e6:.0f} MB). "
            "The operator of this bot can import it for you with "
            f"`lightgrep import chatgpt|claude FILE --user {ctx.inbound.user_key}`."
        )
    return f"I couldn't download {file.name}; please send it again."


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", Path(name).name)[:80].lstrip(".") or "export"
