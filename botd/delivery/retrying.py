"""Retrying sends per conversation: a failure that may pass is tried again, in order.

``Retrier.call`` runs one adapter call (a send, an edit, a delete) for a conversation. A
``ChannelError`` marked ``retryable`` (a 5xx, a 429, a lost connection) is tried again after
the platform's ``retry_after`` or, without one, a growing jittered delay (``Backoff``); any
other error is raised at once, so a platform's refusal reaches the caller in its own words.

The caller awaits its call, so a conversation's later pieces wait behind the one being
retried and never overtake it. Nothing is shared between conversations but this object's
bookkeeping: each waits in its own task, so one chat's outage or flood wait delays no other.

The budget (``RetrySettings.budget``, five minutes by default) counts from the first failure
of a conversation's current outage, not per piece: while a chat stays unreachable its
pieces are retried until the budget is spent, and after that each gets one attempt and is
given up (``DeliveryGivenUp``) until a call to that chat succeeds again, which ends the
outage. A run of thirty paragraphs into a dead chat therefore costs five minutes, not thirty
times five. The first give-up of an outage is reported once (``give_up_notice``).

A wait between two tries that is botd's own backoff (not the platform's ``retry_after``) ends
early when the platform is seen reachable again (``wake``: its poller, gateway or socket got
through after failing), so a reply that waited out an outage goes as soon as the network is
back rather than at the end of its backoff.

A failure that ``maybe_delivered`` (a timeout after the request went out) is retried like
any other: the platforms offer no way to ask whether it landed, and a reply shown twice can
be ignored while a lost one cannot be noticed. Edits and deletes are idempotent anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from ..channels.errors import ChannelError
from ..retry import Backoff, retry_wait

log = logging.getLogger(__name__)

_T = TypeVar("_T")

DEFAULT_RETRY_BUDGET = 300.0
"""Seconds a conversation's failing sends are retried before they are given up."""


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """How failed sends are retried: for ``budget`` seconds, waiting ``first`` doubling to
    ``cap`` between tries (or what the platform asked, up to ``max_hint``)."""

    budget: float = DEFAULT_RETRY_BUDGET
    first: float = 1.0
    cap: float = 30.0
    max_hint: float = 300.0


class DeliveryGivenUp(ChannelError):
    """A piece was retried until the conversation's retry budget was spent, and given up.

    ``last`` is the last failure; ``maybe_delivered`` is copied from it.
    """

    def __init__(self, what: str, last: ChannelError, *, seconds: float) -> None:
        super().__init__(
            f"gave up {what} after {seconds:.0f}s of failures: {last}",
            maybe_delivered=last.maybe_delivered,
        )
        self.last = last


@dataclass(slots=True)
class _Outage:
    """One conversation's failing spell: when it began and how far its backoff went."""

    since: float
    backoff: Backoff
    reported: bool = False


class Retrier:
    """See the module docstring. ``clock`` and ``sleep`` are replaceable in tests."""

    def __init__(
        self,
        settings: RetrySettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings or RetrySettings()
        self._clock = clock
        self._sleep = sleep
        self._outages: dict[Hashable, _Outage] = {}
        self._waking: dict[Hashable, asyncio.Event] = {}
        """For each group (a channel), what its backoff waits end early on (``wake``)."""

    def failing(self, key: Hashable) -> bool:
        """Whether calls for ``key`` are failing (an outage has begun and not ended)."""
        return key in self._outages

    async def call(
        self,
        key: Hashable,
        what: str,
        attempt: Callable[[], Awaitable[_T]],
        *,
        settings: RetrySettings | None = None,
        on_retry: Callable[[], None] | None = None,
        group: Hashable | None = None,
    ) -> _T:
        """``attempt()``, tried again while it fails retryably and ``key``'s budget lasts.

        Raises a non-retryable error as it came, and ``DeliveryGivenUp`` once the budget is
        spent. ``settings`` overrides this retrier's own (a channel's budget, say);
        ``on_retry`` is called for each failed attempt that is tried again (for metrics);
        ``group`` (the channel) is what ``wake`` names to end its backoff waits early.
        """
        chosen = settings or self.settings
        while True:
            try:
                result = await attempt()
            except ChannelError as exc:
                if not exc.retryable:
                    raise
                outage = self._outages.get(key)
                now = self._clock()
                if outage is None:
                    outage = self._outages[key] = _Outage(
                        now, Backoff(chosen.first, factor=2.0, cap=chosen.cap)
                    )
                spent = now - outage.since
                left = chosen.budget - spent
                if left <= 0:
                    raise DeliveryGivenUp(what, exc, seconds=spent) from exc
                hinted = exc.retry_after
                if hinted is not None:
                    hinted = min(hinted, chosen.max_hint)
                wait = retry_wait(outage.backoff, hinted, max_wait=left)
                log.warning(
                    "%s failed (%s)%s; retry %d in %.1fs",
                    what,
                    exc,
                    "; it may have landed and show twice" if exc.maybe_delivered else "",
                    outage.backoff.failures,
                    wait,
                )
                if on_retry is not None:
                    on_retry()
                if group is None or hinted is not None:  # the platform's own wait is kept
                    await self._sleep(wait)
                else:
                    await self._backoff(wait, group)
                continue
            if self._outages.pop(key, None) is not None:
                log.info("%s went through; sending again", what)
            return result

    def wake(self, group: Hashable) -> None:
        """``group``'s platform answers again: its calls waiting out a backoff try now."""
        woken = self._waking.pop(group, None)
        if woken is not None:
            woken.set()

    async def _backoff(self, seconds: float, group: Hashable) -> None:
        """Wait ``seconds``, or until ``group`` is woken."""
        woken = self._waking.setdefault(group, asyncio.Event())
        sleeping = asyncio.ensure_future(self._sleep(seconds))
        waking = asyncio.ensure_future(woken.wait())
        try:
            await asyncio.wait({sleeping, waking}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waking.cancel()
            if not sleeping.done():
                sleeping.cancel()
                await asyncio.gather(sleeping, return_exceptions=True)
            await asyncio.gather(waking, return_exceptions=True)
        if not sleeping.cancelled():
            sleeping.result()  # what the sleep raised, raised here
            return
        log.info("%s is reachable again: retrying now", group)

    def first_give_up(self, key: Hashable) -> bool:
        """True once per outage of ``key``: the moment to tell the chat a reply was lost.

        Call ``unreport`` when telling failed, so the next give-up tries again.
        """
        outage = self._outages.get(key)
        if outage is None or outage.reported:
            return False
        outage.reported = True
        return True

    def unreport(self, key: Hashable) -> None:
        outage = self._outages.get(key)
        if outage is not None:
            outage.reported = False


__all__ = ["DEFAULT_RETRY_BUDGET", "DeliveryGivenUp", "Retrier", "RetrySettings"]
