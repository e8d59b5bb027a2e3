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
import errno
import json
import logging
import math
import re
import secrets
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bot import logsafe
from bot.agent.background import BackgroundWork
from bot.agent.commanding import Commanding, TurnCommands
from bot.agent.conversation import CONVERSATION_START, supersede_last, withdraw_last
from bot.agent.people import People
from bot.agent.prompt import ContextBuilder, FrozenPrompts, with_media
from bot.agent.replies import reply_record
from bot.agent.residency import Residents
from bot.agent.sizing import Sizing, describe, plan
from bot.agent.streaming import AnswerStream
from bot.agent.window import ServerWindow
from bot.chats import ChatBook, chat_of
from bot.commands.confirm import Confirmations
from bot.commands.context import (
    DONE,
    REFUSED,
    UNSAVED,
    NewSession,
    Taken,
)
from bot.commands.control import memory_notice
from bot.commands.linking import Codes, LinkCodes, PersonMoves
from bot.commands.registry import (
    ParsedCommand,
    is_command,
    is_heavy,
    parse_command,
    refuse_command,
    run_command,
)
from bot.config import Config
from bot.inbound import Delivered, Inbound
from bot.limits import Limits, Refusal
from bot.llm.client import LLMClient, LLMImagesRefused
from bot.media.attachments import AttachmentReader, Prepared
from bot.media.pictures import Pictures, load_pictures
from bot.media.rules import MediaRules
from bot.media.transcribe import Transcriber
from bot.observe.metrics import count_limit_refusal
from bot.outbound import (
    CONSOLIDATING,
    BufferedOutbound,
    Outbound,
    Reply,
)
from bot.platform import Resender
from bot.reminders.desk import PersonReminders, ReminderBook
from bot.reminders.scheduler import Scheduler
from bot.tools.tool import ToolTurn
from bot.tools.toolbox import Toolbox, enabled_tools, tools_text
from bot.usage import ChargedLLM, UsageBook, charged_to
from memory import clock
from memory.consolidation.consolidator import MemoryConsolidator, MemoryEvent
from memory.links import LinkTable
from memory.llm import (
    ChatLLM,
    ChatResult,
    LLMBadRequest,
    LLMContextOverflow,
    LLMError,
    ToolCall,
)
from memory.preferences import MEMORY_IN_GROUPS
from memory.safefs import LinkRefusedError
from memory.search.engine import prepare as prepare_search
from memory.session import HIDDEN, REMINDER_MARK, REPLY_TO, TURN, Session
from memory.text import valid_text
from memory.tokens import TokenEstimator
from memory.workspace import UnsafeWorkspaceError, Workspace, Workspaces

log = logging.getLogger(__name__)

TOO_LONG_REPLY = (
    "Sorry, this conversation has grown too long for my language model, even after I filed "
    "away older messages. Your message is saved. Send /new to start a fresh conversation "
    "(what I learned stays in my memory)."
)
STUCK_REPLY = "I went round in circles with my tools and stopped. Could you rephrase that?"
EMPTY_REPLY = "(I had nothing to say to that. Could you rephrase?)"
LLM_REFUSED_REPLY = (
    "Sorry, my language model refused that request (not an outage: trying again will not "
    "help). Your message is saved."
)
LLM_FAILED_REPLY = (
    "Sorry, I couldn't reach my language model just now. Your message is saved; please try "
    "again in a moment."
)
PICTURES_REFUSED = (
    "(My language model turned out not to take pictures, so it only read the text and the "
    "captions. Your picture is saved.)"
)
UNSAFE_WORKSPACE_REPLY = (
    "I can't open your memory safely: a file in it is a link (symbolic or hard), which I never "
    "follow. Your message was not saved; the bot's operator can see the details in the log."
)

NOT_SAVED = (
    "I couldn't save your message ({reason}), so I haven't answered it and nothing of it was "
    "kept. Please send it again once that is fixed."
)
ANSWER_NOT_SAVED = "(Your message is saved, but this answer is not: {reason}.)"
STOPPED_NOT_SAVED = (
    "Your message is saved, but I had to stop before answering it: I couldn't save my work "
    "({reason}). Please ask again once that is fixed."
)
FILING_WAITS = "filing_waits"  # session metadata: a /new whose filing waits for the token limit
_DISK_REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "a file has reached its size limit",
    errno.EROFS: "the disk is read-only",
    errno.EACCES: "I'm not allowed to write my files",
    errno.EPERM: "I'm not allowed to write my files",
}


