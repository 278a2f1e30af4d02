"""Outages of what botd talks to: a chat platform, the model API.

The SDKs reconnect by themselves (python-telegram-bot's polling loop, slack_sdk's Socket Mode
client, discord.py's gateway loop) and botd's providers retry a failed model call: a peer that
stops answering is no reason to restart anything, but the operator must see it. A
``Reachability`` follows one peer from the reports of the code that talks to it: ``failed``
at every try that failed for a reason that is the peer's (no connection, a timeout, a 5xx,
an overload), ``answered`` when one went through. From the first failure with no success
since, the peer is failing; once that has lasted ``down_after`` seconds (or, with
``after_failures``, once that many tries in a row failed) it is *down*: ``outage()`` says
since when, how many tries failed and the last error, ``/healthz`` answers 503 and the log has
one WARNING line. The first success ends it (one INFO line). Failures shorter than that are
the SDK's passing retries, logged by it only.

``oldest_unanswered`` turns the inbox's oldest unanswered message into the ``/healthz``
problem of a stuck inbox.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .logging import mask_secrets

__all__ = ["MODEL_DOWN_AFTER_CALLS", "Outage", "Reachability", "span", "stuck_inbox"]

log = logging.getLogger(__name__)

MODEL_DOWN_AFTER_CALLS = 3
"""Model calls in a row that must fail (after the provider's own retries) before the model
API counts as down even when ``down_after`` has not passed yet."""


def span(seconds: float) -> str:
    """A duration as a person reads it: ``42 s``, ``12 min``, ``3 h``."""
    if seconds < 120:
        return f"{max(0, int(seconds))} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    return f"{int(seconds // 3600)} h"


@dataclass(frozen=True, slots=True)
class Outage:
    """A peer that has not answered since ``since`` (the clock's time of the first failure)."""

    seconds: float
    """How long it has been failing."""
    failures: int
    """Tries that failed since the last success."""
    error: str
    """The last failure, in one line, secrets masked."""

    def describe(self) -> str:
        """``down for 42 s (the last error)``: what ``/healthz`` shows after the peer's name."""
        return f"down for {span(self.seconds)} ({self.error})"

    def describe_calls(self) -> str:
        """``the last 3 calls failed, over 42 s (the last error)``: the same for a peer that
        is called now and then (the model API), where the count says more."""
        calls = "the last call" if self.failures == 1 else f"the last {self.failures} calls"
        return f"{calls} failed, over {span(self.seconds)} ({self.error})"


class Reachability:
    """Whether one peer answers, from its users' reports (see the module docstring).

    ``name`` is how the log and ``/healthz`` call it (``channel telegram``). Reports come from
    the event loop; the WARNING line of an outage that lasts (``channel telegram: down for
    30 s (…)``, for a peer counted in calls ``model:…: the last 3 calls failed, over 30 s (…)``)
    is logged once it counts, from a timer on the running loop (outside one: at the next
    report).
    """

    def __init__(
        self,
        name: str,
        *,
        down_after: float,
        after_failures: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.down_after = down_after
        self.after_failures = after_failures
        self._clock = clock
        self._since: float | None = None
        self._failures = 0
        self._error = ""
        self._announced = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def failing(self) -> bool:
        """Whether the last try failed (down or not yet)."""
        return self._since is not None

    def failed(self, error: str) -> None:
        """A try failed for a reason that is the peer's: ``error`` in a few words."""
        # "httpx.ReadError: " (an exception without a message) reads better without its colon
        self._error = mask_secrets(" ".join(error.split()).rstrip(":")) or "no answer"
        self._failures += 1
        if self._since is None:
            self._since = self._clock()
            self._start_timer()
        self._announce()

    def answered(self) -> None:
        """A try went through: whatever failed before is over."""
        since = self._since
        if since is None:
            return
        if self._announced:
            log.info("%s is back after %s", self.name, span(self._clock() - since))
        self.reset()

    def reset(self) -> None:
        """Forget the failures (the peer's connection is being replaced)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._since = None
        self._failures = 0
        self._error = ""
        self._announced = False

    def outage(self) -> Outage | None:
        """The outage under way, once it counts (``down_after`` or ``after_failures``)."""
        since = self._since
        if since is None:
            return None
        seconds = self._clock() - since
        if seconds < self.down_after and (
            self.after_failures is None or self._failures < self.after_failures
        ):
            return None
        return Outage(seconds, self._failures, self._error)

    def _start_timer(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        # In a context of its own: the line is about the peer, not the run that met it first.
        self._timer = loop.call_later(
            max(0.0, self.down_after), self._announce, context=contextvars.Context()
        )

    def _announce(self) -> None:
        if self._announced:
            return
        outage = self.outage()
        if outage is None:
            return
        self._announced = True
        said = outage.describe() if self.after_failures is None else outage.describe_calls()
        log.warning("%s: %s", self.name, said)


def stuck_inbox(oldest_age: float | None, waiting: int, stuck_after: float) -> str | None:
    """The ``/healthz`` problem of an inbox whose oldest unanswered message has waited
    ``oldest_age`` seconds, longer than ``stuck_after``; None when it has not (or there is
    none)."""
    if oldest_age is None or oldest_age <= stuck_after:
        return None
    return (
        f"the oldest unanswered message was accepted {span(oldest_age)} ago "
        f"({waiting} unanswered; health.stuck_after is {span(stuck_after)})"
    )
