"""Voice replies: whether an answer is also spoken, what of it is read aloud, and what a person
hears when it cannot be.

The text is always sent; the voice follows it as a file of the answer (`OutFile(voice=True)`:
Telegram sends a voice message, Discord an audio file). Each person chooses with /voice (kept in
their preferences, so it follows /link and goes with /wipe): "off", "auto" (a voice message is
answered with a voice too) or "always"; [voice] mode is the choice of whoever made none.

Code blocks, links and Markdown are not read aloud (`speakable`); a long answer is read up to a
sentence's end within [voice] max_chars and says the rest is in the text (`spoken_part`). The
characters read aloud are counted per person and day (memory.usage.SpeechLog) against [voice]
chars_per_day. A speech server that fails or is slow (bot/media/speech.py bounds the wait)
leaves the text as it is: the person is told once, until a voice gets through again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from bot.config import VoiceConfig
from bot.inbound import Inbound
from bot.media.speech import Speaker, SpeechError
from bot.outbound import Outbound, OutFile
from memory import clock
from memory.preferences import VOICE, Preferences
from memory.usage import SPEECH_FILE, SpeechLog
from memory.workspace import Workspaces

log = logging.getLogger(__name__)

OFF, AUTO, ALWAYS = "off", "auto", "always"
MODES = (OFF, AUTO, ALWAYS)
FILE_NAME = "answer.ogg"
MIME = "audio/ogg"
REST_IN_TEXT = " The rest is in the text."
# Of an answer, the first max_chars × SCANNED characters are looked at for what to read aloud:
# enough for code and links left out, and little time on the event loop for any answer.
SCANNED = 16
FAILED = (
    "(I couldn't read this answer aloud: my voice server did not answer. You have it as text, "
    "and I'll keep trying with the next answers.)"
)
SPENT = (
    "(You've had {limit:,} characters read aloud today, the most for one day: my answers are "
    "text only until midnight UTC.)"
)


class VoiceReplies:
    """The voice of every person's answers, for the turn (`follow`) and /voice."""

    def __init__(
        self,
        config: VoiceConfig,
        speaker: Speaker | None,
        workspaces: Workspaces,
        is_admin: Callable[[str], bool],
    ) -> None:
        self.config = config
        self.speaker = speaker
        self.workspaces = workspaces
        self.is_admin = is_admin
        self._logs: dict[str, SpeechLog] = {}
        self._told: set[str] = set()  # told that the speech server failed, until it works again
        self._spent: dict[str, str] = {}  # person → the UTC day they were told it is spent

    @property
    def enabled(self) -> bool:
        return self.speaker is not None

    def mode_of(self, preferences: Preferences) -> tuple[str, bool]:
        """The person's mode, and whether it is their own choice (else [voice] mode's)."""
        chosen = preferences.get(VOICE)
        if chosen in MODES:
            return chosen, True
        return self.config.mode, False

    def spoken_today(self, user_key: str) -> int:
        return self._log(user_key).day(clock.now().date())

    def wanted(self, inbound: Inbound) -> bool:
        """Whether this message's answer is spoken too (the speaker on, the person's mode)."""
        if self.speaker is None:
            return False
        mode, _ = self.mode_of(self.workspaces.get(inbound.user_key).preferences)
        if mode == ALWAYS:
            return True
        return mode == AUTO and any(a.voice for a in inbound.attachments)

    async def follow(self, inbound: Inbound, said: str, out: Outbound) -> None:
        """After the answer's text: `said` (the model's words) read aloud and attached, when
        the person wants it; when it cannot be, the text stays as it is (whatever went wrong:
        the answer is sent all the same)."""
        if self.speaker is None:
            return
        try:
            await self._follow(inbound, said, out)
        except Exception:
            log.exception("voice: the answer in %s is sent without it", inbound.session_key)

    async def _follow(self, inbound: Inbound, said: str, out: Outbound) -> None:
        if self.speaker is None or not self.wanted(inbound):
            return
        cap = self.config.max_chars
        text = spoken_part(speakable(said[: cap * SCANNED]), cap)
        if not text:
            return
        user = inbound.user_key
        if self._over_limit(user, len(text)):
            today = clock.now().date().isoformat()
            if self._spent.get(user) != today:
                self._spent[user] = today
                await out.add_text("\n\n" + SPENT.format(limit=self.config.chars_per_day))
            return
        try:
            audio = await self.speaker.speak(text)
        except SpeechError as exc:
            log.warning("voice: no audio for an answer in %s: %s", inbound.session_key, exc)
            if user not in self._told:
                self._told.add(user)
                await out.add_text("\n\n" + FAILED)
            return
        self._told.discard(user)
        try:
            self._log(user).record(len(text))
        except OSError as exc:  # the voice matters more than the tally, as with tokens
            log.error("could not count the speech of %s: %s", user, exc)
        await out.attach_file(OutFile(FILE_NAME, MIME, data=audio, voice=True))

    def forget_user(self, user_key: str) -> None:
        """/wipe, idle eviction: nothing of the person stays in RAM."""
        self._logs.pop(user_key, None)
        self._told.discard(user_key)
        self._spent.pop(user_key, None)

    async def aclose(self) -> None:
        if self.speaker is not None:
            await self.speaker.aclose()

    def _over_limit(self, user_key: str, chars: int) -> bool:
        limit = self.config.chars_per_day
        if not limit or self.is_admin(user_key):
            return False
        return self.spoken_today(user_key) + chars > limit

    def _log(self, user_key: str) -> SpeechLog:
        found = self._logs.get(user_key)
        if found is None:
            root = self.workspaces.get(user_key).root
            found = self._logs[user_key] = SpeechLog(root / SPEECH_FILE)
        return found


