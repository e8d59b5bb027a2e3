"""What a model server was seen to do with tools, learnt per endpoint and model for the process.

WHY: llama-cpp-python's `chatml-function-calling` format refuses a streamed request with
`tool_choice: "auto"` ("Automatic streaming tool choice is not supported", raised after its
event stream has begun: the client sees an empty or broken stream), and asked whole its "auto"
always picks a tool (its grammar allows a message only as a call marker). Asked the usual way
every round, a turn went round in circles for minutes. What the server did once it does again,
so it is learnt from the first refusal and the rounds that followed, and each request is given
the shape that gets an answer: tool rounds asked whole, and one tool round per turn, then the
answer without tools (bot/agent/turn.py). Said once in the log when learnt; never written to
disk (a server upgraded or started with another format is learnt afresh at the next start).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# "auto" rounds in a row that ended in a tool call (or in no answer at all) before the server
# is taken to force one every time: a good model answers within a round or two of its tools;
# two turns that each went round twice (a call, then the same call again) are enough.
FORCED_AFTER = 4
# A server's refusal of a streamed request with tools, lower-cased: llama-cpp-python's own
# ValueError (when a server reports it as an HTTP error rather than breaking the stream).
_REFUSALS = ("streaming tool choice is not supported",)


@dataclass
class ServerHabits:
    """One server's (endpoint and model) ways with tools, as seen so far."""

    name: str  # "model M at URL", for the log
    streams_tools: bool = True  # False: a streamed request with tools gets no answer
    forces_calls: bool = False  # True: "auto" calls a tool every time it is offered one
    _unanswered: int = field(default=0, repr=False)  # "auto" rounds in a row without text

    def no_tool_streams(self) -> None:
        """A streamed request with tools was refused, and the same asked whole was answered."""
        if self.streams_tools:
            self.streams_tools = False
            log.warning(
                "%s does not stream an answer when tools are offered: such requests are asked "
                "whole from now on (answers without tools are still streamed)",
                self.name,
            )

    def auto_round(self, *, answered: bool) -> None:
        """An "auto" round ended: in text (`answered`), or in tool calls or nothing."""
        if answered:
            self._unanswered = 0
            return
        self._unanswered += 1
        if self._unanswered >= FORCED_AFTER and not self.forces_calls:
            self.forces_calls = True
            log.warning(
                "%s answered none of the last %d requests that offered tools in text (a call "
                'or nothing each time: its "auto" does not answer): from now on a turn has one '
                "tool round, then its answer is asked without tools",
                self.name,
                self._unanswered,
            )


_KNOWN: dict[tuple[str, str], ServerHabits] = {}


def habits_of(base_url: str | None, model: str) -> ServerHabits:
    """The habits of the server at `base_url` (None: the OpenAI API) serving `model`."""
    where = (base_url or "").rstrip("/")
    found = _KNOWN.get((where, model))
    if found is None:
        name = f"the model provider ({model} at {where or 'the OpenAI API'})"
        found = _KNOWN[(where, model)] = ServerHabits(name)
    return found


def refuses_streamed_tools(reason: str) -> bool:
    """Whether a provider's error says it cannot stream an answer with tools offered."""
    lowered = reason.lower()
    return any(refusal in lowered for refusal in _REFUSALS)


def forget_all() -> None:
    """Everything learnt dropped (a test's server on a port another test's had)."""
    _KNOWN.clear()
