"""Forgetting what is kept no longer than needed: the inbound ledger's old ids, finished inbox
rows and outbox pieces, old kept chatter, and, with ``retention`` set, old transcripts,
memories and event recordings.

Ids are worth keeping only as long as a platform may deliver a message again (Slack retries
for minutes, Telegram and Discord replay at most what the last hours left unconfirmed), so
``InboundPruner`` forgets ids older than a retention of at least a week, once at start and
then daily. It works on any store that implements ``protocols.Pruning``.

``retention`` (days, read live from the config: ``kept_for``) bounds what holds people's
words: transcript turns and memories older than it (``Pruning.prune_kept``), the event
recordings in the state dir's ``events/`` last written before it, and, when it is shorter
than their own week, finished inbox rows and outbox pieces and kept chatter. Unset, they are
kept as before (transcripts and memories for ever). The ids of the inbound ledger keep
their week whatever it says: they hold no words, and a shorter week would let a
redelivered message in twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from .protocols import Pruning
from .records import CHATTER_RETENTION_SECONDS, DEFAULT_INBOUND_RETENTION_SECONDS

log = logging.getLogger(__name__)

PRUNE_INTERVAL_SECONDS = 24 * 3600.0


class InboundPruner:
    """A background task that prunes the inbound ledger, the finished inbox rows, the sent
    outbox pieces and old kept chatter at start and then every ``interval``; with
    ``kept_for()`` days, what ``retention`` bounds too (see the module docstring), the
    recordings in ``recordings``.

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
        kept_for: Callable[[], float | None] = lambda: None,
        recordings: Path | None = None,
        clock: Callable[[], float] = time.time,
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
        self._kept_for = kept_for
        self._recordings = recordings
        self._clock = clock
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

    async def prune(self) -> int:
        """Prune once (what ``start`` does daily); how many rows and files went."""
        days = self._kept_for()
        kept = None if days is None else days * 86400.0
        pruned = await self._store.prune_inbound(self._retention)
        pruned += await self._store.prune_finished(_shorter(self._retention, kept))
        pruned += await self._store.prune_chatter(_shorter(CHATTER_RETENTION_SECONDS, kept))
        if kept is not None:
            pruned += await self._store.prune_kept(kept)
            if self._recordings is not None:
                pruned += prune_recordings(self._recordings, self._clock() - kept)
        return pruned

    async def _run(self) -> None:
        while True:
            try:
                pruned = await self.prune()
            except Exception:
                log.exception("pruning the inbound ledger failed")
            else:
                log.debug("inbound ledger: %d old id(s) pruned", pruned)
            await self._sleep(self._interval)


def _shorter(own: float, kept: float | None) -> float:
    return own if kept is None else min(own, kept)


def prune_recordings(directory: Path, cut: float) -> int:
    """Remove the event recordings (``*.jsonl``) in ``directory`` last written before
    ``cut``; how many."""
    removed = 0
    if not directory.is_dir():
        return 0
    for path in directory.glob("*.jsonl"):
        with contextlib.suppress(FileNotFoundError):
            if path.is_file() and not path.is_symlink() and path.stat().st_mtime < cut:
                path.unlink()
                removed += 1
    return removed


__all__ = ["PRUNE_INTERVAL_SECONDS", "InboundPruner", "prune_recordings"]
