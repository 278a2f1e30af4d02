"""The inbound ledger (platform message ids already handled) and per-channel offsets.

The router is the ledger's only writer: it records all of a message's dedupe keys in one
transaction before anything else happens to the message. Ids are worth keeping only as long as
a platform may deliver a message again (Slack retries for minutes, Telegram and Discord replay
at most what the last hours left unconfirmed), so ``InboundPruner`` forgets ids older than a
retention of at least a week, once at start and then daily.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Protocol

from .deferred import DeferredWrites

log = logging.getLogger(__name__)

DEFAULT_INBOUND_RETENTION_SECONDS = 7 * 24 * 3600.0
"""How long inbound ids are kept: far beyond any platform's redelivery window."""
PRUNE_INTERVAL_SECONDS = 24 * 3600.0


class InboundStore(DeferredWrites):
    """Inbound dedupe ids and the channels' saved positions."""

    # --- inbound dedupe -----------------------------------------------------------------------

    def seen_inbound(self, channel: str, *keys: str) -> bool:
        """Record a message's ids in one transaction; True if any was recorded before.

        A message may have several ids (Slack's event id and ``channel:ts``): a repeat under
        any of them is a repeat, and every id is recorded so each later form is caught too.
        """
        unique = list(dict.fromkeys(keys))
        if not unique:
            raise ValueError("seen_inbound needs at least one key")
        now = self._clock()
        inserted = 0
        with self._transaction("seen_inbound") as conn:
            for key in unique:
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO inbound_seen (channel, message_id, seen_at) "
                    "VALUES (?, ?, ?)",
                    (channel, key, now),
                )
                inserted += cursor.rowcount
        return inserted < len(unique)

    def prune_inbound(self, older_than_seconds: float = DEFAULT_INBOUND_RETENTION_SECONDS) -> int:
        """Forget inbound ids first seen more than ``older_than_seconds`` ago; returns how many."""
        with self._transaction("prune_inbound") as conn:
            cursor = conn.execute(
                "DELETE FROM inbound_seen WHERE seen_at < ?",
                (self._clock() - older_than_seconds,),
            )
            return cursor.rowcount

    # --- per-channel offsets ------------------------------------------------------------------

    def get_offset(self, channel: str, account: str) -> str | None:
        """A channel account's saved position (Telegram's update offset, say), if any."""
        self.flush_deferred()
        row = (
            self._connection()
            .execute(
                "SELECT value FROM offsets WHERE channel = ? AND account = ?", (channel, account)
            )
            .fetchone()
        )
        return None if row is None else str(row[0])

    def set_offset(self, channel: str, account: str, value: str) -> None:
        """Save a channel account's position, lazily, with a later group commit (``deferred``).

        A record of what already happened: the messages before it were accepted (committed)
        already, and one lost in a crash only has the platform send some of them again, which
        the inbound ledger catches as repeats."""
        params = (channel, account, value, self._clock())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO offsets (channel, account, value, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (channel, account) DO UPDATE "
                "SET value = excluded.value, updated_at = excluded.updated_at",
                params,
            )

        self._defer("set_offset", write, lazy=True)


class Prunable(Protocol):
    """What the pruner needs of the store: the ledger, the finished inbox and outbox, and the
    kept chatter."""

    def prune_inbound(self, older_than_seconds: float = ...) -> int: ...

    def prune_finished(self, older_than_seconds: float) -> int: ...

    def prune_chatter(self) -> int: ...


class InboundPruner:
    """A background task that prunes the inbound ledger, the finished inbox rows, the sent
    outbox pieces and old kept chatter at start and then every ``interval``.

    Owned by the daemon: ``start`` inside the running loop, ``stop`` cancels the task and
    waits for it. A failed prune is logged and tried again at the next interval.
    """

    def __init__(
        self,
        store: Prunable,
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
                pruned = self._store.prune_inbound(self._retention)
                pruned += self._store.prune_finished(self._retention)
                pruned += self._store.prune_chatter()  # by its own retention
            except Exception:
                log.exception("pruning the inbound ledger failed")
            else:
                log.debug("inbound ledger: %d old id(s) pruned", pruned)
            await self._sleep(self._interval)
