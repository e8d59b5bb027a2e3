"""When a session is consolidated: one policy for every moment it may happen.

WHY one place: before a turn (the prompt cannot be sent), on an overflow (the server refused a
prompt the estimate thought fitted), after a turn (the next prompt would not fit: in the
background, round after round), on /new (the old conversation filed, or waiting for the
person's token limit) — each used to decide for itself. The how (chunking, asking the model,
the checks, writing) is memory/consolidation/consolidator.py's; what the person should hear of
it afterwards is kept here (`MemoryNews`) until their next answer.

Two questions are kept apart: `ContextWindow.sendable` ("may this request be sent") and
`due` ("consolidate now"). They are equal today; a policy that consolidates earlier (at 75 %
of the window, say) changes `due` only.
"""

from __future__ import annotations

import logging

from bot.agent.background import BackgroundWork
from bot.agent.context_window import ContextWindow, PromptOf
from bot.agent.conversation import CONVERSATION_START
from bot.agent.residency import LoadedSessions
from bot.commands.context import NewSession
from bot.limits import Limits
from bot.outbound import CONSOLIDATING, Outbound
from memory.consolidation.asking import MemoryEvent
from memory.consolidation.consolidator import MemoryConsolidator
from memory.llm import LLMContextOverflow
from memory.safefs import LinkRefusedError
from memory.session import Session
from memory.tokens import TokenEstimator
from memory.workspace import Workspace, Workspaces

log = logging.getLogger(__name__)

FILING_WAITS = "filing_waits"  # session metadata: a /new whose filing waits for the token limit


class MemoryNews:
    """What each person should hear about their memory (an update held back, MEMORY.md over
    its budget), kept until their next private answer tells it, once."""

    def __init__(self) -> None:
        self._events: dict[str, MemoryEvent] = {}

    def note(self, user_key: str, event: MemoryEvent) -> None:
        self._events[user_key] = event  # the newest wins

    def take(self, user_key: str) -> MemoryEvent | None:
        return self._events.pop(user_key, None)

    def forget_user(self, user_key: str) -> None:
        self._events.pop(user_key, None)