# ---- what is read aloud -----------------------------------------------------------------------

# Every pattern looks at most a bounded span ahead of where it starts, so an answer of any size
# (a hostile one full of "__" or "[") is read in linear time, not held on the event loop.
_FENCED = re.compile(r"^ {0,3}(```|~~~).*?(?:^ {0,3}\1[^\n]*$|\Z)", re.M | re.S)
_IMAGE = re.compile(r"!\[([^\[\]\n]{0,200})\]\([^()\s]{0,2000}\)")
_LINK = re.compile(r"\[([^\[\]\n]{1,200})\]\([^()\s]{0,2000}\)")
_AUTOLINK = re.compile(r"<(?:https?|mailto|ftp):[^<>\s]{0,2000}>", re.I)
_URL = re.compile(r"\b(?:https?://|ftp://|www\.)[^\s<>()\[\]]+", re.I)
_INLINE_CODE = re.compile(r"`{1,3}([^`\n]{0,200})`{1,3}")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+", re.M)
_QUOTE = re.compile(r"^ {0,3}>[ \t]?", re.M)
_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+", re.M)
_RULE = re.compile(r"^ {0,3}(?:[-*_][ \t]*){3,}$", re.M)
_CELL_RULE = r"[ \t]*:?-{2,}:?[ \t]*"
_TABLE_LINE = re.compile(rf"^[ \t]*\|?{_CELL_RULE}(?:\|{_CELL_RULE})*\|?[ \t]*$", re.M)
_STRONG = re.compile(
    r"\*\*(?=\S)([^*\n]{1,200}?)(?<=\S)\*\*"
    r"|__(?=\S)([^_\n]{1,200}?)(?<=\S)__"
    r"|~~(?=\S)([^~\n]{1,200}?)(?<=\S)~~"
)
_EMPHASIS = re.compile(
    r"(?<![\w*])\*(?=\S)([^*\n]{1,200}?)(?<=\S)\*(?![\w*])"
    r"|(?<!\w)_(?=\S)([^_\n]{1,200}?)(?<=\S)_(?!\w)"
)
_HTML_TAG = re.compile(r"</?[a-zA-Z][^<>\n]{0,200}>")
_LEFT_BEHIND = re.compile(r" +([,.;:!?])")  # where an address was taken out
_SENTENCE_END = re.compile(r"[.!?…](?:[\"')\]]*)(?=\s)")


def speakable(text: str) -> str:
    """The answer as it is read aloud: no code blocks, no addresses, no Markdown marks (a link
    is read by its words, a picture by its description, inline code as its text)."""
    text = _FENCED.sub("\n", text)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _AUTOLINK.sub("", text)
    text = _URL.sub("", text)
    text = _INLINE_CODE.sub(r"\1", text)
    text = _TABLE_LINE.sub("", text)
    text = _RULE.sub("", text)
    text = _HEADING.sub("", text)
    text = _QUOTE.sub("", text)
    text = _BULLET.sub("", text)
    text = _STRONG.sub(_inner, text)
    text = _EMPHASIS.sub(_inner, text)
    text = _HTML_TAG.sub("", text)
    lines = [_LEFT_BEHIND.sub(r"\1", " ".join(_cells(line).split())) for line in text.splitlines()]
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _inner(match: re.Match[str]) -> str:
    """What a pair of marks holds (whichever alternative matched)."""
    return next(group for group in match.groups() if group is not None)


def _cells(line: str) -> str:
    """A table's row read as its cells, one after the other."""
    if "|" not in line:
        return line
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return ", ".join(cell for cell in cells if cell)


def spoken_part(text: str, max_chars: int) -> str:
    """`text` whole if it fits in `max_chars`, else its beginning up to a sentence's end (a
    line's, a word's) and a word that the rest is in the text."""
    if len(text) <= max_chars:
        return text
    room = max_chars - len(REST_IN_TEXT) - 1  # and an ellipsis
    if room < 20:
        return text[:max_chars]
    window = text[: room + 1]  # the space after a sentence that ends at `room`
    ends = [m.end() for m in _SENTENCE_END.finditer(window)]
    cut = ends[-1] if ends and ends[-1] > room // 3 else 0
    if not cut:
        for separator in ("\n", " "):
            at = window.rfind(separator, 0, room)
            if at > room // 3:
                cut = at
                break
    head = text[: cut or room].rstrip()
    if head and head[-1] not in ".!?…":
        head += "…"
    return head + REST_IN_TEXT
