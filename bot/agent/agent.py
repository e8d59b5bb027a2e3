"""The agent core: one turn of conversation, commands, and background consolidation.

Every platform hands it an Inbound and an Outbound (bot.outbound) to answer through. Two messages
of one session run in order (a lock per session); different sessions run at once. The user's
message is persisted before the LLM is called, so an outage never loses it.

A file that cannot be written (disk full, read-only, no permission) is answered here, for every
platform alike: one sentence saying whether the message was saved, the details in the log, and
the next message tries again. A consolidation that cannot be written never holds up an answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from bot.agent.background import BackgroundWork
from bot.agent.commanding import Commanding, TurnCommands
from bot.agent.consolidating import ConsolidationPolicy, MemoryNews
from bot.agent.context_window import ContextWindow, SessionPrompts
from bot.agent.people import People
from bot.agent.residency import Residents
from bot.agent.sizing import Sizing, plan
from bot.agent.turn import UNSAFE_WORKSPACE_REPLY, Turns, refused, usage_estimate
from bot.chats import ChatBook, chat_of
from bot.commands.confirm import Confirmations
from bot.commands.context import ModelChoice
from bot.commands.linking import Codes, LinkCodes, PersonMoves
from bot.commands.registry import (
    ParsedCommand,
    is_command,
    is_heavy,
    is_reminder_command,
    parse_command,
    refuse_command,
    run_command,
)
from bot.config import Config
from bot.inbound import Inbound
from bot.limits import Limits
from bot.llm.chain import ChainLLM, chain_of, consolidation_chain, measure_by, preferring
from bot.llm.embeddings import meaning_of
from bot.mcp.hub import McpHub
from bot.media.attachments import AttachmentReader
from bot.media.rules import MediaRules
from bot.media.speech import Speaker
from bot.media.transcribe import Transcriber
from bot.media.voice import VoiceReplies
from bot.outbound import (
    Outbound,
)
from bot.platform import Resender
from bot.reminders.desk import ReminderBook
from bot.reminders.scheduler import Scheduler
from bot.usage import ChargedLLM, Prices, UsageBook, charged_to
from memory.consolidation.consolidator import MemoryConsolidator
from memory.links import LinkTable
from memory.llm import (
    ChatLLM,
)
from memory.preferences import MODEL
from memory.search import meaning
from memory.text import valid_text
from memory.tokens import TokenEstimator
from memory.workspace import UnsafeWorkspaceError, Workspaces

log = logging.getLogger(__name__)


class Agent:
    """The core the adapters call (`handle`): the turn, composed with its parts, which own their
    state: the people (bot.agent.people), who is held in RAM (bot.agent.residency) and the
    commands' context (bot.agent.commanding). Built by bot/cli/core.py for every role."""

    def __init__(
        self,
        config: Config,
        llm: ChatLLM | None = None,
        *,
        writer: bool = True,
        sizing: Sizing | None = None,
        links: LinkTable | None = None,
        codes: Codes | None = None,
        moves: PersonMoves | None = None,
        chats: ChatBook | None = None,
        confirmations: Confirmations | None = None,
        on_consolidation: Callable[[str], None] | None = None,
        memory_llm: ChatLLM | None = None,
        estimator: TokenEstimator | None = None,
        in_use: Callable[[], tuple[str, str | None]] | None = None,
    ) -> None:
        """writer=False: for a process without the folder lock, which must not write (only
        commands that read, like /recall, are then sent to it). `sizing`: the window and its
        shares as bot.agent.sizing.size found them with the server's help; None: planned from
        the config alone. `links`, `codes`, `moves`, `chats`: a cluster worker's (the cluster's
        link table, its codes, a person's files moving between workers, the chats' settings);
        None: the workspaces folder's own. `confirmations`: the questions /forget and /wipe
        wait on (their time to answer). `on_consolidation(outcome)`: each consolidation's
        outcome, counted for /metrics. `memory_llm`: what consolidation asks (None: the
        [[consolidation.endpoints]], else `llm`); `estimator`: the one the chains measure
        requests with (bot/llm/chain.py); `in_use()`: the model answering now and whether it is
        a fallback, for /status."""
        self.estimator = estimator or TokenEstimator(image_tokens=config.llm.image_tokens)
        sizing = sizing or plan(config, estimator=self.estimator)
        # As configured: what is automatic is planned again when a smaller window is learnt.
        # The MCP servers' tools (bot/mcp/): started in the background by `start`.
        self.mcp = McpHub(config.mcp)
        self.window = ContextWindow(config, sizing, self.estimator, self.mcp.tools)
        self.config = config
        self.workspaces = Workspaces(
            config.memory.workspaces_dir,
            keep_memory_versions=config.memory.keep_memory_versions,
            writer=writer,
        )
        # Every model call, the consolidator's too, is booked to the user it was made for.
        self.usage = UsageBook(self.workspaces)
        self.limits = Limits(config.limits, self.usage, prices=Prices.of(config))
        measure = measure_by(self.estimator)
        if llm is None:
            llm = chain_of(sizing.applied(config).llm, config.fallbacks, measure)
            if isinstance(llm, ChainLLM):
                in_use = in_use or llm.in_use
        if memory_llm is None and config.consolidation:
            memory_llm = consolidation_chain(config.llm, config.consolidation, measure)
        self._in_use = in_use
        estimate = partial(usage_estimate, self.estimator)
        charged = partial(ChargedLLM, book=self.usage, estimate=estimate)
        self.llm = charged(llm)
        self.memory_llm = self.llm if memory_llm is None else charged(memory_llm)
        self.transcriber = Transcriber.from_config(config)
        self.attachments = AttachmentReader(
            MediaRules.from_config(config),
            self.transcriber,
            vision=config.llm.vision,
            max_seconds=config.transcription.max_seconds,
        )
        self.voice = VoiceReplies(
            config.voice, Speaker.from_config(config), self.workspaces, self.limits.is_admin
        )
        # [search] embeddings: every history search of this process ranks by meaning too.
        self.meaning = meaning_of(config)
        if self.meaning is not None:
            meaning.install(self.meaning)
        self.consolidator = MemoryConsolidator(
            self.memory_llm, self.estimator, shares=self.window.shares
        )
        if on_consolidation is not None:
            self.consolidator.on_outcome = on_consolidation
        # Personas, group triggers: the folder's book, or the cluster's.
        self.chats = ChatBook.of(config.memory.workspaces_dir) if chats is None else chats
        self.prompts = SessionPrompts(config, self.window, self.chats)  # each session's system
        self.news = MemoryNews()  # what a person should hear of their memory, once
        self.background = BackgroundWork()
        self.confirmations = Confirmations() if confirmations is None else confirmations
        self.reminder_book = ReminderBook(config, self.workspaces, self.limits.is_admin)
        # Everything that keeps state of a person in RAM: /wipe and idle eviction alike make
        # each forget them (limits too: see docs/security.md, "Limits").
        self.residents = Residents(
            self.workspaces,
            config.memory.max_loaded_sessions,
            holders=(
                self.workspaces,
                self.usage,
                self.limits,
                self.confirmations,
                self.consolidator,
                self.prompts.frozen,
                self.news,
                self.reminder_book,  # its forget_user also clears the scheduler after a /wipe
                self.voice,
            ),
            work=self.consolidator,
            background=self.background,
            prompts=self.prompts.frozen,
            reminders=self.reminder_book,
        )
        self.sessions = self.residents.sessions
        self.policy = ConsolidationPolicy(
            self.consolidator,
            self.window,
            self.estimator,
            self.limits,
            self.background,
            self.sessions,
            self.workspaces,
        )
        # The turn: prompt, model call, tools, streaming, /retry and /undo (bot/agent/turn.py).
        self.turns = Turns(
            config,
            self.llm,
            self.window,
            self.estimator,
            workspaces=self.workspaces,
            sessions=self.sessions,
            limits=self.limits,
            attachments=self.attachments,
            prompts=self.prompts,
            news=self.news,
            reminder_book=self.reminder_book,
            background=self.background,
            policy=self.policy,
            exclusive=self.residents.exclusive,
            voice=self.voice,
        )
        # Sends each reminder at its time once run() (the CLI starts it) and send_with().
        self.reminders = Scheduler(self.reminder_book, self.turns.note_reminder)
        self.people = People(
            self.workspaces,
            self.residents,
            self.reminder_book,
            self.chats,
            self.reminders.senders,
            links=LinkTable(self.workspaces.base_dir) if links is None else links,
            codes=LinkCodes() if codes is None else codes,
            moves=moves,
            writer=writer,
        )
        self.commanding = Commanding(
            config,
            TurnCommands(
                start_new=lambda i: self.policy.new_session(i.user_key, i.session_key),
                undo=self.turns.undo_last,
                retry=self.turns.retry_last,
                prompt_tokens=self.turns.prompt_tokens,
                sizing=lambda: self.window.sizing,
                tools=lambda: self.window.tools,
            ),
            workspaces=self.workspaces,
            sessions=self.sessions,
            residents=self.residents,
            people=self.people,
            limits=self.limits,
            confirmations=self.confirmations,
            chats=self.chats,
            reminders=self.reminder_book,
            consolidator=self.consolidator,
            estimator=self.estimator,
            model=self.model_in_use,
            voice=self.voice,
            models=self.models(),
            background=self.background,
            closing=lambda: self.policy.closing,
        )

    # ---- entry points -------------------------------------------------------------------

    def model_in_use(self) -> str:
        """The model answering now, for /status: a fallback says so."""
        if self._in_use is None:
            return self.llm.model
        model, instead_of = self._in_use()
        return f"{model} (a fallback: {instead_of} is not answering)" if instead_of else model

    def models(self) -> ModelChoice:
        """The models a person may pick with /model: [llm]'s and each fallback's."""
        listed = [self.config.llm.model, *(one.model for one in self.config.fallbacks)]
        return ModelChoice(tuple(dict.fromkeys(listed)))

    def model_for(self, inbound: Inbound) -> str | None:
        """The model asked first for this message: the chat's (`/model only`), else the
        person's choice while the operator still offers it, else None (the chain's order)."""
        allowed = self.models().allowed
        if len(allowed) < 2:
            return None  # one model: nothing to choose, nothing read
        only = self.chats.get(chat_of(inbound)).model
        if only in allowed:
            return only
        chosen = self.workspaces.get(inbound.user_key).preferences.get(MODEL)
        return chosen if chosen in allowed else None

    async def handle(self, inbound: Inbound, out: Outbound) -> None:
        """Answer one message through `out`: a command without the LLM, anything else as an LLM
        turn (see bot.outbound for the order of the calls)."""
        self.start()  # (once: the CLI starts it before the first message)
        own = inbound.user_key
        inbound = replace(inbound, text=valid_text(inbound.text))  # lone surrogates → U+FFFD
        inbound, out = await self.people.receive(inbound, out)  # the person's key from here
        with self.sessions.handling(inbound.user_key, inbound.session_key):
            await self._handle(inbound, out, own)

    async def _handle(self, inbound: Inbound, out: Outbound, own: str) -> None:
        if inbound.delivered is not None:  # a receipt: noted, nothing to answer
            await out.begin(private=False)
            self.turns.note_delivery(inbound, inbound.delivered)
            await out.finish()
            return
        command = parse_command(inbound.text)
        user = inbound.user_key
        # Both hold for the consolidation this message starts, too.
        with charged_to(user), preferring(self.model_for(inbound)):
            if await self._refused_unsafe(inbound, command, out):
                return
            if command is not None:
                heavy, reminding = is_heavy(command), is_reminder_command(command)
                checked = self.limits.check_command(user, heavy=heavy, reminders=reminding)
                refusal = refused(inbound, checked)
                if refusal is not None:
                    await refuse_command(command, refusal.text, out)
                    return
                await run_command(command, lambda: self.commanding.context(inbound, own), out)
                return
            await self.turns.handle(inbound, out, lambda: self.people.links.resolve(own))

    async def _refused_unsafe(
        self, inbound: Inbound, command: ParsedCommand | None, out: Outbound
    ) -> bool:
        """A workspace holding a link is refused (memory.workspace logs where) with one clear
        answer, before anything is read or saved. An unknown command touches no files."""
        if command is not None and not is_command(command.name):
            return False
        try:
            self.workspaces.get(inbound.user_key)
        except UnsafeWorkspaceError:
            await out.begin(private=False)
            await out.add_text(UNSAFE_WORKSPACE_REPLY)
            await out.finish()
            return True
        return False

    def start(self) -> None:
        """Start what runs beside the turns: the MCP servers, in the background."""
        self.mcp.start()

    def stopping(self) -> None:
        """The process is stopping: work that can be cut short ends now (PDFs being read)."""
        self.attachments.stop()

    def send_with(self, platform: str, sender: Resender) -> None:
        """Reminders asked on `platform` are sent through `sender` (an adapter's send_to)."""
        self.reminders.send_with(platform, sender)

    async def aclose(self) -> None:
        """Wait for pending consolidation (a backlog's only for its current round), then close
        the LLM client."""
        self.policy.closing = True
        self.attachments.stop()
        await self.background.wait_all()
        await self.turns.aclose()
        await self.people.aclose()
        await self.llm.aclose()
        if self.memory_llm is not self.llm:
            await self.memory_llm.aclose()
        if self.transcriber is not None:
            await self.transcriber.aclose()
        await self.voice.aclose()
        await self.mcp.aclose()
        if self.meaning is not None and meaning.current is self.meaning:
            # (waits for the batch being embedded: off the loop)
            await asyncio.to_thread(meaning.install, None)

    # ---- the conversation taken back: /undo, /retry (bot/agent/conversation.py) ---------------

    # ---- attachments (bot/media/attachments.py) --------------------------------------------------

    # ---- a message delivered twice (the platform resends what a crash left unacknowledged) --

    # ---- prompts ------------------------------------------------------------------------
