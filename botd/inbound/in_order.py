"""One conversation's inbound messages taken one at a time, in the order they came.

An adapter may hand messages on concurrently (discord.py and slack-bolt run each event as a
task of its own). Taking a prompt reads the conversation's kept context and then writes the
inbox; on PostgreSQL those round trips take varying times, so two messages of one chat could
reach the inbox in the opposite order, or both claim the same kept lines. ``InOrder`` lets one
message of a conversation through at a time, first come first served (``asyncio.Lock`` wakes
its waiters in order); other conversations do not wait. A key's lock is dropped once nobody
holds or waits for it, so the memory is the conversations in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["InOrder"]


class InOrder:
    """Per-key FIFO turns (see the module docstring)."""

    def __init__(self) -> None:
        self._turns: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def __len__(self) -> int:
        """How many keys have a message in flight."""
        return len(self._turns)

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """Hold ``key``'s turn: entered after every earlier holder of it has left."""
        lock, users = self._turns.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._turns[key]
