"""Platform rate limits as the loopback fakes enforce them: how many calls a key (a token, a
chat, a channel's route) may make, counted the way each platform counts.

* ``SlidingLimit``: at most ``count`` calls in any ``seconds`` (Telegram's and Slack's
  limits as documented: nothing tells the client how much is left; past the limit the call is
  refused with a wait, ``retry_after``).
* ``FixedBuckets``: Discord's buckets: ``count`` calls per bucket, the bucket emptied
  ``seconds`` after its first call; every answer says what is left (``X-RateLimit-*``
  headers), so a client that reads them (discord.py) waits before the limit.

A call refused is not counted.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

__all__ = ["BucketState", "FixedBuckets", "SlidingLimit", "retry_seconds"]


@dataclass
class SlidingLimit:
    """At most ``count`` calls in any ``seconds``, by key."""

    count: int
    seconds: float
    _seen: dict[str, deque[float]] = field(default_factory=dict)

    def wait(self, key: str, now: float) -> float:
        """Seconds until a call for ``key`` may go (0: now); counts nothing."""
        times = self._seen.setdefault(key, deque())
        while times and times[0] <= now - self.seconds:
            times.popleft()
        if len(times) < self.count:
            return 0.0
        return times[len(times) - self.count] + self.seconds - now

    def count_call(self, key: str, now: float) -> None:
        """Count a call for ``key`` made ``now``."""
        self._seen.setdefault(key, deque()).append(now)


def retry_seconds(wait: float) -> int:
    """A wait as a whole ``Retry-After`` (at least one second), as the platforms give it."""
    return max(1, math.ceil(wait))


@dataclass(frozen=True)
class BucketState:
    """What a bucket's answer tells: the limit, the calls left, the seconds until it empties,
    and whether this call was refused."""

    limit: int
    remaining: int
    reset_after: float
    refused: bool

    def headers(self, bucket: str) -> dict[str, str]:
        """Discord's ``X-RateLimit-*`` headers of this answer."""
        headers = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset-After": f"{self.reset_after:.3f}",
            "X-RateLimit-Bucket": bucket,
        }
        if self.refused:
            headers["X-RateLimit-Scope"] = "user"
        return headers


@dataclass
class FixedBuckets:
    """``count`` calls per bucket, each emptied ``seconds`` after its first call, by key."""

    count: int
    seconds: float
    _opened: dict[str, tuple[float, int]] = field(default_factory=dict)

    def call(self, key: str, now: float) -> BucketState:
        """Count a call for ``key`` made ``now``, or refuse it when its bucket is spent."""
        opened, used = self._opened.get(key, (now, 0))
        if now >= opened + self.seconds:
            opened, used = now, 0
        reset_after = opened + self.seconds - now
        if used >= self.count:
            return BucketState(self.count, 0, reset_after, refused=True)
        self._opened[key] = (opened, used + 1)
        return BucketState(self.count, self.count - used - 1, reset_after, refused=False)
