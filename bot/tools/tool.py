"""What a tool the model may call is: one record, from which everything else is derived.

A `Tool` says, in one place, what the model is sent of it in each prompt form and chat (its
schema and its line of the system prompt's guide), whether the config switches it on, what it
may touch (the system prompt's promise about the tools is made of these) and how it runs. The
list of tools (bot/tools/toolbox.py) is the only other place that names it: the schemas sent,
the guide, the tokens sizing counts and the dispatch all come from that list.

A tool call is confined by construction: a tool gets the turn's `ToolTurn` (one person's
workspace and reminders, fixed before the model says anything) and the model's arguments, and
no argument can name a file, a path or another person.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from bot.config import Config
from bot.limits import Limits
from bot.media.sandbox import PdfSandbox
from bot.reminders.desk import PersonReminders
from bot.tools.held import TurnEdits
from memory.workspace import Workspace

# How much of the instructions and tools every prompt carries: "full", "compact" (a shorter
# guide and one-parameter tool schemas, for a small window: bot/agent/sizing.py picks it) or
# "none" (no tools: memory forms through consolidation only).
PromptForm = Literal["full", "compact", "none"]
FORMS: tuple[PromptForm, ...] = ("full", "compact", "none")

Schema = dict[str, Any]  # one entry of the request's "tools": {"type": "function", …}
Arguments = dict[str, Any]  # the model's arguments, parsed and cleaned (bot/tools/toolbox.py)


@dataclass(frozen=True)
class Reach:
    """Something a tool may touch, as the system prompt names it to the model: `own` things are
    the person's own ("this person's own memory"); others are named as they are ("the web")."""

    thing: str
    own: bool = True


MEMORY = Reach("memory")
REMINDERS = Reach("reminders")


@dataclass(frozen=True)
class Offer:
    """What the model is given of a tool in one prompt form and chat: its schema, and its part
    of the system prompt's guide ("" when the guide of that form does not name it)."""

    schema: Schema
    guide: str = ""


class MemoryRoom(Protocol):
    """MEMORY.md's share of the window as consolidation reads it (the turn's consolidator):
    the model's own edits may not take more, or consolidation would lose its room."""

    @property
    def memory_budget(self) -> int: ...

    def memory_tokens(self, memory: str) -> int: ...


@dataclass(frozen=True)
class Outside:
    """What the tools that reach outside the bot share (bot/tools/read_page.py, web_search.py):
    the sandboxed PDF reader, the per-person count of their calls ([limits]
    outside_calls_per_hour), and the prompt's limit in tokens, of which a result takes a share."""

    pdfs: PdfSandbox
    limits: Limits
    prompt_tokens: int


@dataclass
class ToolTurn:
    """What a tool call may use: one person's workspace and reminders desk (bound to the chat
    of the message), fixed when the turn starts. `public`: a group turn whose answer everyone
    reads and which must not see the person's memory; `group`: any group chat. `room`:
    MEMORY.md's budget (a real turn's consolidator; None: not bounded). `outside`: what the
    tools reaching outside use (None: they are not offered). `limits`: the person's
    per-minute reminder budget, which `remind` shares with /remind (None: not counted)."""

    workspace: Workspace
    reminders: PersonReminders
    config: Config
    public: bool = False
    form: PromptForm = "full"
    room: MemoryRoom | None = None
    group: bool = False
    outside: Outside | None = None
    limits: Limits | None = None
    edits: TurnEdits = field(init=False)  # the turn's MEMORY.md edits and their guard
    # Lines shown under the answer whatever the model says of them: a reminder it set (a small
    # model set one nobody asked for, and said nothing of it).
    told: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.edits = TurnEdits(self.workspace)


Run = Callable[[ToolTurn, Arguments], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    """One tool the model may call.

    Each `Offer` is what a prompt form and chat get of it; None: the tool is not offered there
    (the "none" form offers no tool). `public…`: a group turn without the person's memory, whose
    answer everyone reads. `run` answers the model with text, errors included ("Error: …"); it
    raises only what the turn must not survive (memory.safefs.LinkRefusedError).

    A tool with a reach that is not the person's own (`outside`) is confined further by the
    toolbox: its calls count towards the person's hourly limit, its results reach the model
    marked as data, never instructions, and after it ran, the turn's MEMORY.md edits are held
    for the person (bot/tools/held.py). `in_groups`: its switch for group chats (None: offered
    there as `public` says). `quotes_history`: its results are marked (memory.session.QUOTED)
    and consolidation sees only their length."""

    name: str
    reaches: tuple[Reach, ...]  # what it may touch: the system prompt promises no more
    enabled: Callable[[Config], bool]  # its switch ([tools] in the config)
    run: Run
    full: Offer | None = None
    compact: Offer | None = None
    public: Offer | None = None
    public_compact: Offer | None = None
    in_groups: Callable[[Config], bool] | None = None
    quotes_history: bool = False  # its results quote HISTORY.md: never archived into it again

    @property
    def outside(self) -> bool:
        """Whether it reaches past the person's own things (the web)."""
        return any(not reach.own for reach in self.reaches)

    def offer(self, form: PromptForm, *, public: bool = False) -> Offer | None:
        """What the model is given of this tool in `form`, in a public chat or not."""
        if form == "full":
            return self.public if public else self.full
        if form == "compact":
            return self.public_compact if public else self.compact
        return None


def string_schema(name: str, description: str, parameter: str) -> Schema:
    """A schema with one required string parameter: the compact form's (a small window)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {parameter: {"type": "string"}},
                "required": [parameter],
            },
        },
    }


def reach_of(tools: Sequence[Tool]) -> str:
    """What `tools` may touch, in words: "this person's own memory and reminders", then what is
    not the person's own ("…, and the web"); "" for no tools."""
    own = _unique(r.thing for tool in tools for r in tool.reaches if r.own)
    others = _unique(r.thing for tool in tools for r in tool.reaches if not r.own)
    parts = ([f"this person's own {listed(own)}"] if own else []) + others
    return ", and ".join(parts)


def listed(words: Sequence[str], last: str = "and") -> str:
    """ "a", "a and b", "a, b and c" ("or" for `last` = "or"); "" for none."""
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} {last} {words[-1]}"


def _unique(things: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(things))
