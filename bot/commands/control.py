"""The commands that hand a person control of their memory: undo, history, forget, export, wipe.

Registered in bot.commands.registry.COMMANDS like every command. Whatever removes data asks first
and
waits for a confirmation (bot.commands.confirm): a button where the platform has them, or the typed
`/forget confirm` / `/wipe confirm`, which works everywhere. The file work is memory/'s
(versions, forget, export, wipe); these handlers only ask, confirm and word the answers.
"""

from __future__ import annotations

import asyncio
import tempfile
from functools import partial
from typing import TYPE_CHECKING

from bot.commands.confirm import CONFIRM_TTL_S, Answer
from bot.commands.context import CommandContext
from bot.outbound import Button, OutFile, Reply
from memory.control.export import ARCHIVE_MIME, archive_name, write_archive
from memory.control.forget import Findings, ForgetError, find, forget, phrase_pattern
from memory.control.versions import HeldUpdate, NoVersionError, list_versions, restore
from memory.control.wipe import contents
from memory.links import LINKS_EXPORT, links_json
from memory.threads import in_thread

if TYPE_CHECKING:
    from memory.consolidation.asking import MemoryEvent

# The largest file any of our platforms takes from a bot (Telegram: 50 MB); an adapter whose
# platform takes less says so itself (bot.outbound.too_large_notice).
MAX_EXPORT_BYTES = 50 * 1000 * 1000
SHOWN_ITEMS = 8
SHOWN_CHARS = 200
_MINUTES = f"{CONFIRM_TTL_S / 60:.0f} minutes"


# ---- /memory history and /memory undo ---------------------------------------------------------


async def memory_history(ctx: CommandContext) -> str:
    """The versions kept, read and compared in a thread (whole files, a diff each)."""
    store = ctx.workspace.memory
    versions, current = await asyncio.to_thread(lambda: (list_versions(store), store.read()))
    if not versions:
        return "There are no earlier versions of your memory yet."
    lines = [
        "Your memory now: "
        f"{len(current.encode('utf-8')):,} bytes, {len(current.splitlines())} lines.",
        "Earlier versions, newest first (each compared with the one before it):",
    ]
    for v in versions:
        if v.held:
            lines.append(
                f"{v.number}. held {v.kept_at}, never applied (it would have dropped too "
                f"much): {v.size:,} bytes, {v.lines} lines (+{v.added} −{v.removed} against "
                "your memory then)"
            )
            continue
        lines.append(
            f"{v.number}. replaced {v.kept_at}: {v.size:,} bytes, {v.lines} lines "
            f"(+{v.added} −{v.removed})"
        )
    lines.append("/memory undo brings back version 1; /memory undo N brings back version N.")
    if any(v.held for v in versions):
        lines.append("A held version is an update I did not apply; /memory undo N applies it.")
    return "\n".join(lines)


# ---- what a consolidation did to the memory: /status and the next answer -------------------


def held_text(held: HeldUpdate) -> str:
    return (
        f"A memory update is held ({held.kept_at}): it would drop {held.dropped} of your "
        f"{held.facts} facts, so your memory is unchanged. /memory history lists it as held; "
        f"/memory undo {held.number} applies it."
    )


def memory_notice(event: MemoryEvent) -> str:
    """One sentence after the next answer about what the last consolidation did."""
    if event.kind == "held_outside":
        return (
            "(I held back a change to your memory that I made after reading something from the "
            "web, which can carry instructions: your memory is unchanged. /memory history "
            "lists it as held; /memory undo 1 applies it.)"
        )
    if event.kind == "held":
        return (
            f"(I held back a memory update that would have dropped {event.dropped} of your "
            f"{event.facts} facts: your memory is unchanged. /memory history lists it as "
            "held; /memory undo 1 applies it.)"
        )
    return (
        f"(Your memory is over its budget: about {event.tokens:,} of {event.budget:,} tokens, "
        "even after I tried to shorten it. /memory shows it; /forget removes what you no "
        "longer need.)"
    )


async def memory_undo(ctx: CommandContext, args: str) -> str:
    if args and not args.isdigit():
        return "Try /memory undo, or /memory undo N with N from /memory history."
    number = int(args) if args else 1
    async with ctx.exclusive():
        try:  # the write and the diff in a thread, still inside exclusive()
            restored = await in_thread(partial(restore, ctx.workspace.memory, number))
        except NoVersionError as exc:
            return str(exc)
    if not restored.diff:
        return f"Version {number} is the same as your memory now; nothing changed."
    how = "" if restored.exact else " (too many changes to pair up: shown as replaced whole)"
    return (
        f"Brought back version {number} of your memory (+{restored.added} −{restored.removed} "
        f"lines). What changed{how}:\n\n{restored.diff}\n\n"
        "The text it replaced is kept: /memory undo again puts it back."
    )


# ---- /forget --------------------------------------------------------------------------------


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'“”":
        return text[1:-1]
    if len(text) >= 2 and text[0] == "“" and text[-1] == "”":
        return text[1:-1]
    return text


