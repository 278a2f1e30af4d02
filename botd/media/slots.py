"""Slots shared fairly between conversations: ``FairSlots``.

A reading worker (``sandbox``) may take its whole budget, 30 s by default. Were the slots
first come, first served, one conversation that sent six PDFs would hold every slot for
minutes and every other conversation's files would wait behind them. ``FairSlots`` therefore

* lets one owner (a conversation) hold at most ``per_owner`` slots at once, by default all
  but one: however many files one conversation queues, a slot is left for the others, so
  that they never wait behind its readings (only behind a third conversation's);
* hands a freed slot to the waiting owners in turn (round robin: the owner served longest
  ago first, each owner's own waiters in the order they came), so that six conversations
  with queued files share the slots evenly instead of in the order the files came.

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
        # Owners with waiters, in the order they are served next (a dict keeps its order).
        self._turns: dict[str, deque[asyncio.Future[None]]] = {}

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
        return sum(len(waiters) for waiters in self._turns.values())

    async def _acquire(self, owner: str) -> None:
        if self._free and self._held[owner] < self.per_owner and not self._turns:
            self._take(owner)
            return
        waiter = asyncio.get_running_loop().create_future()
        self._turns.setdefault(owner, deque()).append(waiter)
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

    def _release(self, owner: str) -> None:
        self._free += 1
        self._held[owner] -= 1
        if not self._held[owner]:
            del self._held[owner]
        self._grant()

    def _forget(self, owner: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._turns.get(owner)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._turns[owner]
        self._grant()  # a waiter gone may leave a slot another owner can take

    def _grant(self) -> None:
        """Hands free slots to waiting owners, in turn, as far as their caps allow."""
        granted = True
        while self._free and granted:
            granted = False
            for owner in list(self._turns):
                if not self._free:
                    break
                if self._held[owner] >= self.per_owner:
                    continue
                waiters = self._turns.pop(owner)
                while waiters and waiters[0].done():  # cancelled, its task not yet resumed
                    waiters.popleft()
                if not waiters:
                    continue
                waiter = waiters.popleft()
                if waiters:
                    self._turns[owner] = waiters  # to the back of the turns
                self._take(owner)
                waiter.set_result(None)
                granted = True


__all__ = ["FairSlots"]
