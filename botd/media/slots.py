"""Slots shared fairly between conversations: ``FairSlots``.

A reading worker (``sandbox``) may take its whole budget, 30 s by default. Were the slots
first come, first served, one conversation that sent six PDFs would hold every slot for
minutes and every other conversation's files would wait behind them. ``FairSlots`` therefore

* lets one owner (a conversation) hold at most ``per_owner`` slots at once, by default all
  but one: however many files one conversation queues, a slot is left for the others, so
  that they never wait behind its readings (only behind a third conversation's);
* hands a freed slot to the waiting owner served longest ago (one not served since it began
  to read goes first; each owner's own waiters in the order they came): six conversations
  with queued files take turns instead of going in the order the files came, and a seventh
  that sends one file is served at the next freed slot, not behind their queues.

A slot is not work-conserving for one owner alone: a conversation by itself reads at most
``per_owner`` files at once even when the other slots are idle. That is the price of the
promise above, since a running reading cannot be taken back.

Everything happens on the event loop: no locks, no threads.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class FairSlots:
    """At most ``slots`` holders at once, at most ``per_owner`` of them one owner's, waiting
    owners served in turn (see the module)."""

    def __init__(self, slots: int, per_owner: int | None = None) -> None:
        if slots < 1:
            raise ValueError("at least one slot")
        self.slots = slots
        self.per_owner = max(1, slots - 1) if per_owner is None else min(per_owner, slots)
        self._free = slots
        self._held: Counter[str] = Counter()
        self._waiters: dict[str, deque[asyncio.Future[None]]] = {}
        """Each owner's waiters in the order they came; owners in the order they began to
        wait (a dict keeps its order)."""
        self._grants = 0
        self._served: dict[str, int] = {}
        """When each busy owner (holding or waiting) was last given a slot, as a count of
        grants; an owner that has not been since it became busy has no entry."""

    @asynccontextmanager
    async def slot(self, owner: str) -> AsyncIterator[None]:
        """Holds a slot for ``owner`` while the block runs (waiting for one first)."""
        await self._acquire(owner)
        try:
            yield
        finally:
            self._release(owner)

    def held(self, owner: str) -> int:
        """How many slots ``owner`` holds now."""
        return self._held[owner]

    def waiting(self) -> int:
        """How many are waiting for a slot."""
        return sum(len(waiters) for waiters in self._waiters.values())

    async def _acquire(self, owner: str) -> None:
        if self._free and self._held[owner] < self.per_owner and not self._waiters:
            self._take(owner)
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(owner, deque()).append(waiter)
        self._grant()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted, but no longer wanted
                self._release(owner)
            else:
                self._forget(owner, waiter)
            raise

    def _take(self, owner: str) -> None:
        self._free -= 1
        self._held[owner] += 1
        self._grants += 1
        self._served[owner] = self._grants

    def _release(self, owner: str) -> None:
        self._free += 1
        self._held[owner] -= 1
        if not self._held[owner]:
            del self._held[owner]
        self._tidy(owner)
        self._grant()

    def _forget(self, owner: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(owner)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._waiters[owner]
        self._tidy(owner)
        self._grant()  # a waiter gone may leave a slot another owner can take

    def _tidy(self, owner: str) -> None:
        """Forgets when an owner that is no longer busy was served: it starts afresh."""
        if not self._held[owner] and owner not in self._waiters:
            self._served.pop(owner, None)

    def _grant(self) -> None:
        """Hands free slots to waiting owners as far as their caps allow, each time to the
        one served longest ago (one not served yet first, in the order they began to
        wait)."""
        for owner, waiters in list(self._waiters.items()):
            while waiters and waiters[0].done():  # cancelled, its task not yet resumed
                waiters.popleft()
            if not waiters:
                del self._waiters[owner]
        while self._free:
            ready = [owner for owner in self._waiters if self._held[owner] < self.per_owner]
            if not ready:
                return
            owner = min(ready, key=lambda name: self._served.get(name, 0))
            waiters = self._waiters[owner]
            waiter = waiters.popleft()
            if not waiters:
                del self._waiters[owner]
            self._take(owner)
            waiter.set_result(None)


__all__ = ["FairSlots"]
