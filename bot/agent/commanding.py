"""The commands' context: what a command handler may touch (bot.commands.context), built for
each command from this person's workspace and session, their links, this chat's settings, and
what the turn does for /new, /undo, /retry and the figures of /status."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from bot.agent.background import BackgroundWork
from bot.agent.conversation import conversation_start
from bot.agent.people import People
from bot.agent.residency import LoadedSessions, Residents
from bot.agent.sizing import Sizing
from bot.chats import ChatBook, chat_of
from bot.commands.confirm import Confirmations
from bot.commands.context import (
    ChatControl,
    CommandContext,
    FactsLearning,
    ModelChoice,
    NewSession,
    SessionStatus,
    Taken,
)
from bot.config import Config
from bot.inbound import Inbound
from bot.limits import Limits
from bot.media.voice import VoiceReplies
from bot.reminders.desk import PersonReminders, ReminderBook
from bot.reminders.groupdesk import GroupReminders
from bot.tools.tool import Tool
from bot.usage import charged_to, priced_estimate
from memory.consolidation.consolidator import MemoryConsolidator
from memory.control.versions import held_update
from memory.importing import facts
from memory.session import Session
from memory.tokens import TokenEstimator
from memory.workspace import Workspace, Workspaces

log = logging.getLogger(__name__)

PERSONA_SHARE = 10  # a persona may take at most 1/PERSONA_SHARE of the context window


@dataclass(frozen=True)
class TurnCommands:
    """What the commands ask of the turn: /new, /undo, /retry; for /status the tokens of the
    next request's prompt, and the window as the bot is sized to it now (it may learn a
    smaller one from the server)."""

    start_new: Callable[[Inbound], Awaitable[NewSession]]
    undo: Callable[[Inbound], Awaitable[Taken]]
    retry: Callable[[Inbound], Awaitable[Taken]]
    prompt_tokens: Callable[[Workspace, Session, Inbound], int]
    sizing: Callable[[], Sizing]
    tools: Callable[[], Sequence[Tool]]  # on now: [tools]'s and the MCP servers' running


class Commanding:
    """Builds the CommandContext of each command; one per agent."""

    def __init__(
        self,
        config: Config,
        turn: TurnCommands,
        *,
        workspaces: Workspaces,
        sessions: LoadedSessions,
        residents: Residents,
        people: People,
        limits: Limits,
        confirmations: Confirmations,
        chats: ChatBook,
        reminders: ReminderBook,
        consolidator: MemoryConsolidator,
        estimator: TokenEstimator,
        model: Callable[[], str],
        voice: VoiceReplies | None = None,
        models: ModelChoice | None = None,
        background: BackgroundWork | None = None,
        closing: Callable[[], bool] = lambda: False,
    ) -> None:
        self._config = config
        self._background = background or BackgroundWork()
        self._closing = closing
        self._learning: set[str] = set()  # people whose imported conversations are learnt now
        self._voice = voice
        self._models = models
        self._turn = turn
        self._workspaces = workspaces
        self._sessions = sessions
        self._residents = residents
        self._people = people
        self._limits = limits
        self._confirmations = confirmations
        self._chats = chats
        self._reminders = reminders
        self._consolidator = consolidator
        self._estimator = estimator
        self._model = model

    def context(self, inbound: Inbound, own: str) -> CommandContext:
        """What a command handler may touch: this user's workspace and session, no more.
        `own`: the platform's key of the account that sent it (`inbound.user_key` is its
        person's)."""
        self._sessions.note(inbound.user_key, inbound.session_key)
        workspace = self._workspaces.get(inbound.user_key)
        person, turn = inbound.user_key, self._turn
        return CommandContext(
            inbound=inbound,
            workspace=workspace,
            session=workspace.sessions.get(inbound.session_key),
            bot_name=self._config.agent.bot_name,
            status=lambda: self.status(inbound),
            start_new=lambda: turn.start_new(inbound),
            memory_in_groups=self._config.agent.memory_in_groups,
            usage=lambda: self._limits.report(person),
            confirmations=self._confirmations,
            exclusive=lambda: self._residents.exclusive(person),
            erase=lambda: self._people.erase(person),
            links=self._people.port(own),
            undo=lambda: turn.undo(inbound),
            retry=lambda: turn.retry(inbound),
            chat=self._chat_control(inbound, own),
            reminders=PersonReminders(self._reminders, workspace, inbound),
            group_reminders=None
            if inbound.is_private or inbound.chat_key is None
            else GroupReminders(self._reminders, inbound, inbound.chat_key),
            voice=self._voice,
            models=self._models,
            facts=self._facts(workspace),
        )

    def _facts(self, workspace: Workspace) -> FactsLearning:
        """/import facts for this person: the estimate in words, and the run in the background
        (a /wipe cancels it, /forget waits for it), charged to them and stopped at their limits
        or when the bot stops."""
        person, writer = workspace.user_key, self._consolidator.writer

        async def estimate() -> str | None:
            planned = await facts.estimate(workspace, writer)
            if not planned.requests:
                return None
            cost = priced_estimate(
                self._config, writer.llm.model, planned.prompt_tokens, planned.completion_tokens
            )
            return f"{planned.conversations:,} conversations, about {planned.tokens:,} tokens" + (
                f", {cost}" if cost else ""
            )

        def stop() -> str | None:
            return "the bot is stopping" if self._closing() else self._limits.used_up(person)

        async def run() -> None:
            try:
                with charged_to(person):
                    done = await facts.learn(workspace, writer, stop=stop)
                log.info(
                    "learnt %d facts from %d imported conversations%s",
                    done.facts,
                    done.conversations,
                    f"; stopped: {done.stopped}" if done.stopped else "",
                )
            finally:
                self._learning.discard(person)

        def start() -> bool:
            if person in self._learning:
                return False
            self._learning.add(person)
            self._background.start(run(), person)
            return True

        return FactsLearning(estimate, start, lambda: person in self._learning)

    def _chat_control(self, inbound: Inbound, own: str) -> ChatControl:
        """This chat's settings, and whether this person may change them: in a private chat
        they are theirs; in a group the chat's admins' (as the platform says) or the bot's
        ([limits] admins, by their platform key or their person's)."""
        agent = self._config.agent
        admins = self._config.limits.admins
        return ChatControl(
            book=self._chats,
            chat_key=chat_of(inbound),
            may_manage=inbound.is_private
            or inbound.chat_admin
            or own in admins
            or inbound.user_key in admins,
            owner=inbound.user_key if inbound.is_private else None,
            default_trigger=agent.group_trigger,
            default_words=tuple(agent.group_keywords),
            bot_persona=agent.system_prompt,
            persona_refusal=self.persona_refusal,
        )

    def persona_refusal(self, text: str) -> str | None:
        """A persona joins every prompt of its chat, in the window's fixed part: it may take a
        tenth of the window at most, so the conversation keeps its room."""
        tokens = self._estimator.corrected(self._estimator.count_text(text))
        room = self._turn.sizing().window // PERSONA_SHARE
        if tokens <= room:
            return None
        return (
            f"That persona is too long for my language model: about {tokens:,} tokens, and a "
            f"persona may take about {room:,} (a tenth of its context window). Nothing changed."
        )

    def status(self, inbound: Inbound) -> SessionStatus:
        """/status: this conversation's figures and how the window is shared."""
        workspace = self._workspaces.get(inbound.user_key)
        session = workspace.sessions.get(inbound.session_key)
        sizing = self._turn.sizing()
        when = self._consolidator.last_consolidated_at(inbound.user_key, session.key)
        if when is None:
            when = "earlier (before this start-up)" if session.last_consolidated else "never"
        start = conversation_start(session)
        return SessionStatus(
            model=self._model(),
            context_tokens=self._turn.prompt_tokens(workspace, session, inbound)
            + sizing.budget.answer,
            answer_tokens=sizing.budget.answer,
            window_tokens=sizing.window,
            messages=session.total - start,
            unconsolidated=session.total - max(start, session.last_consolidated),
            last_consolidation=when,
            memory_tokens=self._consolidator.memory_tokens(workspace.memory.read()),
            memory_budget_tokens=self._consolidator.memory_budget,
            held=held_update(workspace.memory),
            window_from=sizing.window_from,
            fixed_tokens=sizing.fixed,
            margin_tokens=sizing.budget.margin,
            tools=tuple(
                tool.name
                for tool in self._turn.tools()
                if inbound.is_private or tool.in_groups is None or tool.in_groups(self._config)
            ),
        )
