"""Forgetting what is kept no longer than needed: the inbound ledger's old ids, finished inbox
rows and outbox pieces, old kept chatter.

Ids are worth keeping only as long as a platform may deliver a message again (Slack retries
for minutes, Telegram and Discord replay at most what the last hours left unconfirmed), so
``InboundPruner`` forgets ids older than a retention of at least a week, once at start and
then daily. It works on any store that implements ``protocols.Pruning``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .protocols import Pruning
from .records import DEFAULT_INBOUND_RETENTION_SECONDS

log = logging.getLogger(__name__)

PRUNE_INTERVAL_SECONDS = 24 * 3600.0


class InboundPruner:
    """A background task that prunes the inbound ledger, the finished inbox rows, the sent
    outbox pieces and old kept chatter at start and then every ``interval``.

    Owned by the daemon: ``start`` inside the running loop, ``stop`` cancels the task and
    waits for it. A failed prune is logged and tried again at the next interval.
    """

    def __init__(
        self,
        store: Pruning,
        *,
        retention: float = DEFAULT_INBOUND_RETENTION_SECONDS,
        interval: float = PRUNE_INTERVAL_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if retention < DEFAULT_INBOUND_RETENTION_SECONDS:
            raise ValueError(
                f"inbound ids must be kept at least {DEFAULT_INBOUND_RETENTION_SECONDS:g}s, "
                f"got {retention:g}s"
            )
        self._store = store
        self._retention = retention
        self._interval = interval
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the inbound pruner is already running")
        self._task = asyncio.create_task(self._run(), name="inbound-pruner")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                pruned = await self._store.prune_inbound(self._retention)
                pruned += await self._store.prune_finished(self._retention)
                pruned += await self._store.prune_chatter()  # by its own retention
            except Exception:
                log.exception("pruning the inbound ledger failed")
            else:
                log.debug("inbound ledger: %d old id(s) pruned", pruned)
            await self._sleep(self._interval)


__all__ = ["PRUNE_INTERVAL_SECONDS", "InboundPruner"]
