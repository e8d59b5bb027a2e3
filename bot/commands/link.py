"""/link and /unlink: one memory for a person's Telegram, Discord and terminal.

`/link` (private) answers with a one-time code; `/link CODE`, sent privately from another
platform's account, asks before it joins that account to the code's memory, and `/link confirm`
joins them (bot.commands.linking: codes, throttle; memory.control.link: the merge). `/unlink`
asks, then separates this platform's account again. Every answer says what happens to the memory.
"""

from __future__ import annotations

import asyncio

from bot.commands.confirm import CONFIRM_TTL_S
from bot.commands.context import CommandContext
from bot.commands.linking import CODE_TTL_S, LinkPort
from bot.outbound import Button, Reply
from memory.control.wipe import contents
from memory.links import LinkError

_MINUTES = f"{CONFIRM_TTL_S / 60:.0f} minutes"
PRIVATE_ONLY = (
    "Links are made in a private chat only (a code seen in a group could join a stranger to "
    "your memory): send /link to me privately."
)
INVALID = (
    "That code is not valid: mistyped, expired (codes last {minutes} minutes) or used already. "
    "Nothing was linked. Send /link on the other platform for a new code."
)


_LINKED_ALREADY = (
    "This account is linked already ({members} share one memory): /unlink first if you "
    "want another link. Nothing was linked."
)


def keys_text(keys: list[str]) -> str:
    return ", ".join(keys)


async def cmd_link(ctx: CommandContext, args: str) -> str | Reply:
    port = ctx.links
    if port is None:
        return "Linking is not available here."
    if not ctx.inbound.is_private:
        return PRIVATE_ONLY
    first, _, rest = args.partition(" ")
    if first.lower() == "confirm":
        return await _confirm(ctx, port, rest.strip())
    if first.lower() == "cancel":
        if ctx.confirmations.cancel(port.own_key, "link"):
            return "Cancelled; nothing was linked."
        return "There was nothing to cancel."
    if first:
        return await _ask(ctx, port, args)
    code = await port.codes.issue(port.own_key)
    return (
        f"Your link code: {code}\n\n"
        "It joins another platform's account of yours to the memory you have here, so that "
        "what you tell me on one, I know on the other (each chat keeps its own conversation). "
        f"In a private chat with me there, send /link {code} within {CODE_TTL_S / 60:.0f} "
        "minutes; it works once. Keep it to yourself: whoever sends it joins that memory."
    )


async def _ask(ctx: CommandContext, port: LinkPort, code: str) -> str | Reply:
    redeemed = await port.codes.redeem(code, port.own_key)
    if redeemed.problem == "throttled":
        minutes = max(1, round(redeemed.retry_after_s / 60))
        return f"Too many wrong codes from you; try again in about {minutes} minutes."
    if redeemed.owner is None:
        return INVALID.format(minutes=f"{CODE_TTL_S / 60:.0f}")
    home = port.resolve(redeemed.owner)
    if home == port.resolve(port.own_key):
        return (
            "That code was made by this account (or one linked to it): send it from your "
            "account on another platform."
        )
    members = port.members()
    if len(members) > 1:
        return (
            f"This account shares its memory already ({keys_text(members)}). An account belongs "
            "to one person only: send /unlink here first, then link again."
        )
    held = await asyncio.to_thread(contents, ctx.workspace)
    if held.empty and not held.media:
        here = "You have no memory with me here yet, so nothing needs merging."
    else:
        here = (
            f"What I keep about you here ({held.describe()}) is merged into that memory: "
            "nothing is lost, and /memory undo takes the memory merge back."
        )
    question = ctx.confirmations.ask(port.own_key, "link", home)
    text = (
        f"This joins this account ({port.own_key}) to the memory of {home}: from then on both "
        f"read and write one memory. {here} /unlink takes this account out again later, "
        "with what it has here now.\n\n"
        f"Press “Link” or type /link confirm within {_MINUTES}; /link cancel keeps them apart."
    )
    buttons = (
        Button("Link", f"/link confirm {question.token}"),
        Button("Keep apart", "/link cancel"),
    )
    return Reply(text, buttons=buttons)


async def _confirm(ctx: CommandContext, port: LinkPort, token: str) -> str:
    answer = ctx.confirmations.take(port.own_key, "link", token)
    if answer.question is None:
        if answer.problem == "expired":
            return f"That confirmation has expired (after {_MINUTES}); nothing was linked."
        if answer.problem == "other":
            return "That button belongs to an older question; nothing was linked."
        if len(port.members()) > 1:  # the other side's link, made meanwhile, ended the question
            return _LINKED_ALREADY.format(members=keys_text(port.members()))
        return "There is nothing waiting for your confirmation. Start with /link."
    if len(port.members()) > 1:
        return _LINKED_ALREADY.format(members=keys_text(port.members()))
    try:  # checked again under the locks: the other side may have confirmed meanwhile
        merged = await port.join(answer.question.payload)
    except LinkError:
        return _LINKED_ALREADY.format(members=keys_text(port.members()))
    members = port.members()
    for key in members:
        if key != port.own_key:
            await port.tell(
                key,
                f"(Your memory is now shared with {port.own_key}: {keys_text(members)} read and "
                f"write one memory. Not you? /unlink {port.own_key} here removes it: it leaves "
                "with only what it had before the link, and the memory stays here. /unlink "
                "alone takes this account out instead, with what it had before the link, and "
                "leaves the shared memory to the others.)",
            )
    moved = (
        f" Merged in: {merged.facts} facts, {merged.entries} history entries, {merged.files} "
        "files (conversations, media, earlier memory versions)."
        if merged.facts or merged.entries or merged.files
        else ""
    )
    return (
        f"Linked: {keys_text(members)} now share one memory.{moved} The other side is told "
        "(at once, or with its next answer). /status lists the linked accounts; /unlink "
        "takes this one out again, with what it had before the link."
    )


