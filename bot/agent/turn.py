"""One turn of a person's conversation: the message kept, the prompt built, the model asked
(with its tools, streamed), the answer kept; /retry and /undo take a turn back.

A file that cannot be written (disk full, read-only, no permission) is answered here, for every
platform alike: one sentence saying whether the message was saved, the details in the log, and
the next message tries again. A consolidation that cannot be written never holds up an answer.
When to consolidate is bot/agent/consolidating.py's; the window is bot/agent/context_window.py's.
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
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any

from bot import logsafe
from bot.agent.background import BackgroundWork
from bot.agent.consolidating import ConsolidationPolicy, MemoryNews
from bot.agent.context_window import ContextWindow, Place, PromptOf, SessionPrompts
from bot.agent.conversation import supersede_last, withdraw_last
from bot.agent.prompt import ContextBuilder, with_media
from bot.agent.replies import reply_record
from bot.agent.residency import LoadedSessions
from bot.agent.streaming import AnswerStream
from bot.commands.context import DONE, REFUSED, UNSAVED, Taken
from bot.commands.control import memory_notice
from bot.config import Config
from bot.inbound import Delivered, Inbound
from bot.limits import Limits, Refusal
from bot.llm import entities
from bot.llm.client import LLMImagesRefused
from bot.llm.habits import ServerHabits, habits_of
from bot.media.attachments import AttachmentReader, Prepared
from bot.media.pictures import Pictures, load_pictures
from bot.media.voice import VoiceReplies
from bot.observe.metrics import count_limit_refusal
from bot.outbound import CONSOLIDATING, BufferedOutbound, Outbound, Reply
from bot.reminders.desk import PersonReminders, ReminderBook
from bot.tools import text_calls
from bot.tools.tool import Outside, ToolTurn
from bot.tools.toolbox import Toolbox, outside_in
from bot.usage import ChargedLLM, charged_to
from memory import clock
from memory.llm import (
    ChatResult,
    LLMBadRequest,
    LLMContextOverflow,
    LLMError,
    ToolCall,
)
from memory.safefs import LinkRefusedError
from memory.search.engine import prepare as prepare_search
from memory.session import HIDDEN, REMINDER_MARK, REPLY_TO, TURN, Session
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
# A streamed answer broken off once part of it was shown: never begun again on another model
# unasked (the person has read the start of this one).
LLM_CUT_REPLY = (
    "(My answer was cut off: I lost my language model part way. Your message is saved; "
    "/retry asks again.)"
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


def refused(inbound: Inbound, refusal: Refusal | None) -> Refusal | None:
    """A limit's refusal, counted and logged (None passes through)."""
    if refusal is not None:
        count_limit_refusal(refusal.kind)
        log.info("limit %s refused a message of %s", refusal.kind, inbound.user_key)
    return refusal


def usage_estimate(
    estimator: TokenEstimator, messages: list[dict[str, Any]], result: ChatResult
) -> tuple[int, int]:
    """The tokens of a call whose answer reported none, as the estimate counts them."""
    prompt = estimator.corrected(estimator.raw_request_tokens(messages))
    written = estimator.count_text(result.content or "")
    for call in result.tool_calls:
        written += estimator.count_text(f"{call.name} {call.arguments}")
    return prompt, written