class _NotSaved(Exception):
    """A message of the turn could not be appended; `answer` is the text that was not kept."""

    def __init__(self, error: OSError, answer: str | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.answer = answer


def disk_reason(error: OSError) -> str:
    """Why a write failed, in words for the person whose message it was (no paths)."""
    return _DISK_REASONS.get(error.errno or 0, "my files could not be written")


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
    ) -> None:
        """writer=False: for a process without the folder lock, which must not write (only
        commands that read, like /recall, are then sent to it). `sizing`: the window and its
        shares as bot.agent.sizing.size found them with the server's help; None: planned from
        the config alone. `links`, `codes`, `moves`, `chats`: a cluster worker's (the cluster's
        link table, its codes, a person's files moving between workers, the chats' settings);
        None: the workspaces folder's own. `confirmations`: the questions /forget and /wipe
        wait on (their time to answer). `on_consolidation(outcome)`: each consolidation's
        outcome, counted for /metrics."""
        self.estimator = TokenEstimator(image_tokens=config.llm.image_tokens)
        self._asked = config  # as configured: what is automatic is planned again (_learn_window)
        self.sizing = sizing or plan(config, estimator=self.estimator)
        config = self.sizing.applied(config)  # the automatic figures, filled in
        self.config = config
        self.workspaces = Workspaces(
            config.memory.workspaces_dir,
            keep_memory_versions=config.memory.keep_memory_versions,
            writer=writer,
        )
        # Every model call, the consolidator's too, is booked to the user it was made for.
        self.usage = UsageBook(self.workspaces)
        self.limits = Limits(config.limits, self.usage)
        self.llm = ChargedLLM(
            llm or LLMClient.from_config(config.llm), self.usage, self._estimated_usage
        )
        self.transcriber = Transcriber.from_config(config)
        self.attachments = AttachmentReader(
            MediaRules.from_config(config),
            self.transcriber,
            vision=config.llm.vision,
            max_seconds=config.transcription.max_seconds,
        )
        # [llm] vision, until the provider refuses pictures (then they go as text, as with false).
        self._sees_pictures = config.llm.vision
        self.window = self.sizing.window
        self.budget = self.sizing.budget
        self.consolidator = MemoryConsolidator(
            self.llm,
            self.estimator,
            self.window,
            answer_tokens=self.budget.answer,
            margin_tokens=self.budget.margin,
            memory_budget_tokens=self.sizing.memory,
        )
        self.consolidator.on_window = self._learn_window  # its refusals name the window too
        if on_consolidation is not None:
            self.consolidator.on_outcome = on_consolidation
        self.context = ContextBuilder(
            config.agent.bot_name, self.sizing.form, tools=enabled_tools(config)
        )
        # Personas, group triggers: the folder's book, or the cluster's.
        self.chats = ChatBook.of(config.memory.workspaces_dir) if chats is None else chats
        self.prompts = FrozenPrompts()
        self.background = BackgroundWork()
        self.confirmations = Confirmations() if confirmations is None else confirmations
        self.reminder_book = ReminderBook(config, self.workspaces, self.limits.is_admin)
        # Sends each reminder at its time once run() (the CLI starts it) and send_with().
        self.reminders = Scheduler(self.reminder_book, self._note_reminder)
        # Everything that keeps state of a person in RAM: /wipe and idle eviction alike make
        # each forget them (limits too: see README, "Limits").
        self.residents = Residents(
            self.workspaces,
            config.memory.max_loaded_sessions,
            holders=(
                self.workspaces,
                self.usage,
                self.limits,
                self.confirmations,
                self.consolidator,
                self.prompts,
                self.reminder_book,  # its forget_user also clears the scheduler after a /wipe
            ),
            work=self.consolidator,
            background=self.background,
            prompts=self.prompts,
            reminders=self.reminder_book,
        )
        self.sessions = self.residents.sessions
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
                start_new=self.start_new_session,
                undo=self.undo_last,
                retry=self.retry_last,
                prompt_tokens=lambda w, s, i: self._estimate(self._system_prompt(w, s, i), s),
                sizing=lambda: self.sizing,
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
            model=self.llm.model,
        )
        self._tools_text = tools_text(self.context.tools, self.sizing.form)
        self._draining: set[tuple[str, str]] = set()  # sessions consolidating in the background
        self._closing = False  # aclose(): a backlog's background work stops after its round
        # Workspaces whose history index was looked at since they were loaded (_prepare_search).
        self._search_ready: weakref.WeakSet[Workspace] = weakref.WeakSet()
        self._small_tasks: set[asyncio.Task[None]] = set()

    def _estimated_usage(
        self, messages: list[dict[str, Any]], result: ChatResult
    ) -> tuple[int, int]:
        """The tokens of a call whose answer reported none, as the estimate counts them."""
        prompt = self.estimator.corrected(self.estimator.raw_request_tokens(messages))
        written = self.estimator.count_text(result.content or "")
        for call in result.tool_calls:
            written += self.estimator.count_text(f"{call.name} {call.arguments}")
        return prompt, written

    # ---- entry points -------------------------------------------------------------------

    async def handle(self, inbound: Inbound, out: Outbound) -> None:
        """Answer one message through `out`: a command without the LLM, anything else as an LLM
        turn (see bot.outbound for the order of the calls)."""
        own = inbound.user_key
        inbound = replace(inbound, text=valid_text(inbound.text))  # lone surrogates → U+FFFD
        inbound, out = await self.people.receive(inbound, out)  # the person's key from here
        with self.sessions.handling(inbound.user_key, inbound.session_key):
            await self._handle(inbound, out, own)

    async def _handle(self, inbound: Inbound, out: Outbound, own: str) -> None:
        if inbound.delivered is not None:  # a receipt: noted, nothing to answer
            await out.begin(private=False)
            self._note_delivery(inbound, inbound.delivered)
            await out.finish()
            return
        command = parse_command(inbound.text)
        user = inbound.user_key
        with charged_to(user):  # also the consolidation this message starts
            if await self._refused_unsafe(inbound, command, out):
                return
            if command is not None:
                heavy = is_heavy(command)
                refusal = self._refused(inbound, self.limits.check_command(user, heavy=heavy))
                if refusal is not None:
                    await refuse_command(command, refusal.text, out)
                    return
                await run_command(command, lambda: self.commanding.context(inbound, own), out)
                return
            await out.begin(private=False)
            stream = AnswerStream(out) if self.config.agent.stream else None
            reply = await self._answer(inbound, stream or out)
            text = stream.rest_of(reply.text) if stream else reply.text
            if text:
                await out.add_text(text)
            await out.finish()

    async def _answer(self, inbound: Inbound, out: Outbound) -> Reply:
        """A message that is not a command: refused by a limit, or answered by a turn."""
        if not inbound.text.strip() and not inbound.attachments:
            return Reply("(That message was empty.)")
        refusal = self._over_limit(inbound)
        if refusal is not None:
            return Reply(refusal.text)
        try:
            return await self._turn(inbound, out)
        except LinkRefusedError as exc:  # a link planted after the workspace was opened
            log.error("refused a link in the workspace of %s: %s", inbound.user_key, exc)
            return Reply(UNSAFE_WORKSPACE_REPLY)

    def _over_limit(self, inbound: Inbound) -> Refusal | None:
        """[limits]: the refusal of a message (not saved), or None to answer it."""
        return self._refused(inbound, self.limits.check(inbound.user_key))

    def _refused(self, inbound: Inbound, refusal: Refusal | None) -> Refusal | None:
        if refusal is not None:
            count_limit_refusal(refusal.kind)
            log.info("limit %s refused a message of %s", refusal.kind, inbound.user_key)
        return refusal

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

    def stopping(self) -> None:
        """The process is stopping: work that can be cut short ends now (PDFs being read)."""
        self.attachments.stop()

    def send_with(self, platform: str, sender: Resender) -> None:
        """Reminders asked on `platform` are sent through `sender` (an adapter's send_to)."""
        self.reminders.send_with(platform, sender)

    async def _note_reminder(self, user_key: str, session_key: str, text: str) -> None:
        """A reminder sent: it joins the session it was asked in, as the bot's message, so the
        model knows it reminded them (under the session's lock, as a turn's messages)."""
        with self.sessions.handling(user_key, session_key):
            self.sessions.note(user_key, session_key)
            async with self.sessions.lock(session_key):
                if not self.workspaces.exists(user_key):
                    return  # wiped since
                workspace = self.workspaces.get(user_key)
                session = workspace.sessions.get(session_key)
                message = {"role": "assistant", "content": text, REMINDER_MARK: True}
                workspace.sessions.append(session, message)

    async def aclose(self) -> None:
        """Wait for pending consolidation (a backlog's only for its current round), then close
        the LLM client."""
        self._closing = True
        self.attachments.stop()
        await self.background.wait_all()
        await asyncio.gather(*self._small_tasks, return_exceptions=True)
        await self.people.aclose()
        await self.llm.aclose()
        if self.transcriber is not None:
            await self.transcriber.aclose()

    # ---- the turn -----------------------------------------------------------------------

    async def _turn(self, inbound: Inbound, out: Outbound) -> Reply:
        self.sessions.note(inbound.user_key, inbound.session_key)
        async with self.sessions.lock(inbound.session_key):
            # Looked up under the lock: a /wipe that held it has replaced the workspace.
            workspace = self.workspaces.get(inbound.user_key)
            session = await workspace.sessions.load(inbound.session_key)
            await self.estimator.warm(session)  # a backlog: counted in a thread, once
            self._prepare_search(workspace)
            earlier = self._earlier_copy(session, inbound.message_id)
            if earlier is not None:
                return await self._redelivered(workspace, session, inbound, earlier, out)
            refusal = self._refused(inbound, self.limits.check_tokens(inbound.user_key))
            if refusal is not None:  # spent by the turns this message waited for
                return Reply(refusal.text)
            await self._file_waiting(workspace, session, out)
            now = clock.now()
            prepared = await self._prepare(workspace, inbound)
            if isinstance(prepared, Reply):
                return prepared
            if not prepared.for_model and not prepared.parts:
                return Reply("\n\n".join(prepared.notes))  # nothing kept, nothing to answer
            user_message = self.context.user_message(prepared.text, now, prepared.parts)
            user_message[TURN] = secrets.token_hex(4)  # what /undo and /retry name it by
            if inbound.reply_to is not None:
                replied = await reply_record(
                    inbound.reply_to,
                    workspace.sessions,
                    session,
                    self.config.agent.reply_context_chars,
                )
                if replied is not None:
                    user_message[REPLY_TO] = replied
            too_long = self._too_long(user_message, workspace, inbound)
            if too_long:
                return Reply(too_long)  # nothing kept: its files neither
            not_kept = await self._keep_media(workspace, inbound, prepared)
            if not_kept is not None:
                return not_kept
            if inbound.message_id is not None:
                user_message["message_id"] = inbound.message_id
            try:
                workspace.sessions.append(session, user_message)
            except LinkRefusedError:
                raise  # not the disk: a planted link (see _answer)
            except OSError as exc:
                log.error("could not save a message of %s: %s", inbound.session_key, exc)
                return Reply(NOT_SAVED.format(reason=disk_reason(exc)))
            if not prepared.for_model:
                return self._notes_only(workspace, session, prepared.notes)
            reply = _with_notes(await self._respond(workspace, session, inbound, out), prepared)
            return self._with_memory_notice(reply, inbound)

    # ---- the conversation taken back: /undo, /retry (bot/agent/conversation.py) ---------------

    async def undo_last(self, inbound: Inbound) -> Taken:
        """/undo, with nothing else of this person running (so no consolidation can be filing
        the exchange meanwhile)."""
        async with self.residents.exclusive(inbound.user_key):
            workspace = self.workspaces.get(inbound.user_key)
            session = workspace.sessions.get(inbound.session_key)
            try:
                return withdraw_last(workspace.sessions, session)
            except OSError as exc:
                log.error("could not withdraw in %s: %s", inbound.session_key, exc)
                return Taken(UNSAVED, said=disk_reason(exc))

    async def retry_last(self, inbound: Inbound) -> Taken:
        """/retry: the newest message answered again, its old answer superseded. Under the
        session's lock, once this person's consolidations are done (none may be filing it)."""
        # (The command counted towards the minute already: what is left is the tokens.)
        refusal = self._refused(inbound, self.limits.check_tokens(inbound.user_key))
        if refusal is not None:
            return Taken(REFUSED, answer=Reply(refusal.text))
        self.sessions.note(inbound.user_key, inbound.session_key)
        async with self.sessions.lock(inbound.session_key):
            while pending := self.background.of(inbound.user_key):
                await asyncio.gather(*pending, return_exceptions=True)
            workspace = self.workspaces.get(inbound.user_key)
            session = workspace.sessions.get(inbound.session_key)
            try:
                taken, _ = supersede_last(workspace.sessions, session)
            except OSError as exc:
                log.error("could not supersede in %s: %s", inbound.session_key, exc)
                return Taken(UNSAVED, said=disk_reason(exc))
            if taken.outcome != DONE:
                return taken
            asked = session.last_turn()
            retried = None if asked is None else session.span(asked, asked + 1)[0]
            if inbound.message_id is not None and retried and retried.get("message_id"):
                # The receipt of this answer names the /retry: it is the answer to that message.
                session.retried[inbound.message_id] = str(retried["message_id"])
            reply = await self._respond(workspace, session, inbound, BufferedOutbound())
            return replace(taken, answer=self._with_memory_notice(reply, inbound))

    def _note_delivery(self, inbound: Inbound, delivered: Delivered) -> None:
        """A receipt: the platform ids an answer was sent as, kept with the conversation."""
        try:
            workspace = self.workspaces.get(inbound.user_key)
            session = workspace.sessions.get(inbound.session_key)
            workspace.sessions.record_sent(session, delivered.answered, list(delivered.ids))
        except (OSError, UnsafeWorkspaceError) as exc:  # a reply to it then quotes the platform
            log.warning("could not keep where %s was answered: %s", inbound.session_key, exc)

    def _with_memory_notice(self, reply: Reply, inbound: Inbound) -> Reply:
        """The answer, then once what an earlier consolidation did to the person's memory
        (held back, or kept over its budget). Told in a private chat only: it is theirs."""
        event = self.consolidator.take_event(inbound.user_key) if inbound.is_private else None
        if event is None:
            return reply
        return replace(reply, text="\n\n".join([reply.text, memory_notice(event)]))

    # ---- attachments (bot/media/attachments.py) --------------------------------------------------

    async def _prepare(self, workspace: Workspace, inbound: Inbound) -> Prepared | Reply:
        """The message's text and media references (its files kept by `_keep_media`)."""
        if not inbound.attachments:
            return Prepared(inbound.text, for_model=True)
        return await self.attachments.prepare(inbound)

    async def _keep_media(
        self, workspace: Workspace, inbound: Inbound, prepared: Prepared
    ) -> Reply | None:
        """The message's files written to media/ before the message; a Reply if they cannot."""
        try:
            await self.attachments.keep(prepared, workspace.media)
        except LinkRefusedError:
            raise
        except OSError as exc:
            log.error("could not keep the media of %s: %s", inbound.session_key, exc)
            return Reply(NOT_SAVED.format(reason=disk_reason(exc)))
        return None

    def _notes_only(self, workspace: Workspace, session: Session, notes: list[str]) -> Reply:
        """A message with nothing the model could answer (a picture it cannot see, a voice
        message not transcribed): saved, and answered with the notes, saved as the answer."""
        text = "\n\n".join(notes) or EMPTY_REPLY
        try:
            _append(workspace, session, {"role": "assistant", "content": text}, answer=text)
        except _NotSaved as failure:
            log.error("could not save the answer of %s: %s", session.key, failure.error)
            return Reply(f"{text}\n\n{ANSWER_NOT_SAVED.format(reason=disk_reason(failure.error))}")
        return Reply(text)

    async def _respond(
        self, workspace: Workspace, session: Session, inbound: Inbound, out: Outbound
    ) -> Reply:
        """Answer the session's newest messages (the caller holds the session lock).

        Prompt and answer share the window: a prompt fits when prompt + max_output_tokens (+ a
        margin) does. A provider that still refuses the request as too long gets one retry
        after consolidating; an outage is told apart from a conversation grown too long."""
        system = self._system_prompt(workspace, session, inbound)
        since = None  # answered from the whole conversation, else from this message on
        if not self.budget.fits(self._estimate(system, session)):
            # The prompt cannot fit at all: make room before calling the model, when the
            # rounds of one consolidation do it. A backlog (a migrated transcript, a long outage)
            # is not waited for: the newest turns that fit are answered, and the rest is
            # worked through in the background.
            await out.notice(CONSOLIDATING)
            tools_text = system + self._tools_text
            if self.consolidator.within_reach(workspace.memory.read(), tools_text, session):
                await self._consolidate_first(workspace, session, inbound)
                system = self._system_prompt(workspace, session, inbound)
            if not self.budget.fits(self._estimate(system, session)):
                since = self.consolidator.tail_start(session, system + self._tools_text)
                log.info("a backlog in %s: answering from its newest turns", inbound.session_key)
        desk = PersonReminders(self.reminder_book, workspace, inbound)
        public = not self._memory_shown(workspace, inbound)
        made: list[Toolbox] = []

        def tools() -> Toolbox:
            """The turn's tools in the window's form (another, once a refusal resized it)."""
            turn = ToolTurn(workspace, desk, self.config, public=public, form=self.sizing.form)
            made.append(Toolbox(self.context.tools, turn))
            return made[-1]

        try:
            return await self._respond_with(workspace, session, inbound, out, system, tools, since)
        finally:
            for held in [one.held for one in made if one.held is not None]:
                # told under this answer, or the next private one
                self.consolidator.note_event(
                    inbound.user_key, MemoryEvent("held", dropped=held.dropped, facts=held.facts)
                )

    async def _respond_with(
        self,
        workspace: Workspace,
        session: Session,
        inbound: Inbound,
        out: Outbound,
        system: str,
        new_tools: Callable[[], Toolbox],
        since: int | None = None,
    ) -> Reply:
        """_respond's model calls, with the turn's tools (one set: their bounds are the turn's;
        another after a refusal named a smaller window, whose form may offer fewer);
        `since`: the conversation from that message on (the newest part of a backlog)."""
        tools = new_tools()
        try:
            try:
                run = self._run_model
                text = await run(workspace, session, system, tools, out=out, since=since)
            except LLMContextOverflow as exc:
                log.warning("the provider found the prompt too long for %s", inbound.session_key)
                resized = self._learn_from_overflow(exc, system, session)
                await out.notice(CONSOLIDATING)
                # Sized to the window the server named, the estimate is right again: what
                # does not fit is consolidated as usual (else at least half is shed).
                rounds = await self.consolidator.maybe_consolidate(
                    workspace, session, self._cost_of_prompt(workspace, inbound), force=not resized
                )
                if not rounds and not resized:
                    raise
                if resized:
                    tools = new_tools()
                system = self._system_prompt(workspace, session, inbound)
                text = await self._run_model(
                    workspace, session, system, tools, out=out, since=since
                )
            except LLMImagesRefused as exc:
                if not await self._pictures(workspace, session):  # not about pictures
                    raise
                self._stop_sending_pictures(exc)
                text = await self._run_model(
                    workspace, session, system, tools, out=out, since=since
                )
                text = f"{text}\n\n{PICTURES_REFUSED}"
        except _NotSaved as failure:
            log.error("could not save the answer of %s: %s", inbound.session_key, failure.error)
            reason = disk_reason(failure.error)
            if failure.answer is None:
                return Reply(STOPPED_NOT_SAVED.format(reason=reason))
            return Reply(f"{failure.answer}\n\n{ANSWER_NOT_SAVED.format(reason=reason)}")
        except LLMContextOverflow as exc:
            self._consolidate_later(workspace, session, inbound, system)
            log.warning("still too long after consolidating: %s", logsafe.mask(str(exc)))
            return Reply(TOO_LONG_REPLY)
        except LLMError as exc:
            self._consolidate_later(workspace, session, inbound, system)
            return Reply(_llm_failed(inbound, exc))
        if not self.budget.fits(self._estimate(system, session)):
            await out.notice(CONSOLIDATING)
        self._consolidate_later(workspace, session, inbound, system)
        return Reply(text)

    def _consolidate_later(
        self, workspace: Workspace, session: Session, inbound: Inbound, system: str
    ) -> None:
        """After a turn (answered or not): consolidate in the background if the next prompt
        would not fit, so the next turn does not fail the same way; round after round until
        it fits (a backlog), one background task per session."""
        key = (inbound.user_key, session.key)
        if key in self._draining or self.budget.fits(self._estimate(system, session)):
            return
        if self.limits.check_tokens(inbound.user_key) is not None:
            # Past the person's limit (or the bot's): it waits, and the first turn they may
            # have again makes room before it answers.
            log.info("consolidation of %s waits for the token limit", inbound.session_key)
            return
        self._draining.add(key)

        async def drain() -> None:
            prompt = self._cost_of_prompt(workspace, inbound)
            try:
                while not self._closing and not self.budget.fits(
                    self.estimator.prompt_tokens(prompt(), session)
                ):
                    if self.limits.check_tokens(inbound.user_key) is not None:
                        break  # the person's (or the bot's) tokens are spent: it waits
                    if not await self.consolidator.maybe_consolidate(workspace, session, prompt):
                        break  # failed (retried on a later turn) or only the newest turn left
            finally:
                self._draining.discard(key)

        self.background.start(drain(), inbound.user_key)

    def _learn_from_overflow(self, exc: LLMContextOverflow, system: str, session: Session) -> bool:
        """A rejection that says how long the provider found the prompt is a usage report; one
        that names the window tells it (llama-cpp-python tells it no other way). True if the
        bot was sized to it."""
        if exc.prompt_tokens:
            raw = self.estimator.raw_prompt_tokens(system + self._tools_text, session)
            self.estimator.observe_usage(raw, exc.prompt_tokens)
        return bool(exc.window) and self._learn_window(exc.window or 0)

    def _learn_window(self, tokens: int) -> bool:
        """The server named its window, smaller than the one assumed: the bot is sized to it
        from now on (the answer, MEMORY.md's budget, the prompt's form), unless the window is
        configured (an explicit setting wins; doctor says it is too large)."""
        if self.sizing.window_from == "configured" or tokens >= self.window:
            return False
        told = ServerWindow(tokens, "named by the server refusing a longer request")
        sizing = plan(self._asked, told, self.estimator)
        if sizing.form != self.sizing.form:
            # Other tool schemas from now on: how the server counted the old ones (its tool
            # template: ~400 tokens of llama-cpp-python's function calling) no longer holds.
            self.estimator.forget_calibration()
            sizing = plan(self._asked, told, self.estimator)
        log.warning("context window: %s", describe(sizing))
        self.sizing = sizing
        self.config = sizing.applied(self._asked)
        self.window = sizing.window
        self.budget = sizing.budget
        self.consolidator.resize(self.budget, sizing.memory)
        self.context.form = sizing.form
        self._tools_text = tools_text(self.context.tools, sizing.form)
        self.prompts.clear()  # built for the other form
        return True

    async def _consolidate_first(
        self, workspace: Workspace, session: Session, inbound: Inbound
    ) -> None:
        """Consolidate before answering; a failure to write it never holds up the answer (the
        model gets what fits, and the next turn tries again)."""
        try:
            await self.consolidator.maybe_consolidate(
                workspace, session, self._cost_of_prompt(workspace, inbound)
            )
        except LinkRefusedError:
            raise
        except OSError as exc:
            log.error("could not write the consolidation of %s: %s", inbound.session_key, exc)

    # ---- a message delivered twice (the platform resends what a crash left unacknowledged) --

    def _earlier_copy(self, session: Session, message_id: str | None) -> int | None:
        """Index of the stored copy of this platform message (memory.session.FILED: already
        consolidated), or None."""
        return None if message_id is None else session.index_of(message_id)

    async def _redelivered(
        self, workspace: Workspace, session: Session, inbound: Inbound, index: int, out: Outbound
    ) -> Reply:
        """Never persist a message twice. Send its answer again if it has one; if a later
        message follows, that one's turn answers both; if it is the newest, answer it now. A
        consolidated one always had a later message (the newest is never consolidated)."""
        if index < session.offset or session.span(index, index + 1)[0].get(HIDDEN):
            return Reply("")  # filed, or withdrawn by /undo: nothing to answer again
        for message in session.span(index + 1):
            if message.get(HIDDEN):
                continue  # an answer /retry replaced
            if message.get("role") == "user":
                return Reply("")
            if message.get(REMINDER_MARK):
                continue  # a reminder sent meanwhile is no answer to it
            if message.get("role") == "assistant" and not message.get("tool_calls"):
                return Reply(str(message.get("content") or EMPTY_REPLY))
        log.info("answering a redelivered message of %s", inbound.session_key)
        return await self._respond(workspace, session, inbound, out)

    async def _run_model(
        self,
        workspace: Workspace,
        session: Session,
        system: str,
        tools: Toolbox,
        *,
        out: Outbound | None = None,
        since: int | None = None,
    ) -> str:
        """The tool loop, bounded in rounds, in calls (tools.room()) and by the person's token
        limits (checked before each round after the first: a turn that spent the day's tokens
        stops there); every assistant and tool message is persisted as sent. A group turn
        without the person's memory has the tools that cannot read it (a public ToolTurn).
        `since`: the conversation from that message on (the newest part of a backlog)."""
        pictures = await self._pictures(workspace, session, since)  # once per turn, off the loop
        for round_ in range(self.config.agent.max_tool_iterations):
            spent = self.limits.mid_turn(workspace.user_key) if round_ else None
            if spent is not None:
                count_limit_refusal(spent.kind)
                log.info("limit %s stopped a turn of %s", spent.kind, workspace.user_key)
                stop = {"role": "assistant", "content": spent.text}
                _append(workspace, session, stop, spent.text)
                return spent.text
            raw = self.estimator.raw_prompt_tokens(system + self._tools_text, session, since)
            history = with_media(session.history(since), pictures)
            messages = self.context.messages(system, history)
            full = not self.budget.fits(self._estimate(system, session, since))
            if round_ and (full or not tools.room()):
                # This turn's tool results filled the window (a weak model calling tools
                # round after round), or it made all the calls a turn may: it answers from
                # them without tools, whose schemas then leave the prompt and whose results
                # can grow it no further.
                result = await self._ask(messages, [], out)
            else:
                result = await self._ask_with_tools(raw, messages, tools.schemas, out)
            calls = result.tool_calls[: tools.room()]  # the calls past the bound are not made
            if not calls:
                text = (result.content or "").strip() or EMPTY_REPLY
                _append(workspace, session, {"role": "assistant", "content": text}, answer=text)
                return text
            _append(workspace, session, _assistant_with_calls(result, calls))
            for call in calls:
                output = await tools.execute(call.name, call.arguments)
                _append(
                    workspace,
                    session,
                    {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": output},
                )
        _append(workspace, session, {"role": "assistant", "content": STUCK_REPLY}, STUCK_REPLY)
        return STUCK_REPLY

    async def _ask_with_tools(
        self,
        raw: int,
        messages: list[dict[str, Any]],
        schemas: list[dict[str, Any]],
        out: Outbound | None,
    ) -> ChatResult:
        """One round with the tools offered; its usage teaches the estimate (`raw`: the
        request's own count)."""
        # "auto" said explicitly: some servers read a missing tool_choice as "none".
        result = await self._ask(messages, schemas, out, tool_choice="auto")
        if result.prompt_tokens:
            self.estimator.observe_usage(raw, result.prompt_tokens)
        else:  # llama-cpp-python's streams: the estimate must not stay at our own count
            self.estimator.observe_no_usage()
        if not result.tool_calls and not _an_answer(result.content, schemas):
            # llama-cpp-python's function-calling format answers "auto" with an empty
            # message, or one that is only its call marker ("functions.search_history:"):
            # its grammar for "auto" allows nothing else. Asked without tools, it answers.
            # (Its usage is not learned from: the server leaves the schemas out then.)
            result = await self._ask(messages, schemas, out, tool_choice="none")
        return result

    async def _ask(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        out: Outbound | None,
        **options: Any,
    ) -> ChatResult:
        """One model call; streamed through `out` when it is the turn's AnswerStream (bot/
        streaming.py: each call is a round of the answer shown as it is written)."""
        options.setdefault("max_tokens", self.budget.answer)  # (the window may be learnt later)
        if not isinstance(out, AnswerStream):
            return await self.llm.chat(messages, tools=tools, **options)
        out.new_round()
        result = await self.llm.stream(messages, on_text=out.add_text, tools=tools, **options)
        out.end_round()
        return result

    async def _pictures(
        self, workspace: Workspace, session: Session, since: int | None = None
    ) -> Pictures:
        """The pictures the turn's requests carry (bot/media/pictures.py), of the conversation
        from `since` on when given (a backlog's tail: the whole would be built on the loop)."""
        llm = self.config.llm
        return await load_pictures(
            session.history(since),
            workspace.media.read,
            max_images=llm.max_images_in_context if self._sees_pictures else 0,
            max_bytes=llm.max_image_bytes_in_context,
        )

    def _stop_sending_pictures(self, exc: LLMImagesRefused) -> None:
        """The model cannot see: pictures reach it as "[image: caption]" text from now on, and
        people are told so with each new picture, as with [llm] vision = false."""
        self._sees_pictures = False
        self.attachments.stop_pictures()
        log.warning(
            "%s; pictures go to the model as text from now on (set [llm] vision = false, or "
            "use a model that takes pictures)",
            logsafe.mask(str(exc)),
        )

    def _too_long(
        self, user_message: dict[str, Any], workspace: Workspace, inbound: Inbound
    ) -> str | None:
        """A message that could never fit beside the memory is refused, with the reason: more
        than what the window leaves for conversation once the fixed part (system prompt,
        tools) and the answer are counted."""
        fixed = self.consolidator.fixed_tokens(self._cost_of_prompt(workspace, inbound)())
        limit = max(0, self.budget.prompt_limit - fixed)
        # The factor only: the learned offset belongs to whole prompts, not to one message.
        tokens = math.ceil(self.estimator.count_message(user_message) * self.estimator.factor)
        if tokens <= limit:
            return None
        return (
            f"That message is too long for me: about {tokens:,} tokens, and I can take about "
            f"{limit:,} at once. Could you send it in smaller parts? Nothing was saved."
        )

    # ---- prompts ------------------------------------------------------------------------

    def _cost_of_prompt(self, workspace: Workspace, inbound: Inbound) -> Callable[[], str]:
        """For the consolidator: the text whose tokens every request carries besides history."""
        return lambda: self._fresh_prompt(workspace, inbound) + self._tools_text

    def _estimate(self, system: str, session: Session, since: int | None = None) -> int:
        """Estimated prompt tokens of the next request: system prompt, tools, history (from
        `since` on, when given)."""
        return self.estimator.prompt_tokens(system + self._tools_text, session, since)

    def _fresh_prompt(self, workspace: Workspace, inbound: Inbound) -> str:
        shown = self._memory_shown(workspace, inbound)
        return self.context.system_prompt(
            workspace.memory.prompt_section() if shown else None,
            inbound.platform,
            inbound.is_private,
            self._persona(inbound),
        )

    def _persona(self, inbound: Inbound) -> str:
        """The operator's instructions ([agent] system_prompt), then this chat's (/persona)."""
        chat = self.chats.get(chat_of(inbound)).persona
        return "\n\n".join(p.strip() for p in (self.config.agent.system_prompt, chat) if p)

    def _memory_shown(self, workspace: Workspace, inbound: Inbound) -> bool:
        """Whether this turn's model may see the person's memory: always in a private chat; in a
        group (whose answer is public) only by their own choice (/privacy), else the operator's
        [agent] memory_in_groups."""
        if inbound.is_private:
            return True
        chosen = workspace.preferences.get(MEMORY_IN_GROUPS)
        return chosen if isinstance(chosen, bool) else self.config.agent.memory_in_groups

    def _system_prompt(self, workspace: Workspace, session: Session, inbound: Inbound) -> str:
        """The system prompt is frozen between consolidations so the prompt prefix stays cached;
        edits made by the edit_memory tool show up after the next consolidation (the model
        already sees them in its own tool calls). A change of /privacy takes effect at once."""
        shown = self._memory_shown(workspace, inbound)
        return self.prompts.get(
            (inbound.user_key, session.key),
            (session.last_consolidated, shown, self._persona(inbound)),
            lambda: self._fresh_prompt(workspace, inbound),
        )

    async def start_new_session(self, inbound: Inbound) -> NewSession:
        """/new: the next message starts fresh; the old messages are filed in the background.

        The session lock is taken now and handed to the filing task, so a message sent right
        after /new waits for the old conversation to be filed instead of mixing with it.
        Past the person's token limit the filing (model calls) waits: where the conversation
        begins is saved, and the first turn they may have again files the old one first."""
        lock = self.sessions.lock(inbound.session_key)
        await lock.acquire()
        workspace = self.workspaces.get(inbound.user_key)  # under the lock, like a turn
        session = workspace.sessions.get(inbound.session_key)
        if not session.unconsolidated():
            lock.release()
            return "fresh"
        # Where the new conversation begins, for /status; saved with the cursor once filed.
        session.metadata[CONVERSATION_START] = session.total
        if self.limits.check_tokens(inbound.user_key) is not None:
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

        self.background.start(file_old_messages(), inbound.user_key)
        return "started"

    async def _file_waiting(self, workspace: Workspace, session: Session, out: Outbound) -> None:
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

    def _prepare_search(self, workspace: Workspace) -> None:
        """The person's first message since their workspace was loaded: a big history's index is
        checked, and built in the background if it is missing or stale, so that their first
        /recall or search_history answers from it instead of reading the whole file. Off the
        loop, not awaited: the turn does not wait for it."""
        if workspace in self._search_ready:
            return
        self._search_ready.add(workspace)
        task = asyncio.create_task(asyncio.to_thread(prepare_search, workspace.history_path))
        self._small_tasks.add(task)
        task.add_done_callback(self._small_tasks.discard)


def _llm_failed(inbound: Inbound, exc: LLMError) -> str:
    """The answer to a failed model call. The detail is the provider's own words, which may
    quote the request (an `Authorization: Bearer …` header, someone's text): it goes to the log,
    masked, and the person gets one sentence that holds nothing of it. A refusal (HTTP 400) is
    not an outage, and is not worded as one."""
    log.warning("LLM call failed for %s: %s", inbound.session_key, logsafe.mask(str(exc)))
    if isinstance(exc, LLMBadRequest):
        return LLM_REFUSED_REPLY
    return LLM_FAILED_REPLY


def _with_notes(reply: Reply, prepared: Prepared) -> Reply:
    """The answer, then what the person should know about their attachments."""
    if not prepared.notes:
        return reply
    return replace(reply, text="\n\n".join([reply.text, *prepared.notes]))


def _append(
    workspace: Workspace, session: Session, message: dict[str, Any], answer: str | None = None
) -> None:
    """Persist one message of the turn; a failed write becomes _NotSaved (see _respond)."""
    try:
        workspace.sessions.append(session, message)
    except LinkRefusedError:
        raise
    except OSError as exc:
        raise _NotSaved(exc, answer) from exc


def _an_answer(content: str | None, schemas: list[dict[str, Any]]) -> bool:
    """Whether the model's text is an answer: not empty, and not just a chat format's marker
    for calling one of the tools (llama-cpp-python's "functions.<name>:")."""
    text = (content or "").strip()
    marker = re.fullmatch(r"functions\.([\w-]+):?", text)
    names = {schema.get("function", {}).get("name") for schema in schemas}
    return bool(text) and not (marker and marker.group(1) in names)


def _assistant_with_calls(result: ChatResult, made: list[ToolCall]) -> dict[str, Any]:
    calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments),
            },
        }
        for call in made
    ]
    # "" rather than null: llama-cpp-python's server refuses (HTTP 500) an assistant message
    # whose content is null, and the session would fail on every later turn.
    return {"role": "assistant", "content": result.content or "", "tool_calls": calls}
