"""Telegram's failures as botd's channel errors, and why a start failed in words that point
at the fix.

``api_error`` turns a PTB error into a ``TelegramAPIError`` marked retryable or not; no PTB
error leaves the adapter. python-telegram-bot reports a 401 and a 404 from ``getMe`` alike,
as "the token was rejected". Telegram answers 401 ("Unauthorized") for a token it does not
know, but 404 ("Not Found") for a URL that is no Bot API method: most often ``api_base_url``
is wrong (a path too many, another web server); ``start_failure`` tells them apart. A wrong
URL often reaches a server whose error page is no JSON, and PTB logs that with a traceback;
``quiet_non_json_error_tracebacks`` keeps the line and drops the traceback unless botd logs
at DEBUG (``botd --debug``).
"""

from __future__ import annotations

import logging

import httpx
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from ...retry import retry_after
from ..errors import ChannelError, ChannelStartError

__all__ = [
    "TelegramAPIError",
    "TelegramStartError",
    "api_error",
    "quiet_non_json_error_tracebacks",
    "start_failure",
]

log = logging.getLogger("botd.channels.telegram")


class TelegramAPIError(ChannelError):
    """Telegram refused a call; ``description`` is Telegram's reason (as PTB reports it)."""

    def __init__(
        self,
        method: str,
        description: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(
            f"Telegram {method}: {description}",
            retryable=retryable,
            retry_after=retry_after,
            maybe_delivered=maybe_delivered,
        )
        self.method = method
        self.description = description


class TelegramStartError(TelegramAPIError, ChannelStartError):
    """Starting failed: Telegram refused the token, or could not be reached."""


def api_error(method: str, exc: TelegramError) -> TelegramAPIError:
    """``exc`` as a ``TelegramAPIError`` that says whether trying again may help.

    PTB reports a 5xx answer as a bare ``NetworkError`` and a failure below HTTP as one
    caused by an httpx error; which httpx error tells whether the request got out.
    """
    description = exc.message
    if isinstance(exc, RetryAfter):
        return TelegramAPIError(
            method, description, retryable=True, retry_after=retry_after(exc.retry_after)
        )
    if isinstance(exc, BadRequest | Forbidden | InvalidToken | Conflict | ChatMigrated):
        return TelegramAPIError(method, description)  # Telegram refused the request itself
    if isinstance(exc, NetworkError):  # TimedOut included
        cause = exc.__cause__
        if isinstance(cause, httpx.HTTPError):
            description = f"{description} ({type(cause).__name__})"
        never_sent = isinstance(
            cause, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout
        )
        # Without an httpx cause Telegram (or a proxy) answered with an error status: the
        # request was not carried out. A read timeout or a connection lost after sending
        # leaves it open whether it was.
        answered = cause is None and not isinstance(exc, TimedOut)
        return TelegramAPIError(
            method, description, retryable=True, maybe_delivered=not (never_sent or answered)
        )
    return TelegramAPIError(method, description)


def start_failure(exc: TelegramError, api_base_url: str) -> str:
    """The one-line reason a start that raised ``exc`` failed."""
    if not isinstance(exc, InvalidToken):
        return exc.message
    cause = exc.__cause__
    said = cause.message if isinstance(cause, TelegramError) else exc.message
    if "not found" in said.lower() or "(404)" in said:
        return (
            f"getMe answered 404 ({said}): check api_base_url ({api_base_url!r} should be "
            "the Bot API root, e.g. https://api.telegram.org)"
        )
    return f"the bot token was rejected by Telegram (getMe: {said})"


class _TracebackOnlyWhenDebugging(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not log.isEnabledFor(logging.DEBUG):
            record.exc_info = None
            record.exc_text = None
        return True


_FILTER = _TracebackOnlyWhenDebugging()


def quiet_non_json_error_tracebacks() -> None:
    """Drop the traceback of PTB's "invalid JSON" error records unless at DEBUG (idempotent)."""
    logging.getLogger("telegram.request.BaseRequest").addFilter(_FILTER)
