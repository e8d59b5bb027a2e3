"""What a command handler is given: a narrow CommandContext, never the agent.

Commands stay testable on their own, and bot.agent.agent is the only module that knows both the
commands and the files behind them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bot.chats import ChatBook
from bot.commands.confirm import Confirmations
from bot.commands.linking import LinkPort
from bot.inbound import Inbound
from bot.limits import UsageReport
from bot.outbound import Reply
from bot.reminders.desk import PersonReminders
from bot.reminders.groupdesk import GroupReminders
from memory.control.versions import HeldUpdate
from memory.session import Session
from memory.workspace import Workspace

if TYPE_CHECKING:  # its speech client loads openai, which /memory and /recall never need
    from bot.media.voice import VoiceReplies

# What /new did: "started" (the old conversation is being filed), "fresh" (there was nothing to
# file), "waits" (the filing waits until the person's token limit lets the model be asked).
NewSession = Literal["started", "fresh", "waits"]


@dataclass(frozen=True)
class SessionStatus:
    """The figures /status shows, measured by the core."""

    model: str
    context_tokens: int  # the prompt and the answer's share: what the provider counts
    answer_tokens: int
    window_tokens: int
    messages: int
    unconsolidated: int
    last_consolidation: str
    memory_tokens: int = 0  # MEMORY.md's size, and its budget ([memory] max_memory_tokens)
    memory_budget_tokens: int = 0
    held: HeldUpdate | None = None  # an update held back since MEMORY.md was last written
    # How the window is shared (bot/agent/sizing.py): where its size came from, the fixed part
    # (system prompt and tools), the margin; the memory's share is memory_budget_tokens.
    window_from: str = ""
    fixed_tokens: int = 0
    margin_tokens: int = 0
    tools: tuple[str, ...] = ()  # the tools switched on ([tools]) that this chat may offer


@dataclass(frozen=True)
class Taken:
    """What /undo or /retry found to take back, measured by the core and worded by the command:
    `outcome` is DONE, NOTHING (no exchange in this conversation), FILED (the last exchange is
    already consolidated), OLD (written before it could be taken back), UNSAVED (the record
    could not be written: `said` is why) or REFUSED (a limit: `answer` says which)."""

    outcome: str
    said: str = ""  # the start of the person's message it concerns
    answer: Reply | None = None  # /retry: the new answer
    messages: int = 0  # /undo: how many messages left the conversation


DONE, NOTHING, FILED, OLD, UNSAVED, REFUSED = (
    "done", "nothing", "filed", "old", "unsaved", "refused"
)  # fmt: skip


@dataclass(frozen=True)
class ChatControl:
    """What /group and /persona may change: this chat's settings (bot.chats), and whether the
    person may (the chat's admin as the platform says, the bot's admin, or a private chat's
    own person)."""

    book: ChatBook
    chat_key: str
    may_manage: bool
    owner: str | None  # the person a private chat's settings belong to
    default_trigger: str
    default_words: tuple[str, ...]
    bot_persona: str  # [agent] system_prompt
    # A persona too large for the context window's fixed part: why, for the person (else None).
    persona_refusal: Callable[[str], str | None] = lambda text: None


@dataclass(frozen=True)
class CommandContext:
    """What a handler may use: this user's files and two actions the core performs for it."""

    inbound: Inbound
    workspace: Workspace
    session: Session
    bot_name: str
    status: Callable[[], SessionStatus]  # /status figures of this session
    start_new: Callable[[], Awaitable[NewSession]]  # /new
    confirmations: Confirmations  # the questions /forget and /wipe wait on
    # Inside it no turn, consolidation or memory write of this user runs (pending ones are
    # waited for); what the core derived from the user's files is rebuilt afterwards.
    exclusive: Callable[[], AbstractAsyncContextManager[None]]
    erase: Callable[[], Awaitable[bool]]  # /wipe: everything of this user; False if nothing
    memory_in_groups: bool = False  # the operator's default for /privacy ([agent])
    usage: Callable[[], UsageReport] | None = None  # /usage figures of this user
    links: LinkPort | None = None  # /link, /unlink, the linked keys /status and /wipe name
    undo: Callable[[], Awaitable[Taken]] | None = None  # /undo: withdraw the last exchange
    retry: Callable[[], Awaitable[Taken]] | None = None  # /retry: answer the last one again
    chat: ChatControl | None = None  # /group, /persona
    reminders: PersonReminders | None = None  # this person's reminders, set from this chat
    # In a group: everyone's reminders there (/reminders group, for whom chat.may_manage).
    group_reminders: GroupReminders | None = None
    voice: VoiceReplies | None = None  # /voice: whether answers are read aloud too
    models: ModelChoice | None = None  # /model: the models the operator offers
    facts: FactsLearning | None = None  # /import facts: learning from imported conversations
    # Text shown at once, the answer following it (a long command's "working on it"); None: not.
    say: Callable[[str], Awaitable[None]] | None = None


@dataclass(frozen=True)
class FactsLearning:
    """Facts learnt from this person's imported conversations into MEMORY.md, in the
    background (memory.importing.facts): what it would cost, and starting it."""

    # The pending work in words ("3 conversations, about 4,100 tokens, ~$0.0020"); None:
    # every imported conversation was learnt from.
    estimate: Callable[[], Awaitable[str | None]]
    start: Callable[[], bool]  # False: a run of this person's is going on already
    running: Callable[[], bool]


@dataclass(frozen=True)
class ModelChoice:
    """The models /model offers, in the chain's order (the first is the bot's own)."""

    allowed: tuple[str, ...]


# A handler answers with text, or with a Reply carrying files or buttons too. The privacy is
# the command's own (announced before the handler runs), not the Reply's.
Handler = Callable[[CommandContext, str], Awaitable[str | Reply]]