def _short(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= SHOWN_CHARS else one_line[: SHOWN_CHARS - 1] + "…"


def _refusal(answer: Answer, action: str) -> str:
    if answer.problem == "expired":
        return f"That confirmation has expired (after {_MINUTES}); nothing was removed. " + (
            f"Ask again with /{action}" + (" <words>." if action == "forget" else ".")
        )
    if answer.problem == "other":
        return "That button belongs to an older question; nothing was removed."
    return f"There is nothing waiting for your confirmation. Start with /{action}" + (
        " <words> (quote words that begin with confirm or cancel)." if action == "forget" else "."
    )


async def cmd_forget(ctx: CommandContext, args: str) -> str | Reply:
    user = ctx.inbound.user_key
    first, _, rest = args.partition(" ")
    if first.lower() == "confirm":
        answer = ctx.confirmations.take(user, "forget", rest.strip())
        if answer.question is None:
            return _refusal(answer, "forget")
        async with ctx.exclusive():
            removed = await asyncio.to_thread(forget, ctx.workspace, answer.question.payload)
        return _removed_text(removed)
    if first.lower() == "cancel" and not rest:
        if ctx.confirmations.cancel(user, "forget"):
            return "Cancelled; nothing was removed."
        return "There was nothing to cancel."
    words = _unquote(args)
    try:
        phrase_pattern(words)
    except ForgetError as exc:
        return str(exc)
    found = await asyncio.to_thread(find, ctx.workspace, words)
    if not found.total:
        return f"I found nothing matching “{found.phrase}”; nothing to forget."
    question = ctx.confirmations.ask(user, "forget", words)
    text = _findings_text(found) + (
        "\n\nNothing is removed until you confirm: press “Forget it”, or type "
        f"/forget confirm within {_MINUTES}. /forget cancel keeps everything."
    )
    buttons = (
        Button("Forget it", f"/forget confirm {question.token}"),
        Button("Keep it", "/forget cancel"),
    )
    return Reply(text, buttons=buttons)


def _findings_text(found: Findings) -> str:
    lines = [f"This is what matches “{found.phrase}”:"]
    shown = 0
    if found.memory_lines:
        lines.append("\nFrom MEMORY.md:")
        for line in found.memory_lines[:SHOWN_ITEMS]:
            lines.append(f"  {_short(line)}")
            shown += 1
    if found.history_entries:
        lines.append("\nFrom HISTORY.md:")
        for entry in found.history_entries[: max(1, SHOWN_ITEMS - shown)]:
            lines.append(f"  {_short(entry)}")
    lines.append("\nForgetting removes " + "; ".join(found.counts()) + ".")
    return "\n".join(lines)


def _removed_text(removed: Findings) -> str:
    if not removed.total:
        return f"Nothing matching “{removed.phrase}” is left; nothing was removed."
    return (
        f"Forgotten: “{removed.phrase}”. Removed " + "; ".join(removed.counts()) + ". "
        "No file of yours holds it any more."
    )


# ---- /export --------------------------------------------------------------------------------


def _archive(ctx: CommandContext) -> tuple[bytes | None, int, int]:
    """(the zip's bytes, or None when it is too big to send; its size; its file count)."""
    with tempfile.TemporaryFile() as spool:  # unnamed: nothing is left behind on a crash
        members = ctx.links.members() if ctx.links is not None else []
        extra = {LINKS_EXPORT: links_json(members)} if len(members) > 1 else None
        info = write_archive(ctx.workspace.root, spool, extra)
        if info.size > MAX_EXPORT_BYTES:
            return None, info.size, info.files
        spool.seek(0)
        return spool.read(), info.size, info.files


async def cmd_export(ctx: CommandContext, args: str) -> str | Reply:
    if not ctx.workspace.root.is_dir():
        return "I don't keep anything about you yet, so there is nothing to export."
    data, size, files = await asyncio.to_thread(_archive, ctx)
    if data is None:
        return (
            f"Your archive is {size / 1e6:.0f} MB, too big to send in a chat "
            f"(at most {MAX_EXPORT_BYTES / 1e6:.0f} MB). The operator of this bot can export it "
            f"for you with `lightgrep export {ctx.inbound.user_key}`."
        )
    name = archive_name(ctx.workspace.root.name)
    text = (
        f"Here is everything I keep about you: {files} files (MEMORY.md, HISTORY.md, our "
        "conversations, earlier memory versions), zipped."
    )
    return Reply(text, files=(OutFile(name, ARCHIVE_MIME, data=data),))


# ---- /wipe ----------------------------------------------------------------------------------


async def cmd_wipe(ctx: CommandContext, args: str) -> str | Reply:
    user = ctx.inbound.user_key
    first, _, rest = args.partition(" ")
    if first.lower() == "confirm":
        answer = ctx.confirmations.take(user, "wipe", rest.strip())
        if answer.question is None:
            return _refusal(answer, "wipe")
        if not await ctx.erase():
            return "There was nothing to erase."
        return (
            "Done: I erased everything I kept about you, in every conversation. "
            "If you write again, I'll meet you as a stranger."
        )
    if first.lower() == "cancel":
        if ctx.confirmations.cancel(user, "wipe"):
            return "Cancelled; nothing was erased."
        return "There was nothing to cancel."
    if first:
        return "Try /wipe, then /wipe confirm."
    held = await asyncio.to_thread(contents, ctx.workspace)
    if held.empty and not held.media:
        return "I don't keep anything about you, so there is nothing to erase."
    question = ctx.confirmations.ask(user, "wipe")
    members = ctx.links.members() if ctx.links is not None else []
    shared = (
        f"This memory is shared by {', '.join(members)} (/link): it is erased for all of "
        "them, and the links are dropped. "
        if len(members) > 1
        else ""
    )
    text = (
        "This erases everything I keep about you, in every conversation including groups: "
        f"{held.describe()}. {shared}It cannot be undone (/export first if you want a copy)."
        "\n\n"
        f"Press “Erase everything” or type /wipe confirm within {_MINUTES}; "
        "/wipe cancel keeps everything."
    )
    buttons = (
        Button("Erase everything", f"/wipe confirm {question.token}"),
        Button("Keep it", "/wipe cancel"),
    )
    return Reply(text, buttons=buttons)
