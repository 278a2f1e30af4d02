"""A platform's rate shared by the nodes: slots handed out one after another, ``spacing`` apart.

A bot's platform budget (Telegram's 30 requests a second per token) is one for the whole
cluster: the nodes draw their requests' slots from one schedule, a ``SharedRate``. A rate is
a *next free time* per name (the name says the platform and the bot's id, never its token):
reserving ``count`` slots moves it on by ``count * spacing`` from itself or from ``now -
tolerance``, whichever is later, and answers how long until the first of them (negative: it
was free that long ago, so several may go at once: a rate left idle lets a burst of
``tolerance / spacing + 1`` go without waiting). The reserving node sends
its requests at that time and ``spacing`` apart after it. Every slot of every node is so at
least ``spacing`` from every other, whatever the number of nodes, with no share to hand out
again when a node comes or goes; a slot its node did not use is simply lost.

This is the generic cell rate algorithm's virtual scheduling: within any window of ``w``
seconds at most ``(w + tolerance) / spacing + 1`` slots start. What sits between a slot and
the platform (the event loop's lag, the network) moves requests by a little; the caller
leaves a margin for it in ``spacing`` (``botd.channels.budget``).

``LocalRate`` keeps the schedule in memory (a node alone); on several nodes the store keeps
it (``botd.store.postgres.budget``: one row per name, moved on in one statement by the
server's clock). Nothing here waits on another node: a reservation is one statement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["LocalRate", "SharedRate"]


class SharedRate(Protocol):
    """Where the slots of a rate are reserved (see the module docstring)."""

    async def reserve(self, name: str, count: int, spacing: float, tolerance: float) -> float:
        """Reserve ``count`` slots ``spacing`` seconds apart on the rate ``name``; the seconds
        from now until the first (down to ``-tolerance``: a burst may go at once)."""
        ...


class LocalRate:
    """``SharedRate`` in this process's memory, by ``clock`` (monotonic seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next: dict[str, float] = {}

    async def reserve(self, name: str, count: int, spacing: float, tolerance: float) -> float:
        now = self._clock()
        first = max(now - tolerance, self._next.get(name, now - tolerance))
        self._next[name] = first + count * spacing
        return first - now