class Turns:
    """Answers the messages that are not commands, and takes turns back (/undo, /retry)."""

    def __init__(
        self,
        config: Config,
        llm: ChargedLLM,
        window: ContextWindow,
        estimator: TokenEstimator,
        *,
        workspaces: Workspaces,
        sessions: LoadedSessions,
        limits: Limits,
        attachments: AttachmentReader,
        prompts: SessionPrompts,
        news: MemoryNews,
        reminder_book: ReminderBook,
        background: BackgroundWork,
        policy: ConsolidationPolicy,
        exclusive: Callable[[str], AbstractAsyncContextManager[None]],
        voice: VoiceReplies | None = None,
    ) -> None:
        """`exclusive`: a person's files held still (bot/agent/agent.py user_exclusive);
        `voice`: answers also read aloud ([voice])."""
        self.config = config
        self.llm = llm
        self.window = window
        self.estimator = estimator
        self.workspaces = workspaces
        self.sessions = sessions
        self.limits = limits
        self.attachments = attachments
        self.reminder_book = reminder_book
        self.background = background
        self.policy = policy
        self._exclusive = exclusive
        self.prompts = prompts
        self.voice = voice
        self.model = ModelCall(config, llm, window, estimator, limits, attachments)
        self.news = news  # told under a person's next private answer
        policy.consolidator.writer.on_event = self.news.note
        # Workspaces whose history index was looked at since they were loaded (_prepare_search).
        self._search_ready: weakref.WeakSet[Workspace] = weakref.WeakSet()
        self._small_tasks: set[asyncio.Task[None]] = set()

    async def aclose(self) -> None:
        await asyncio.gather(*self._small_tasks, return_exceptions=True)

    # ---- a message that is not a command ---------------------------------------------------

    async def handle(
        self, inbound: Inbound, out: Outbound, person: Callable[[], str] | None = None
    ) -> None:
        """Answer through `out` (streamed when [agent] stream says so). `person`: the key of
        the person the message's account belongs to, looked up again under the session's lock
        (a /link or /unlink made while the message waited changes it)."""
        await out.begin(private=False)
        stream = AnswerStream(out) if self.config.agent.stream else None
        reply = await self._answer(inbound, stream or out, person)
        text = stream.rest_of(reply.text) if stream else reply.text
        if text:
            await out.add_text(text)
        if self.voice is not None and isinstance(reply, Answered):
            await self.voice.follow(inbound, reply.said, out)  # after the text, never in its way
        await out.finish()

    async def _answer(
        self, inbound: Inbound, out: Outbound, person: Callable[[], str] | None = None
    ) -> Reply:
        """Refused by a limit, or answered by a turn."""
        if not inbound.text.strip() and not inbound.attachments:
            return Reply("(That message was empty.)")
        refusal = refused(inbound, self.limits.check(inbound.user_key))
        if refusal is not None:
            return Reply(refusal.text)
        try:
            return await self._turn(inbound, out, person)
        except LinkRefusedError as exc:  # a link planted after the workspace was opened
            log.error("refused a link in the workspace of %s: %s", inbound.user_key, exc)
            return Reply(UNSAFE_WORKSPACE_REPLY)

    async def _turn(
        self, inbound: Inbound, out: Outbound, person: Callable[[], str] | None = None
    ) -> Reply:
        self.sessions.note(inbound.user_key, inbound.session_key)
        async with self.sessions.lock(inbound.session_key):
            if person is not None and (now_of := person()) != inbound.user_key:
                # Its account was linked or unlinked while this waited: the conversation is
                # that person's now (a link change holds the session's lock while it moves it).
                inbound = replace(inbound, user_key=now_of)
                self.sessions.note(inbound.user_key, inbound.session_key)
                with charged_to(now_of):
                    return await self._locked_turn(inbound, out)
            return await self._locked_turn(inbound, out)

    async def _locked_turn(self, inbound: Inbound, out: Outbound) -> Reply:
        """The turn, under the session's lock."""
        # Looked up under the lock: a /wipe that held it has replaced the workspace.
        workspace = self.workspaces.get(inbound.user_key)
        session = await workspace.sessions.load(inbound.session_key)
        await self.estimator.warm(session)  # a backlog: counted in a thread, once
        self._prepare_search(workspace)
        earlier = None if inbound.message_id is None else session.index_of(inbound.message_id)
        if earlier is not None:
            return await self._redelivered(workspace, session, inbound, earlier, out)
        refusal = refused(inbound, self.limits.check_tokens(inbound.user_key))
        if refusal is not None:  # spent by the turns this message waited for
            return Reply(refusal.text)
        await self.policy.file_waiting(workspace, session, out)
        now = clock.now()
        prepared = await self._prepare(inbound)
        if isinstance(prepared, Reply):
            return prepared
        if not prepared.for_model and not prepared.parts:
            return Reply("\n\n".join(prepared.notes))  # nothing kept, nothing to answer
        user_message = self.prompts.builder().user_message(prepared.text, now, prepared.parts)
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
        too_long = self._too_long(user_message, workspace, Place.of(inbound))
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

    # ---- the conversation taken back: /undo, /retry (bot/agent/conversation.py) ----------

    async def undo_last(self, inbound: Inbound) -> Taken:
        """/undo, with nothing else of this person running (so no consolidation can be filing
        the exchange meanwhile)."""
        async with self._exclusive(inbound.user_key):
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
        refusal = refused(inbound, self.limits.check_tokens(inbound.user_key))
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

    # ---- what joins a conversation besides turns: receipts, reminders sent ---------------

    def note_delivery(self, inbound: Inbound, delivered: Delivered) -> None:
        """A receipt: the platform ids an answer was sent as, kept with the conversation."""
        try:
            workspace = self.workspaces.get(inbound.user_key)
            session = workspace.sessions.get(inbound.session_key)
            workspace.sessions.record_sent(session, delivered.answered, list(delivered.ids))
        except (OSError, UnsafeWorkspaceError) as exc:  # a reply to it then quotes the platform
            log.warning("could not keep where %s was answered: %s", inbound.session_key, exc)

    async def note_reminder(self, user_key: str, session_key: str, text: str) -> None:
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

    def _with_memory_notice(self, reply: Reply, inbound: Inbound) -> Reply:
        """The answer, then once what an earlier consolidation did to the person's memory
        (held back, or kept over its budget). Told in a private chat only: it is theirs."""
        event = self.news.take(inbound.user_key) if inbound.is_private else None
        if event is None:
            return reply
        return replace(reply, text="\n\n".join([reply.text, memory_notice(event)]))

    # ---- attachments (bot/media/attachments.py) --------------------------------------------

    async def _prepare(self, inbound: Inbound) -> Prepared | Reply:
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

    # ---- the answer ------------------------------------------------------------------------

    async def _respond(
        self, workspace: Workspace, session: Session, inbound: Inbound, out: Outbound
    ) -> Reply:
        """Answer the session's newest messages (the caller holds the session lock).

        Prompt and answer share the window: a prompt may be sent when prompt +
        max_output_tokens (+ a margin) fits. A provider that still refuses the request as too
        long gets one retry after consolidating; an outage is told apart from a conversation
        grown too long."""
        place = Place.of(inbound)
        prompt = self.prompts.of(workspace, session, place)
        since = await self.policy.before_turn(workspace, session, prompt, out)
        desk = PersonReminders(self.reminder_book, workspace, inbound)
        public = not self.prompts.memory_shown(workspace, place)
        made: list[Toolbox] = []

        def tools() -> Toolbox:
            """The turn's tools in the window's form (another, once a refusal resized it)."""
            turn = ToolTurn(
                workspace,
                desk,
                self.config,
                public=public,
                form=self.window.form,
                room=self.policy.consolidator,
                group=not place.private,
                outside=Outside(
                    self.attachments.pdfs, self.limits, self.window.budget.prompt_limit
                ),
                limits=self.limits,
            )
            if outside_in(session.unconsolidated()):
                turn.edits.read_outside("something from the web earlier in this conversation")
            made.append(Toolbox(self.window.tools, turn))
            return made[-1]

        try:
            reply = await self._respond_with(workspace, session, prompt, out, tools, since)
        finally:
            for held in [one.held for one in made if one.held is not None]:
                # told under this answer, or the next private one
                self.news.note(inbound.user_key, held.event())
        told = [line for one in made for line in one.told]  # a reminder the model set
        return replace(reply, text="\n\n".join([reply.text, *told])) if told else reply

    async def _respond_with(
        self,
        workspace: Workspace,
        session: Session,
        prompt: PromptOf,
        out: Outbound,
        new_tools: Callable[[], Toolbox],
        since: int | None = None,
    ) -> Reply:
        """_respond's model calls, with the turn's tools (one set: their bounds are the turn's;
        another after a refusal named a smaller window, whose form may offer fewer);
        `since`: the conversation from that message on (the newest part of a backlog)."""
        tools = new_tools()
        try:
            try:
                text = await self.model.run(workspace, session, prompt.frozen(), tools, out, since)
            except LLMContextOverflow as exc:
                if await self.policy.on_overflow(exc, workspace, session, prompt, out):
                    tools = new_tools()
                text = await self.model.run(workspace, session, prompt.frozen(), tools, out, since)
            except LLMImagesRefused as exc:
                if not await self.model.pictures(workspace, session):  # not about pictures
                    raise
                self.model.stop_sending_pictures(exc)
                text = await self.model.run(workspace, session, prompt.frozen(), tools, out, since)
                text = f"{text}\n\n{PICTURES_REFUSED}"
        except _NotSaved as failure:
            log.error("could not save the answer of %s: %s", session.key, failure.error)
            reason = disk_reason(failure.error)
            if failure.answer is None:
                return Reply(STOPPED_NOT_SAVED.format(reason=reason))
            return Reply(f"{failure.answer}\n\n{ANSWER_NOT_SAVED.format(reason=reason)}")
        except LLMContextOverflow as exc:
            self.policy.after_turn(workspace, session, prompt)
            log.warning("still too long after consolidating: %s", logsafe.mask(str(exc)))
            return Reply(TOO_LONG_REPLY)
        except LLMError as exc:
            self.policy.after_turn(workspace, session, prompt)
            if isinstance(out, AnswerStream) and out.shown:
                _llm_failed(session, exc)  # logged
                return Reply(LLM_CUT_REPLY)
            return Reply(_llm_failed(session, exc))
        if self.policy.due(self.policy.estimate(prompt.frozen(), session)):
            await out.notice(CONSOLIDATING)
        self.policy.after_turn(workspace, session, prompt)
        return Answered(text, said=text.removesuffix(f"\n\n{PICTURES_REFUSED}"))  # no note aloud

    def _too_long(
        self, user_message: dict[str, Any], workspace: Workspace, place: Place
    ) -> str | None:
        """A message that could never fit beside the memory is refused, with the reason: more
        than what the window leaves for conversation once the fixed part (system prompt,
        tools) and the answer are counted."""
        target = self.prompts.fresh(workspace, place) + self.window.tools_text
        fixed = self.policy.consolidator.fixed_tokens(target)
        limit = max(0, self.window.budget.prompt_limit - fixed)
        # The factor only: the learned offset belongs to whole prompts, not to one message.
        tokens = math.ceil(self.estimator.count_message(user_message) * self.estimator.factor)
        if tokens <= limit:
            return None
        return (
            f"That message is too long for me: about {tokens:,} tokens, and I can take about "
            f"{limit:,} at once. Could you send it in smaller parts? Nothing was saved."
        )

    # ---- a message delivered twice (the platform resends what a crash left unacknowledged) --

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

    def prompt_tokens(self, workspace: Workspace, session: Session, inbound: Inbound) -> int:
        """The next request's prompt tokens in this chat (for /status)."""
        system = self.prompts.system(workspace, session, Place.of(inbound))
        return self.policy.estimate(system, session)


