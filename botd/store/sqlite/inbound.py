"""The inbound ledger (platform message ids already handled) and per-channel offsets.

The router is the ledger's only writer: it records all of a message's dedupe keys in one
transaction before anything else happens to the message. Ids older than the retention
are forgotten by ``prune_inbound``, which ``botd.store.pruner`` calls daily.
"""

from __future__ import annotations

import logging
import sqlite3

from ..records import DEFAULT_INBOUND_RETENTION_SECONDS
from .deferred import DeferredWrites

log = logging.getLogger(__name__)


class InboundStore(DeferredWrites):
    """Inbound dedupe ids and the channels' saved positions."""

    # --- inbound dedupe -----------------------------------------------------------------------

    async def seen_inbound(self, channel: str, *keys: str) -> bool:
        """Record a message's ids in one transaction; True if any was recorded before.

        A message may have several ids (Slack's event id and ``channel:ts``): a repeat under
        any of them is a repeat, and every id is recorded so each later form is caught too.
        """
        unique = list(dict.fromkeys(keys))
        if not unique:
            raise ValueError("seen_inbound needs at least one key")
        now = self._clock()

        def write(conn: sqlite3.Connection) -> bool:
            inserted = 0
            for key in unique:
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO inbound_seen (channel, message_id, seen_at) "
                    "VALUES (?, ?, ?)",
                    (channel, key, now),
                )
                inserted += cursor.rowcount
            return inserted < len(unique)

        return await self._commit("seen_inbound", write)

    async def prune_inbound(
        self, older_than_seconds: float = DEFAULT_INBOUND_RETENTION_SECONDS
    ) -> int:
        """Forget inbound ids first seen more than ``older_than_seconds`` ago; returns how many."""
        with self._transaction("prune_inbound") as conn:
            cursor = conn.execute(
                "DELETE FROM inbound_seen WHERE seen_at < ?",
                (self._clock() - older_than_seconds,),
            )
            return cursor.rowcount

    # --- per-channel offsets ------------------------------------------------------------------

    async def get_offset(self, channel: str, account: str) -> str | None:
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

    def set_offset_soon(self, channel: str, account: str, value: str) -> None:
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

        self._defer("set_offset_soon", write, lazy=True)
