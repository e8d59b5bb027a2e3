"""Secrets never reach a log: every log record is masked as it is made.

HTTP libraries log URLs, and some APIs carry the token in the URL; exceptions quote requests. So
the mask is not left to each adapter or to the CLI's handler: once `hide()` has been given a
secret, a log record factory replaces it with '***' in the message, the traceback and the stack
of every record of every logger, whoever handles it (the CLI's stderr, pytest, a supervisor).
Secrets are registered where they enter: config loading (every section's secret keys), the LLM
client, and each adapter as it starts (a test or embedder may build a Config by hand).

Some secrets are nobody's configured value: a provider's error message may quote the request's
`Authorization: Bearer …` header, with another key than ours. So strings that look like a token
(a bearer credential, an `sk-…` key, an `api_key=…` assignment) are masked too.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

MASK = "***"
MIN_LENGTH = 4  # shorter values would mask ordinary words
# What looks like a credential: (kept prefix, the secret). Long enough not to hit prose.
_ASSIGNED = r"[\"']?\s*[:=]\s*[\"']?"
_TOKEN_LIKE = re.compile(
    rf"(?i)(\bbearer\s+|\bapi[_-]?key{_ASSIGNED}|\baccess[_-]?token{_ASSIGNED})[^\s\"',;&]{{8,}}"
    r"|\bsk-[A-Za-z0-9_-]{8,}"
)

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first, so a secret inside another is masked whole
_previous_factory: Any = None


def hide(*values: str | None) -> None:
    """Mask these values in every log record from now on (short or empty values are ignored)."""
    global _secrets
    fresh = {v for v in values if v and len(v) >= MIN_LENGTH} - set(_secrets)
    with _lock:
        _install()  # also with no secret: token-like strings are masked from now on
        if fresh:
            _secrets = tuple(sorted({*_secrets, *fresh}, key=len, reverse=True))


def mask(text: str) -> str:
    """`text` with every hidden secret, and whatever looks like a token, replaced by '***'."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return _TOKEN_LIKE.sub(lambda m: (m.group(1) or "") + MASK, text)


def _install() -> None:
    global _previous_factory
    if _previous_factory is None:
        _previous_factory = logging.getLogRecordFactory()
        logging.setLogRecordFactory(_make_record)


def _make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record: logging.LogRecord = _previous_factory(*args, **kwargs)
    _scrub(record)
    return record


def _scrub(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # bad format arguments: logging reports those itself when it emits
        return
    masked = mask(message)
    if masked != message:
        record.msg, record.args = masked, ()
    if record.exc_info:
        text = logging.Formatter().formatException(record.exc_info)
        record.exc_text = mask(text)
        if record.exc_text != text:
            record.exc_info = None  # no handler may render the raw traceback again
    if record.stack_info:
        record.stack_info = mask(record.stack_info)
