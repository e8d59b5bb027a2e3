"""A turn's answer passed on while the model writes it, and what is left to add at the end.

The reply port has no way to take text back, so what has been shown stays part of the answer:
- Each model call of the turn is a round. Text a round streams before it turns out to call a
  tool stays shown (a model says "Let me look that up" and does), and the next round's text
  follows it after a blank line. The session keeps each round's text in its own message.
- Leading and trailing white space of a round is held back until text follows it, so what was
  shown of a finished round is exactly the text the core saves (`content.strip()`).
- A round offered tools holds its text back while it may still be tool calls written as text
  (bot/tools/text_calls.py: `{"name": …`, `<tool_call>`, `functions.NAME:`): once it cannot
  be, what was held is shown and the rest follows as it comes; at the round's end a text that
  was calls is dropped unseen (the core runs them), anything else is shown.
- At the end the core's whole answer is known (the last round's text, perhaps with notes about
  attachments or a sentence saying it could not be saved; or an apology when the model failed
  mid-answer). `rest_of` says what of it has not been shown yet: the core adds that as the last
  piece, so the person sees the answer whole and each part of it once.
"""

from __future__ import annotations

from bot.outbound import Outbound, PassingOutbound
from bot.tools.text_calls import could_be_calls

SEPARATOR = "\n\n"


class AnswerStream(PassingOutbound):
    """The Outbound the core answers a turn through when [agent] stream is on: text pieces go
    on to `out` at once (tidied as the module docstring says); the rest is passed through."""

    def __init__(self, out: Outbound) -> None:
        super().__init__(out)
        self.shown = ""  # every piece passed on, concatenated
        self._round = ""  # what was shown of the current round (without a separator)
        self._held = ""  # trailing white space of the current round, not shown yet
        self._complete = False  # the current round's model call returned
        self._maybe_calls = False  # the current round's text may still be tool calls
        self._unsure = ""  # the round's text held back while it may be calls

    def new_round(self, *, tools: bool = False) -> None:
        """A model call starts (`tools`: offered to it, so it may write calls as text); white
        space the last one ended with is dropped."""
        self._round, self._held, self._complete = "", "", False
        self._maybe_calls, self._unsure = tools, ""

    async def end_round(self, *, calls: bool = False) -> None:
        """The model call returned its whole answer (it did not fail part way); `calls`: its
        text was tool calls (or a call marker), never to be shown."""
        held, self._unsure, self._maybe_calls = self._unsure, "", False
        if held and not calls:
            await self.add_text(held)
        self._complete = True

    async def add_text(self, text: str) -> None:
        if self._maybe_calls:
            self._unsure += text
            if could_be_calls(self._unsure):
                return
            text, self._unsure, self._maybe_calls = self._unsure, "", False
        if not self._round:
            text = text.lstrip()
        pending = self._held + text
        body = pending.rstrip()
        self._held = pending[len(body) :]
        if not body:
            return
        piece = body if self._round or not self.shown else SEPARATOR + body
        self._round += body
        self.shown += piece
        await self._out.add_text(piece)

    def rest_of(self, answer: str) -> str:
        """What of the core's final `answer` has not been shown. It extends the last round's
        text when that round was whole; anything else follows what was shown, after a blank
        line (a partial answer cut by a failure, or a round that ended in tool calls)."""
        if self._complete and self._round and answer.startswith(self._round):
            return answer[len(self._round) :]
        if self.shown and answer:
            return SEPARATOR + answer
        return answer
