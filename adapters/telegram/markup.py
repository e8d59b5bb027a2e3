"""Markdown from the model → the HTML subset Telegram accepts (parse_mode="HTML").

Telegram's HTML mode knows a handful of tags (b, i, s, code, pre, a, blockquote…) and rejects a
message whose tags do not nest or whose text holds a bare `<` or `&`. So everything that is not
markup we produce is escaped, and inline spans are parsed recursively: a tag always closes inside
the span that opened it. Anything we do not recognise stays as literal (escaped) text, and so
does punctuation after a backslash (`\\[`: how bot.formatting.literal keeps people's text as it is).

Render after splitting (bot.formatting.split_message): the visible text of the HTML is never longer
than the Markdown it came from, so a chunk within the limit stays within it.
"""

from __future__ import annotations

import html
import re

_FENCE = re.compile(r"^\s*```\s*([\w+#.-]*)\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_SPECIAL = re.compile(r"[`*_~\[\\]")
# A backslash before ASCII punctuation makes it literal, as in CommonMark (bot.formatting.literal).
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")

# Inline spans, tried at a position where a special character starts. Inner text is rendered
# recursively, so tags nest properly.
_INLINE = [
    ("code", re.compile(r"(`+)(.+?)\1", re.DOTALL)),
    ("link", re.compile(r"\[([^\]\n]+)\]\(((?:https?://|mailto:|tg://)[^\s()]+)\)")),
    ("b", re.compile(r"\*\*(?!\s)(.+?)(?<!\s)\*\*", re.DOTALL)),
    ("b", re.compile(r"(?<!\w)__(?!\s)(.+?)(?<!\s)__(?!\w)", re.DOTALL)),
    ("s", re.compile(r"~~(?!\s)(.+?)(?<!\s)~~", re.DOTALL)),
    ("i", re.compile(r"\*(?![\s*])(.+?)(?<![\s*])\*(?!\*)", re.DOTALL)),
    ("i", re.compile(r"(?<!\w)_(?![\s_])(.+?)(?<![\s_])_(?!\w)", re.DOTALL)),
]


def escape(text: str) -> str:
    """Escape the three characters Telegram's HTML mode reserves (quotes are fine in text)."""
    return html.escape(text, quote=False)


def markdown_to_html(text: str) -> str:
    """Render one chunk of Markdown as Telegram HTML; unknown syntax stays literal."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            i = _code_block(lines, i, fence.group(1), out)
            continue
        if _QUOTE.match(lines[i]):
            i = _quote_block(lines, i, out)
            continue
        out.append(_line(lines[i]))
        i += 1
    return "\n".join(out)


def _code_block(lines: list[str], start: int, lang: str, out: list[str]) -> int:
    """Emit a fenced block as <pre><code>; an unclosed fence runs to the end of the chunk."""
    body: list[str] = []
    i = start + 1
    while i < len(lines) and not _FENCE.match(lines[i]):
        body.append(lines[i])
        i += 1
    cls = f' class="language-{html.escape(lang)}"' if lang else ""
    out.append(f"<pre><code{cls}>{escape(chr(10).join(body))}</code></pre>")
    return i + 1  # skip the closing fence (or run past the end)


def _quote_block(lines: list[str], start: int, out: list[str]) -> int:
    """Consecutive "> " lines become one <blockquote>."""
    body: list[str] = []
    i = start
    while i < len(lines):
        m = _QUOTE.match(lines[i])
        if not m or _FENCE.match(lines[i]):
            break
        body.append(_line(m.group(1)))
        i += 1
    out.append(f"<blockquote>{chr(10).join(body)}</blockquote>")
    return i


def _line(line: str) -> str:
    """One line outside code blocks: headings bold, bullets as "•", inline spans rendered."""
    heading = _HEADING.match(line)
    if heading:
        return f"<b>{render_inline(heading.group(1))}</b>"
    bullet = _BULLET.match(line)
    if bullet and not re.fullmatch(r"\s*([-*_])(\s*\1){2,}\s*", line):
        return f"{bullet.group(1)}• {render_inline(bullet.group(2))}"
    return render_inline(line)


def render_inline(text: str) -> str:
    """Inline Markdown (code, links, bold, italic, strikethrough) → escaped HTML."""
    out: list[str] = []
    pos = 0
    while pos < len(text):
        special = _SPECIAL.search(text, pos)
        if special is None:
            out.append(escape(text[pos:]))
            break
        out.append(escape(text[pos : special.start()]))
        pos = special.start()
        rendered, end = _span_at(text, pos)
        out.append(rendered)
        pos = end
    return "".join(out)


def _span_at(text: str, pos: int) -> tuple[str, int]:
    """The rendered span starting at `pos` and where it ends, or the one literal character."""
    escaped = _ESCAPED.match(text, pos)
    if escaped:
        return escape(escaped.group(1)), escaped.end()
    for kind, pattern in _INLINE:
        m = pattern.match(text, pos)
        if not m:
            continue
        if kind == "code":
            return f"<code>{escape(m.group(2))}</code>", m.end()
        if kind == "link":
            href = html.escape(m.group(2), quote=True)
            return f'<a href="{href}">{render_inline(m.group(1))}</a>', m.end()
        return f"<{kind}>{render_inline(m.group(1))}</{kind}>", m.end()
    return escape(text[pos]), pos + 1
