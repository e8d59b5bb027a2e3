"""The context window the bot works in, how it is shared, and the system prompt that takes
its fixed part, held in one place.

WHY one object: the window's size decides the answer's share, MEMORY.md's budget, the margin,
the prompt's form (and so the tool schemas every request carries) and what is left to the
conversation. A server that names a smaller window only when it refuses a request
(llama-cpp-python) changes all of them at once; each reader asks this object, so learning it
is one assignment here, not an update of every copy. The system prompt of each session is
built here from plain values (`Place`), so consolidation can size its target without a message
in hand.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from bot.agent.prompt import ContextBuilder, FrozenPrompts
from bot.agent.sizing import Sizing, describe, plan
from bot.agent.window import ServerWindow
from bot.chats import ChatBook, chat_of
from bot.config import Config
from bot.inbound import Inbound
from bot.tools.tool import PromptForm, Tool
from bot.tools.toolbox import enabled_tools, tools_text
from memory.consolidation.budget import Budget, Shares
from memory.preferences import MEMORY_IN_GROUPS
from memory.session import Session
from memory.tokens import TokenEstimator
from memory.workspace import Workspace

log = logging.getLogger(__name__)

LEARNT_FROM = "named by the server refusing a longer request"


class ContextWindow:
    """The window and its shares (bot/agent/sizing.py plans them); `shares` is the part
    consolidation reads (the same object: memory/consolidation/budget.py)."""

    def __init__(
        self,
        asked: Config,
        sizing: Sizing,
        estimator: TokenEstimator,
        live: Callable[[], tuple[Tool, ...]] = tuple,
    ) -> None:
        """`asked`: the config as written (what is automatic is planned again when a smaller
        window is learnt; an explicit setting always wins). `live`: the tools offered now of
        the MCP servers running (bot/mcp/hub.py), which come and go."""
        self._asked = asked
        self._estimator = estimator
        self.sizing = sizing
        self.shares = Shares(sizing.budget, sizing.memory)
        self._own: tuple[Tool, ...] = tuple(enabled_tools(asked))  # those [tools] switches on
        self._live = live
        self._text: tuple[tuple[Tool, ...], PromptForm, str] = ((), sizing.form, "")

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The tools on now: those [tools] switches on, then the MCP servers' running now."""
        return self._own + self._live()

    @property
    def tools_text(self) -> str:
        """The schemas of `tools` in the window's form, as the estimate counts them."""
        tools, form = self.tools, self.sizing.form
        if self._text[:2] != (tools, form):
            self._text = (tools, form, tools_text(tools, form))
        return self._text[2]

    @property
    def tokens(self) -> int:
        return self.sizing.window

    @property
    def budget(self) -> Budget:
        return self.shares.budget

    @property
    def form(self) -> PromptForm:
        return self.sizing.form

    def sendable(self, prompt_tokens: int) -> bool:
        """Whether a request with this prompt may be sent: prompt + answer + margin fit."""
        return self.budget.fits(prompt_tokens)

    def learn(self, tokens: int) -> bool:
        """The server named its window, smaller than the one assumed: the bot is sized to it
        from now on (the answer, MEMORY.md's budget, the prompt's form), unless the window is
        configured (doctor says it is too large). True if it changed."""
        if self.sizing.window_from == "configured" or tokens >= self.tokens:
            return False
        told = ServerWindow(tokens, LEARNT_FROM)
        sizing = plan(self._asked, told, self._estimator)
        if sizing.form != self.sizing.form:
            # Other tool schemas from now on: how the server counted the old ones (its tool
            # template: ~400 tokens of llama-cpp-python's function calling) no longer holds.
            self._estimator.forget_calibration()
            sizing = plan(self._asked, told, self._estimator)
        log.warning("context window: %s", describe(sizing))
        self.sizing = sizing
        self.shares.budget, self.shares.memory = sizing.budget, sizing.memory
        return True


@dataclass(frozen=True)
class Place:
    """Where a turn is had, as the system prompt needs it: plain values, so a prompt (and the
    consolidation target) can be built without the message that came from there."""

    platform: str
    private: bool
    chat: str  # bot.chats: the chat's key (its persona)

    @classmethod
    def of(cls, inbound: Inbound) -> Place:
        return cls(inbound.platform, inbound.is_private, chat_of(inbound))


@dataclass(frozen=True)
class PromptOf:
    """A session's system prompt as consolidation needs it (bot/agent/consolidating.py)."""

    frozen: Callable[[], str]  # the system prompt the next request carries (no tools)
    target: Callable[[], str]  # built anew, with the tool schemas: what must keep its room


class SessionPrompts:
    """Each session's system prompt, in the window's form; frozen between consolidations so
    the prompt's prefix stays cached by the provider (`frozen`: bot/agent/prompt.py)."""

    def __init__(self, config: Config, window: ContextWindow, chats: ChatBook) -> None:
        self._config = config
        self._window = window
        self._chats = chats
        self.frozen = FrozenPrompts()

    def of(self, workspace: Workspace, session: Session, place: Place) -> PromptOf:
        return PromptOf(
            frozen=lambda: self.system(workspace, session, place),
            target=lambda: self.fresh(workspace, place) + self._window.tools_text,
        )

    def fresh(self, workspace: Workspace, place: Place) -> str:
        """The system prompt built now (not the frozen one)."""
        shown = self.memory_shown(workspace, place)
        return self.builder().system_prompt(
            workspace.memory.prompt_section() if shown else None,
            place.platform,
            place.private,
            self._persona(place),
        )

    def builder(self) -> ContextBuilder:
        """The messages' builder in the window's form, with the tools [tools] switches on."""
        return ContextBuilder(
            self._config.agent.bot_name, self._window.form, tools=self._window.tools
        )

    def system(self, workspace: Workspace, session: Session, place: Place) -> str:
        """The system prompt is frozen between consolidations so the prompt prefix stays cached;
        edits made by the edit_memory tool show up after the next consolidation (the model
        already sees them in its own tool calls). A change of /privacy takes effect at once."""
        shown = self.memory_shown(workspace, place)
        return self.frozen.get(
            (workspace.user_key, session.key),
            (session.last_consolidated, shown, self._persona(place), self._window.form),
            lambda: self.fresh(workspace, place),
        )

    def memory_shown(self, workspace: Workspace, place: Place) -> bool:
        """Whether this turn's model may see the person's memory: always in a private chat; in a
        group (whose answer is public) only by their own choice (/privacy), else the operator's
        [agent] memory_in_groups."""
        if place.private:
            return True
        chosen = workspace.preferences.get(MEMORY_IN_GROUPS)
        return chosen if isinstance(chosen, bool) else self._config.agent.memory_in_groups

    def _persona(self, place: Place) -> str:
        """The operator's instructions ([agent] system_prompt), then this chat's (/persona)."""
        chat = self._chats.get(place.chat).persona
        return "\n\n".join(p.strip() for p in (self._config.agent.system_prompt, chat) if p)
