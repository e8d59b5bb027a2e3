"""/import: a ChatGPT or Claude export, sent as a file with the command, into the person's
HISTORY.md (memory.importing; docs/import.md).

The file was downloaded by the intake within [media] max_import_bytes (bot.media.rules,
`importing`); a larger one is the operator's, through `lightgrep import`. The import runs in a
thread, with the person's files held (exclusive()): no turn or consolidation of theirs writes
meanwhile, and other people's turns go on. Then it asks whether to learn facts from them
(`/import facts`, the estimate of tokens and cost in the question; confirmed, the agent runs it
in the background: bot.commands.context.FactsLearning).
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from bot.commands.confirm import CONFIRM_TTL_S
from bot.commands.context import CommandContext, FactsLearning
from bot.inbound import Attachment
from bot.media.rules import EXPORT, TOO_LARGE
from bot.outbound import Button, Reply
from memory.importing.formats import NAMES, conversations, detect
from memory.importing.history import Imported, import_conversations
from memory.importing.sources import ImportRefused, open_json
from memory.workspace import Workspace

FACTS = "import-facts"  # the confirmation's action
SAY_FROM_BYTES = 1_000_000  # an export this large is said to be importing before it is done
HOW = (
    "Send your export as a file with /import as its caption: the zip ChatGPT mails you "
    "(Settings → Data controls → Export data), or Claude's (Settings → Privacy → Export data), "
    "or the conversations.json inside it."
)


async def cmd_import(ctx: CommandContext, args: str) -> str | Reply:
    files = [a for a in ctx.inbound.attachments if a.kind == EXPORT]
    first, _, rest = args.strip().partition(" ")
    if not files and first.lower() == "facts" and ctx.facts is not None:
        return await _facts(ctx, ctx.facts, rest.strip())
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
            if ctx.say is not None and len(file.data) >= SAY_FROM_BYTES:
                size = f"{len(file.data) / 1e6:.1f} MB"
                await ctx.say(f"Importing your {NAMES[service]} export ({size})…\n\n")
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
    text = _done_text(NAMES[service], done)
    if not done.conversations or ctx.facts is None or ctx.facts.running():
        return text
    return await _ask_facts(ctx, ctx.facts, text + "\n\n")


async def _facts(ctx: CommandContext, facts: FactsLearning, args: str) -> str | Reply:
    """/import facts asks (with the estimate); /import facts confirm [token] starts."""
    user = ctx.inbound.user_key
    word, _, token = args.partition(" ")
    if word.lower() != "confirm":
        return await _ask_facts(ctx, facts, "")
    answer = ctx.confirmations.take(user, FACTS, token.strip())
    if answer.question is None:
        why = "has expired" if answer.problem == "expired" else "is not waiting"
        return f"That question {why}; nothing was asked of the model. /import facts asks again."
    if not facts.start():
        return "I'm learning from your imported conversations already."
    return (
        "Learning facts from your imported conversations now, oldest first, in the background: "
        "they are added to your memory as they come (/memory shows it; nothing there is "
        "removed). If a limit stops it, /import facts goes on later."
    )


async def _ask_facts(ctx: CommandContext, facts: FactsLearning, before: str) -> str | Reply:
    if facts.running():
        return before + "I'm learning from your imported conversations now."
    estimate = await facts.estimate()
    if estimate is None:
        return before + "Every conversation you imported was learnt from already."
    question = ctx.confirmations.ask(ctx.inbound.user_key, FACTS)
    text = (
        f"{before}Learn facts from them into your memory? That asks the model about {estimate} "
        f"(it counts towards your limits). Press “Learn facts” or type /import facts confirm "
        f"within {CONFIRM_TTL_S / 60:.0f} minutes."
    )
    return Reply(text, buttons=(Button("Learn facts", f"/import facts confirm {question.token}"),))


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