class ConsolidationPolicy:
    """Decides when the consolidator runs, and on what (a session, down to its target)."""

    def __init__(
        self,
        consolidator: MemoryConsolidator,
        window: ContextWindow,
        estimator: TokenEstimator,
        limits: Limits,
        background: BackgroundWork,
        sessions: LoadedSessions,
        workspaces: Workspaces,
    ) -> None:
        self.consolidator = consolidator
        self._window = window
        self._estimator = estimator
        self._limits = limits
        self._background = background
        self._sessions = sessions
        self._workspaces = workspaces
        self._draining: set[tuple[str, str]] = set()  # sessions consolidating in the background
        self.closing = False  # the bot stops: a backlog's background work ends after its round
        consolidator.writer.on_window = window.learn  # its refusals name the window too

    def estimate(self, system: str, session: Session, since: int | None = None) -> int:
        """Estimated prompt tokens of the next request: system prompt, tools, history (from
        `since` on, when given)."""
        return self._estimator.prompt_tokens(system + self._window.tools_text, session, since)

    def due(self, prompt_tokens: int) -> bool:
        """Whether a session whose next prompt takes this many tokens is consolidated now."""
        return not self._window.sendable(prompt_tokens)

    # ---- before a turn ---------------------------------------------------------------------

    async def before_turn(
        self, workspace: Workspace, session: Session, prompt: PromptOf, out: Outbound
    ) -> int | None:
        """Room made before the model is called when the prompt cannot be sent, if the rounds
        of one consolidation make it. A backlog (a migrated transcript, a long outage) is not
        waited for: the index of the newest turns that can be sent is returned (answered from
        them), and the rest is worked through after the turn. None: the whole conversation is
        sent."""
        system = prompt.frozen()
        if self._window.sendable(self.estimate(system, session)):
            return None  # (a prompt only due is consolidated after the turn, in the background)
        await out.notice(CONSOLIDATING)
        carried = system + self._window.tools_text
        if self.consolidator.within_reach(workspace.memory.read(), carried, session):
            await self._first(workspace, session, prompt)
            system = prompt.frozen()
        if self._window.sendable(self.estimate(system, session)):
            return None
        log.info("a backlog in %s: answering from its newest turns", session.key)
        return self.consolidator.tail_start(session, system + self._window.tools_text)

    async def _first(self, workspace: Workspace, session: Session, prompt: PromptOf) -> None:
        """A failure to write the consolidation never holds up the answer (the model gets
        what fits, and the next turn tries again)."""
        try:
            await self.consolidator.maybe_consolidate(
                workspace, session, prompt.target, due=self.due
            )
        except LinkRefusedError:
            raise
        except OSError as exc:
            log.error("could not write the consolidation of %s: %s", session.key, exc)

    # ---- the server refused the prompt as too long -----------------------------------------

    async def on_overflow(
        self,
        exc: LLMContextOverflow,
        workspace: Workspace,
        session: Session,
        prompt: PromptOf,
        out: Outbound,
    ) -> bool:
        """Learn what the refusal tells, then make room: sized to a window the server named,
        the estimate is right again and what does not fit is consolidated as usual; else at
        least half is shed. True if the window changed (the prompt's form may have); `exc`
        raised again when nothing changed (asking again would be refused again)."""
        log.warning("the provider found the prompt too long for %s", session.key)
        if exc.prompt_tokens:
            raw = self._estimator.raw_prompt_tokens(
                prompt.frozen() + self._window.tools_text, session
            )
            self._estimator.observe_usage(raw, exc.prompt_tokens)
        resized = bool(exc.window) and self._window.learn(exc.window or 0)
        await out.notice(CONSOLIDATING)
        rounds = await self.consolidator.maybe_consolidate(
            workspace, session, prompt.target, force=not resized, due=self.due
        )
        if not rounds and not resized:
            raise exc
        return resized

    # ---- after a turn ----------------------------------------------------------------------

    def after_turn(self, workspace: Workspace, session: Session, prompt: PromptOf) -> None:
        """After a turn (answered or not): consolidated in the background if the next prompt
        is due, so the next turn does not fail the same way; round after round until it is
        not (a backlog), one background task per session."""
        user = workspace.user_key
        key = (user, session.key)
        if key in self._draining or not self.due(self.estimate(prompt.frozen(), session)):
            return
        if self._background.held(user):
            return  # a backup or /forget waits for this person's work: the next turn starts it
        if self._limits.check_tokens(user) is not None:
            # Past the person's limit (or the bot's): it waits, and the first turn they may
            # have again makes room before it answers.
            log.info("consolidation of %s waits for the token limit", session.key)
            return
        self._draining.add(key)

        async def drain() -> None:
            try:
                while not self.closing and self.due(
                    self._estimator.prompt_tokens(prompt.target(), session)
                ):
                    if self._limits.check_tokens(user) is not None:
                        break  # the person's (or the bot's) tokens are spent: it waits
                    if self._background.held(user):
                        break  # a backup or /forget waits for it: the next turn goes on
                    if not await self.consolidator.maybe_consolidate(
                        workspace, session, prompt.target, due=self.due
                    ):
                        break  # failed (retried on a later turn) or only the newest turn left
            finally:
                self._draining.discard(key)

        self._background.start(drain(), user)

    # ---- /new ------------------------------------------------------------------------------

    async def new_session(self, user_key: str, session_key: str) -> NewSession:
        """/new: the next message starts fresh; the old messages are filed in the background.

        The session lock is taken now and handed to the filing task, so a message sent right
        after /new waits for the old conversation to be filed instead of mixing with it.
        Past the person's token limit the filing (model calls) waits: where the conversation
        begins is saved, and the first turn they may have again files the old one first."""
        lock = self._sessions.lock(session_key)
        await lock.acquire()
        workspace = self._workspaces.get(user_key)  # under the lock, like a turn
        session = workspace.sessions.get(session_key)
        if not session.unconsolidated():
            lock.release()
            return "fresh"
        # Where the new conversation begins, for /status; saved with the cursor once filed.
        session.metadata[CONVERSATION_START] = session.total
        if self._limits.check_tokens(user_key) is not None:
            session.metadata[FILING_WAITS] = True
            try:
                workspace.sessions.save_metadata(session)
            finally:
                lock.release()
            return "waits"

        async def file_old_messages() -> None:
            try:
                await self.consolidator.archive_all(workspace, session)
            finally:
                lock.release()

        self._background.start(file_old_messages(), user_key)
        return "started"

    async def file_waiting(self, workspace: Workspace, session: Session, out: Outbound) -> None:
        """A /new whose filing waited for the token limit: the old conversation is filed
        before the next message joins the new one (the caller holds the session lock, as the
        filing task of /new does; the cursor's records save the metadata without the mark)."""
        if not session.metadata.pop(FILING_WAITS, False):
            return
        await out.notice(CONSOLIDATING)
        try:
            await self.consolidator.archive_all(workspace, session)
        except LinkRefusedError:
            raise
        except OSError as exc:
            session.metadata[FILING_WAITS] = True  # the next turn tries again
            log.error("could not file the conversation of %s: %s", session.key, exc)