async def cmd_unlink(ctx: CommandContext, args: str) -> str | Reply:
    """`/unlink`: this account leaves; `/unlink ACCOUNT`: that account of the person is
    removed (an unwanted link). Either way the one that leaves takes back only what it had
    before the link, and the shared memory stays with the others; asked first."""
    port = ctx.links
    if port is None:
        return "Linking is not available here."
    members = port.members()
    first, _, rest = args.partition(" ")
    if first.lower() == "cancel":
        if ctx.confirmations.cancel(port.own_key, "unlink"):
            return "Cancelled; the accounts stay linked."
        return "There was nothing to cancel."
    if len(members) < 2:
        ctx.confirmations.cancel(port.own_key, "unlink")
        return "This account is not linked to another; there is nothing to unlink."
    if first.lower() == "confirm":
        answer = ctx.confirmations.take(port.own_key, "unlink", rest.strip())
        if answer.question is None:
            if answer.problem == "expired":
                return f"That confirmation has expired (after {_MINUTES}); nothing changed."
            if answer.problem == "other":
                return "That button belongs to an older question; nothing changed."
            return "There is nothing waiting for your confirmation. Start with /unlink."
        return await _leave(port, answer.question.payload or port.own_key)
    if first and (rest.strip() or first not in members):
        return (
            f"{first[:80]} is not an account of yours: the linked accounts are "
            f"{keys_text(members)}. Send /unlink to take this one out, or /unlink ACCOUNT to "
            "remove another. Nothing changed."
        )
    if first and first != port.own_key:
        return _ask_remove(ctx, port, first, members)
    return _ask_leave(ctx, port, members)


def _ask_leave(ctx: CommandContext, port: LinkPort, members: list[str]) -> Reply:
    others = [key for key in members if key != port.own_key]
    question = ctx.confirmations.ask(port.own_key, "unlink")
    text = (
        f"This takes this account ({port.own_key}) out of the memory it shares with "
        f"{keys_text(others)}. Here you get back what you had before the link; the shared "
        "memory (everything said and remembered since, and what this account brought then) "
        "stays with them.\n\n"
        f"Is one of them not yours? Then keep the memory and remove it instead: /unlink "
        f"{others[0]}.\n\n"
        f"Press “Unlink” or type /unlink confirm within {_MINUTES}; /unlink cancel keeps them "
        "linked."
    )
    buttons = (
        Button("Unlink", f"/unlink confirm {question.token}"),
        Button("Keep linked", "/unlink cancel"),
    )
    return Reply(text, buttons=buttons)


def _ask_remove(ctx: CommandContext, port: LinkPort, key: str, members: list[str]) -> Reply:
    staying = [member for member in members if member != key]
    question = ctx.confirmations.ask(port.own_key, "unlink", key)
    text = (
        f"This removes {key} from your memory: it gets back only what it had before the "
        f"link, and the shared memory stays here (with {keys_text(staying)}). {key} is told.\n\n"
        f"Press “Remove” or type /unlink confirm within {_MINUTES}; /unlink cancel keeps it "
        "linked."
    )
    buttons = (
        Button("Remove", f"/unlink confirm {question.token}"),
        Button("Keep linked", "/unlink cancel"),
    )
    return Reply(text, buttons=buttons)


async def _leave(port: LinkPort, key: str) -> str:
    """`key` out of the person (this account, or another one of it)."""
    if key not in port.members():
        return f"{key} is not linked to this account any more; nothing changed."
    left = await port.leave(key)
    if not left:
        return f"{key} is not linked to this account any more; nothing changed."
    for other in left:
        if other != port.own_key:
            await port.tell(
                other,
                f"({key} no longer shares your memory; it stays with {keys_text(left)}.)",
            )
    if key == port.own_key:
        return (
            f"Unlinked: {key} is on its own again, with what it had before the link. The "
            f"shared memory stays with {keys_text(left)}."
        )
    await port.tell(
        key,
        f"({port.own_key} removed this account from the memory it shared: here you have "
        "again what you had before the link.)",
    )
    return (
        f"Removed: {key} no longer shares your memory; it got back only what it had before "
        f"the link. The memory stays with {keys_text(left)}."
    )
