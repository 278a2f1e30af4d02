"""``TaskOwner``: every background task of the conversations has an owner that awaits it.

The registry spawns each conversation's worker and each one-shot post through its owner;
``close`` cancels what is still running and awaits it all, so nothing outlives the registry
and no task is left unawaited (python-telegram-bot's ``Application`` does the same).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class TaskOwner:
    """The tasks spawned through it, until each has ended and been awaited."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def running(self) -> list[asyncio.Task[None]]:
        return [task for task in self._tasks if not task.done()]

    async def settle(self) -> None:
        """Wait until every task (those spawned meanwhile too) has ended."""
        while busy := self.running():
            await asyncio.gather(*busy, return_exceptions=True)

    async def close(self) -> None:
        """Cancel every task still running and await them all."""
        while busy := self.running():
            for task in busy:
                task.cancel()
            await asyncio.gather(*busy, return_exceptions=True)


__all__ = ["TaskOwner"]
