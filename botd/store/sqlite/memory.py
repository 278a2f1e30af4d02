"""What botd keeps in memory for a person or a group (``MemoryLedger``): one row per thing
kept, in ``memories``, keyed by whose memory it is (channel, kind, owner id) and by who had
it written (channel, author), so that a person's rows go in one statement (see the
protocol's docstring). The count check and the insert are one statement, so a full memory
takes nothing more."""

from __future__ import annotations

import sqlite3

from ..records import MemoryItem, MemoryOwner
from .deferred import DeferredWrites


class MemoryStore(DeferredWrites):
    """The ``memories`` table (see the module docstring)."""

    async def remember(
        self, owner: MemoryOwner, author: str, text: str, *, max_items: int
    ) -> MemoryItem | None:
        now = self._clock()
        whose = (owner.channel, owner.kind, owner.id)
        params = (*whose, author, text, now, *whose, max_items)

        def write(conn: sqlite3.Connection) -> MemoryItem | None:
            row = conn.execute(
                "INSERT INTO memories (channel, kind, owner, author, text, created_at) "
                "SELECT ?, ?, ?, ?, ?, ? WHERE (SELECT count(*) FROM memories "
                "WHERE channel = ? AND kind = ? AND owner = ?) < ? RETURNING id",
                params,
            ).fetchone()
            return None if row is None else MemoryItem(int(row[0]), text, author, now)

        return await self._commit("remember", write)

    async def memories(self, owner: MemoryOwner) -> list[MemoryItem]:
        rows = self._connection().execute(
            "SELECT id, text, author, created_at FROM memories "
            "WHERE channel = ? AND kind = ? AND owner = ? ORDER BY id",
            (owner.channel, owner.kind, owner.id),
        )
        return [MemoryItem(int(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in rows]

    async def forget_memory(self, owner: MemoryOwner, memory_id: int) -> bool:
        params = (owner.channel, owner.kind, owner.id, memory_id)

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM memories WHERE channel = ? AND kind = ? AND owner = ? AND id = ?",
                params,
            )
            return cur.rowcount > 0

        return await self._commit("forget_memory", write)


__all__ = ["MemoryStore"]
