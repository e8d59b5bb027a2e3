"""Calling the Bot API within its limits: flood waits retried, raw calls for what PTB's
methods would parse at a cost, and errors described in one line for the log."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from telegram import Bot
from telegram.error import (
    EndPointNotFound,
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.warnings import PTBDeprecationWarning, PTBUserWarning

log = logging.getLogger(__name__)


FLOOD_RETRIES = 5


T = TypeVar("T")


async def flood_safe(call: Callable[[], Awaitable[T]]) -> T:
    """Run a Bot API call, waiting out 429 flood limits as Telegram asks."""
    for _ in range(FLOOD_RETRIES):
        try:
            return await call()
        except RetryAfter as exc:
            wait = retry_seconds(exc)
            log.warning("telegram: flood limit, retrying in %.0f s", wait)
            await asyncio.sleep(wait)
    return await call()


def allow_raw_calls() -> None:
    """do_api_request warns that Bot has a method for what raw_call asks; it is on purpose.
    (Installed when the application is built, not at import: a test framework's warning
    capture drops filters set during collection.)"""
    warnings.filterwarnings(
        "ignore",
        message=r"Please use 'Bot\.(getUpdates|sendMessage|getChatMember)'",
        category=PTBUserWarning,
    )


async def raw_call(
    bot: Bot, method: str, data: dict[str, Any], read_timeout: float | None = None
) -> Any:
    """A Bot API call through PTB's public raw call, its JSON result not made into objects
    (Update, Message: parsing them cost more CPU than the rest of a turn's Bot API work).
    Errors are raised as the named method raises them. No read_timeout: PTB's default."""
    try:
        if read_timeout is None:
            return await bot.do_api_request(method, data)
        return await bot.do_api_request(method, data, read_timeout=read_timeout)
    except EndPointNotFound as exc:
        # do_api_request reports a rejected token (401) as an unknown method; the methods we
        # call always exist, so it is the token.
        if isinstance(exc.__cause__, InvalidToken):
            raise exc.__cause__ from None
        raise


def retry_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB 22 warns that the type will become timedelta
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def describe_error(exc: TelegramError) -> str:
    """A short account of a Bot API error, never InvalidToken's text (it can hold the token)."""
    if isinstance(exc, InvalidToken):
        return "unauthorized"
    return f"{type(exc).__name__}: {exc.message}"
