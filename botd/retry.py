"""Waiting before a retry: the server's requested wait, or capped exponential backoff.

Channel adapters and model providers share these two pieces, and this module imports nothing
else of botd so that any layer may use it.

* ``retry_after`` reads how long a server asked us to wait: HTTP headers (``retry-after-ms``,
  or ``Retry-After`` in seconds or as an HTTP date, in any letter case) or a value an SDK
  already parsed (Telegram's ``retry_after``, an int or a ``timedelta``). A cap keeps an
  hour-long hint from stalling a chat for an hour.
* ``Backoff`` yields growing, jittered delays for retries the server gave no hint for, and
  starts over after ``reset()`` (call it on success), so a connection that recovered and
  fails again later waits the short first delay, not the long one it had reached.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

__all__ = ["Backoff", "RetryHint", "retry_after", "retry_wait"]

RetryHint = Mapping[str, Any] | Iterable[tuple[str, Any]] | timedelta | float | None
"""What ``retry_after`` reads: response headers, or a wait an SDK already parsed."""


def retry_after(
    hint: RetryHint, *, cap: float | None = None, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds the server asked us to wait, at most ``cap``; None when it asked nothing.

    ``hint`` is either a number of seconds or a ``timedelta`` (as SDKs report it), or the
    response headers (a mapping or pairs; a value may be a list, as some clients give
    repeated headers). ``retry-after-ms`` wins over ``Retry-After``; a date in the past or
    a negative number means no wait (0.0). An unreadable header counts as absent.
    """
    seconds: float | None
    if hint is None:
        return None
    if isinstance(hint, timedelta):
        seconds = hint.total_seconds()
    elif isinstance(hint, int | float):
        seconds = float(hint)
    else:
        seconds = _from_headers(hint, now)
    if seconds is None or seconds != seconds:  # absent, or NaN
        return None
    seconds = max(seconds, 0.0)
    return seconds if cap is None else min(seconds, cap)


def _from_headers(
    headers: Mapping[str, Any] | Iterable[tuple[str, Any]], now: Callable[[], float]
) -> float | None:
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found: dict[str, str] = {}
    for name, raw in pairs:
        value = raw[0] if isinstance(raw, list | tuple) and raw else raw
        if value is not None:
            found[str(name).lower()] = str(value).strip()
    millis = found.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = found.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - now()


class Backoff:
    """Delays for successive retries: ``first``, then times ``factor`` each time, up to ``cap``.

    Each delay is scaled down by a random fraction of at most ``jitter`` (0.5: somewhere
    between half and all of it), so clients that failed together do not retry together.
    ``reset()`` starts over at ``first``; call it when an attempt succeeded. ``rand`` is
    the random source (a function returning a float in [0, 1)), replaceable in tests.
    """

    def __init__(
        self,
        first: float = 1.0,
        *,
        factor: float = 2.0,
        cap: float = 30.0,
        jitter: float = 0.5,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if first < 0 or cap < 0 or factor < 1 or not 0 <= jitter <= 1:
            raise ValueError("backoff needs first, cap >= 0, factor >= 1 and 0 <= jitter <= 1")
        self.first = first
        self.factor = factor
        self.cap = cap
        self.jitter = jitter
        self._rand = rand
        self._failures = 0
        self._next = min(first, cap)

    @property
    def failures(self) -> int:
        """How many delays were handed out since the last reset."""
        return self._failures

    def next_delay(self) -> float:
        """The delay before the next retry; each call counts one more failure."""
        delay = self._next
        self._next = min(self.cap, delay * self.factor)
        self._failures += 1
        return delay * (1.0 - self.jitter * self._rand())

    def reset(self) -> None:
        """Start over at ``first`` (after a success)."""
        self._failures = 0
        self._next = min(self.first, self.cap)


def retry_wait(backoff: Backoff, hinted: float | None, *, max_wait: float) -> float:
    """Seconds to wait before the next attempt, never more than ``max_wait``.

    A positive server hint wins; otherwise the backoff's delay. The backoff advances either
    way, so the n-th retry without a hint waits the n-th delay.
    """
    fallback = backoff.next_delay()
    wait = hinted if hinted is not None and hinted > 0 else fallback
    return min(wait, max_wait)