class ModelCall:
    """An answer's model calls: the tool loop, each round streamed when the turn streams, with
    the pictures of the conversation (until the model turns out not to see them)."""

    def __init__(
        self,
        config: Config,
        llm: ChargedLLM,
        window: ContextWindow,
        estimator: TokenEstimator,
        limits: Limits,
        attachments: AttachmentReader,
    ) -> None:
        self.config = config
        self.llm = llm
        self.window = window
        self.estimator = estimator
        self.limits = limits
        self.attachments = attachments
        # [llm] vision, until the provider refuses pictures (then they go as text, as with false).
        self._sees_pictures = config.llm.vision

    async def run(
        self,
        workspace: Workspace,
        session: Session,
        system: str,
        tools: Toolbox,
        out: Outbound | None,
        since: int | None,
    ) -> str:
        """The tool loop, bounded in rounds, in calls (tools.room()) and by the person's token
        limits (checked before each round after the first: a turn that spent the day's tokens
        stops there); every assistant and tool message is persisted as sent. A group turn
        without the person's memory has the tools that cannot read it (a public ToolTurn).
        `since`: the conversation from that message on (the newest part of a backlog).

        A turn always ends in an answer: once its rounds, calls or window are spent, when the
        model makes a call it made already this turn (the result was in hand), or after one
        tool round on a server whose "auto" calls a tool every time (bot/llm/habits.py), the
        answer is asked without tools (`_answer_without_tools`)."""
        pictures = await self.pictures(workspace, session, since)  # once per turn, off the loop
        habits = habits_of(self.config.llm.base_url, self.config.llm.model)
        made: set[tuple[str, str]] = set()  # the turn's calls, by name and arguments
        stuck = False  # a call made already this turn, or one written as text it cannot take
        rounds = self.config.agent.max_tool_iterations
        for round_ in range(rounds + 1):  # the last only answers
            spent = self.limits.mid_turn(workspace.user_key) if round_ else None
            if spent is not None:
                count_limit_refusal(spent.kind)
                log.info("limit %s stopped a turn of %s", spent.kind, workspace.user_key)
                stop = {"role": "assistant", "content": spent.text}
                _append(workspace, session, stop, spent.text)
                return spent.text
            carried = system + self.window.tools_text
            raw = self.estimator.raw_prompt_tokens(carried, session, since)
            history = with_media(session.history(since), pictures)
            messages = ContextBuilder.messages(system, history)
            estimate = self.estimator.prompt_tokens(carried, session, since)
            full = not self.window.sendable(estimate)
            if round_ and (
                full or not tools.room() or round_ == rounds or stuck or habits.forces_calls
            ):
                # This turn's tool results filled the window (a weak model calling tools
                # round after round), or it made all the calls or rounds a turn may, or more
                # rounds bring nothing new (a call repeated, a server that calls whatever it
                # was given): it answers from them without tools, whose schemas then leave
                # the prompt and whose results can grow it no further.
                return await self._answer_without_tools(workspace, session, messages, tools, out)
            result = await self._ask_with_tools(raw, messages, tools.schemas, out, habits)
            calls = result.tool_calls[: tools.room()]  # the calls past the bound are not made
            if not calls and result.content and _call_text(result.content, tools.schemas):
                log.info("the model wrote a call it cannot make; answering without tools")
                stuck = True  # (never shown: asked once more, without tools)
                continue
            if not calls:
                text = (result.content or "").strip() or EMPTY_REPLY
                _append(workspace, session, {"role": "assistant", "content": text}, answer=text)
                return text
            if all(_call_key(call) in made for call in calls):
                # The same call again, its result in hand (a server whose "auto" always calls,
                # or a model that does not see tool results): not made again.
                log.info("the model repeated its tool call; answering without tools")
                stuck = True
                continue
            made.update(_call_key(call) for call in calls)
            _append(workspace, session, _assistant_with_calls(result, calls))
            for call in calls:
                output = await tools.execute(call.name, call.arguments)
                kept: dict[str, Any] = {"role": "tool", "tool_call_id": call.id, "name": call.name}
                _append(workspace, session, kept | {"content": output} | tools.marks(call.name))
        raise AssertionError("unreachable: the last round answers")

    async def _answer_without_tools(
        self,
        workspace: Workspace,
        session: Session,
        messages: list[dict[str, Any]],
        tools: Toolbox,
        out: Outbound | None,
    ) -> str:
        """The turn's answer asked with no tools, this turn's tool results given as text with
        the person's message (_plain_request): some chat formats show the model no tool
        message at all (llama-cpp-python's function calling), and show it its own calls, which
        it then writes out again as text. Such text is never shown: the turn says it went
        round in circles."""
        schemas = tools.schemas
        as_written = entities.writes_entities(messages)  # the person's, not the tools' text
        result = await self._ask(
            _plain_request(messages), [], out, names=_names(schemas), as_written=as_written
        )
        text = (result.content or "").strip()
        if text and _call_text(text, schemas):
            log.info("the answer asked without tools was tool calls again; not shown")
            text = STUCK_REPLY
        text = text or EMPTY_REPLY
        _append(workspace, session, {"role": "assistant", "content": text}, answer=text)
        return text

    async def _ask_with_tools(
        self,
        raw: int,
        messages: list[dict[str, Any]],
        schemas: list[dict[str, Any]],
        out: Outbound | None,
        habits: ServerHabits,
    ) -> ChatResult:
        """One round with the tools offered; its usage teaches the estimate (`raw`: the
        request's own count), and whether it answered teaches the server's habits."""
        # "auto" said explicitly: some servers read a missing tool_choice as "none".
        result = await self._ask(messages, schemas, out, tool_choice="auto")
        if result.prompt_tokens:
            self.estimator.observe_usage(raw, result.prompt_tokens)
        else:  # llama-cpp-python's streams: the estimate must not stay at our own count
            self.estimator.observe_no_usage()
        answered = not result.tool_calls and not _call_text(result.content, schemas)
        if schemas:
            habits.auto_round(answered=answered)
        if not result.tool_calls and not answered:
            # llama-cpp-python's function-calling format answers "auto" with an empty
            # message, or one that is only its call marker ("functions.search_history:"):
            # its grammar for "auto" allows nothing else (or a call it could not parse).
            # Asked without tools, it answers. (Its usage is not learned from: the server
            # leaves the schemas out then.)
            result = await self._ask(messages, schemas, out, tool_choice="none")
        return result

    async def _ask(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        out: Outbound | None,
        *,
        names: set[str] | None = None,
        as_written: bool | None = None,
        **options: Any,
    ) -> ChatResult:
        """One model call; streamed through `out` when it is the turn's AnswerStream (bot/
        streaming.py: each call is a round of the answer shown as it is written). Calls the
        model wrote as text, with tools offered, come back as its calls (_with_text_calls).
        `names`: the tools whose calls its text may hold (those offered, unless given): such
        text is held back from the stream until it is known not to be calls. Quote marks
        written as HTML entities are shown as quote marks (bot/llm/entities.py) unless
        `as_written` (None: unless the person wrote an entity in `messages`)."""
        options.setdefault("max_tokens", self.window.budget.answer)  # (may be learnt later)
        if as_written is None:
            as_written = entities.writes_entities(messages)
        if not isinstance(out, AnswerStream):
            answer = await self.llm.chat(messages, tools=tools, **options)
            answer = answer if as_written else entities.result_unescaped(answer)
            return _with_text_calls(answer, tools)
        names = _names(tools) if names is None else names
        out.new_round(tools=bool(names))  # held back while it may be calls written as text
        shown = out.add_text if as_written else entities.Unescaping(out.add_text)
        streamed = await self.llm.stream(messages, on_text=shown, tools=tools, **options)
        if isinstance(shown, entities.Unescaping):
            await shown.flush()
            streamed = entities.result_unescaped(streamed)
        result = _with_text_calls(streamed, tools)
        await out.end_round(calls=bool(names) and _call_text(result.content, tools, names))
        return result

    async def pictures(
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

    def stop_sending_pictures(self, exc: LLMImagesRefused) -> None:
        """The model cannot see: pictures reach it as "[image: caption]" text from now on, and
        people are told so with each new picture, as with [llm] vision = false."""
        self._sees_pictures = False
        self.attachments.stop_pictures()
        log.warning(
            "%s; pictures go to the model as text from now on (set [llm] vision = false, or "
            "use a model that takes pictures)",
            logsafe.mask(str(exc)),
        )


def _llm_failed(session: Session, exc: LLMError) -> str:
    """The answer to a failed model call. The detail is the provider's own words, which may
    quote the request (an `Authorization: Bearer …` header, someone's text): it goes to the log,
    masked, and the person gets one sentence that holds nothing of it. A refusal (HTTP 400) is
    not an outage, and is not worded as one."""
    log.warning("LLM call failed for %s: %s", session.key, logsafe.mask(str(exc)))
    if isinstance(exc, LLMBadRequest):
        return LLM_REFUSED_REPLY
    return LLM_FAILED_REPLY


@dataclass(frozen=True)
class Answered(Reply):
    """The model's answer to a turn (not a refusal, nor a failure's sentence); `said`: its words
    alone, without the notes added under it, which is what a voice reply reads aloud."""

    said: str = ""


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
    return bool(text) and not (marker and marker.group(1) in _names(schemas))


def _call_key(call: ToolCall) -> tuple[str, str]:
    """A call by what it does, its name and arguments (JSON compared as values, not text)."""
    arguments = call.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return call.name, arguments.strip()
    return call.name, json.dumps(arguments, sort_keys=True)


TOOL_RESULTS = "(Not written by the person: what your tools returned for this message.)"


def _plain_request(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request for an answer without tools: every tool call and result of the conversation
    taken out (a model shown its calls as `functions.NAME:` wrote them again as its answer),
    and this turn's results (after the person's last message) added to that message as text,
    each after the call it answers."""
    asked = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if asked is None:
        return messages
    called: dict[str, str] = {}
    results: list[str] = []
    for message in messages[asked + 1 :]:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            called[str(call.get("id"))] = _in_words(function.get("name"), function.get("arguments"))
        if message.get("role") == "tool":
            call_text = called.get(str(message.get("tool_call_id")), str(message.get("name")))
            results.append(f"{call_text} returned:\n{message.get('content')}")
    earlier = [m for m in messages[:asked] if m.get("role") != "tool" and not m.get("tool_calls")]
    if not results:
        return [*earlier, messages[asked]]
    note = "\n\n".join([TOOL_RESULTS, *results])
    content = messages[asked].get("content")
    if isinstance(content, list):  # pictures: the note is one more text part
        joined: Any = [*content, {"type": "text", "text": note}]
    else:
        joined = f"{content or ''}\n\n{note}"
    return [*earlier, {**messages[asked], "content": joined}]


# The start of a call written as text in a shape text_calls cannot take as one: its arguments
# HTML-escaped (llama-cpp-python's template escapes the prompt: `{ &#34;query&#34;: …`), or a
# tool not offered (`function.get_history:`). (A JSON object with a "name" is an answer when
# it names no tool: a person may ask for one.)
_CALL_START = re.compile(
    r"\s*(?:```[\w-]*\s*)?(?:functions?\.[\w-]+\s*:|<tool_call>|\{\s*(?:&#34;|&quot;)name\b)"
)


# An answer opening with a JSON object that names an offered tool, `{"name": "edit_memory"`,
# whatever follows: Qwen2.5 (its own template) wrote such objects line after line, one of them
# broken (a stray backtick), which text_calls.parse rightly does not take as calls, and the
# person was shown them all. (An object naming no offered tool stays an answer.)
_NAMED_CALL = re.compile(r'\s*(?:```[\w-]*\s*)?\[?\s*\{\s*"name"\s*:\s*"([\w.-]{1,64})"')


def _call_text(
    content: str | None, schemas: list[dict[str, Any]], names: set[str] | None = None
) -> bool:
    """Whether an answer is calls written as text, or only a call marker, not words for the
    person (`names`: the tools its calls may name; those of `schemas` unless given)."""
    text = content or ""
    if not _an_answer(text, schemas) or _CALL_START.match(text):
        return True
    offered = _names(schemas) if names is None else names
    named = _NAMED_CALL.match(text)
    if named is not None and named.group(1) in offered:
        return True
    return bool(text_calls.parse(text, offered))


def _in_words(name: Any, arguments: Any) -> str:
    """A call as a line of text that is no call format a model would copy back as one:
    `search_history (query: Lisbon)`."""
    try:
        values = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        values = arguments
    if isinstance(values, dict):
        said = ", ".join(f"{key}: {value}" for key, value in values.items())
    else:
        said = str(values or "")
    return f"{name} ({said})" if said else str(name)


def _names(schemas: list[dict[str, Any]]) -> set[str]:
    """The names of the tools a request offered."""
    return {str(schema.get("function", {}).get("name")) for schema in schemas}


def _with_text_calls(result: ChatResult, schemas: list[dict[str, Any]]) -> ChatResult:
    """`result`, or, when tools were offered, the server parsed no call and its whole text is
    calls (bot/tools/text_calls.py), those as its calls: run like any, their text neither
    shown nor kept."""
    if result.tool_calls or not schemas:
        return result
    calls = text_calls.parse(result.content, _names(schemas))
    if not calls:
        return result
    log.info("took tool calls written as text: %s", ", ".join(call.name for call in calls))
    return replace(result, content="", tool_calls=calls)


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
