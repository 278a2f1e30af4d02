"""How long to wait before retrying a model call: the server's hint, or capped backoff."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

_BACKOFF_BASE = 0.5
_BACKOFF_CAP = 8.0


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait: ``retry-after-ms``, or ``retry-after`` (seconds or a date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
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
    return when.timestamp() - time.time()


def retry_wait(retries_so_far: int, hinted: float | None, *, max_wait: float) -> float:
    """Seconds to wait before the next attempt, never more than ``max_wait``.

    A positive server hint wins (SDKs honour even an hour-long one, which would stall a
    chat, hence the cap); otherwise exponential backoff with jitter, so clients that failed
    together spread out.
    """
    if hinted is not None and hinted > 0:
        wait = hinted
    else:
        backoff = min(_BACKOFF_BASE * 2.0**retries_so_far, _BACKOFF_CAP)
        wait = backoff * random.uniform(0.75, 1.0)
    return min(wait, max_wait)
