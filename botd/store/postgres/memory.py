"""What botd keeps in memory for a person or a group on PostgreSQL (``MemoryLedger``), as
the SQLite store means it (``botd/store/sqlite/memory.py``). A memory is a person's or a
group's, not a conversation's run: its writes take no lease fence. The count check and the
insert run under an advisory lock named after the memory's owner, so two nodes writing to
one memory at once cannot both take its last place."""

from __future__ import annotations

from ..records import MemoryItem, MemoryOwner
from .base import Conn, PostgresBase


def _lock(owner: MemoryOwner) -> str:
    # A space never occurs in a conversation key, the other locks' names.
    return f"memory {owner.channel} {owner.kind} {owner.id}"


class MemoryStore(PostgresBase):
    """The ``memories`` table (see the module docstring)."""

    async def remember(
        self, owner: MemoryOwner, author: str, text: str, *, max_items: int
    ) -> MemoryItem | None:
        now = self._clock()
        whose = (owner.channel, owner.kind, owner.id)
        params = (*whose, author, text, now, *whose, max_items)

        async def write(conn: Conn) -> MemoryItem | None:
            cur = await conn.execute(
                "INSERT INTO memories (channel, kind, owner, author, text, created_at) "
                "SELECT %s, %s, %s, %s, %s, %s WHERE (SELECT count(*) FROM memories "
                "WHERE channel = %s AND kind = %s AND owner = %s) < %s RETURNING id",
                params,
            )
            row = await cur.fetchone()
            return None if row is None else MemoryItem(int(row[0]), text, author, now)

        return await self._commit("remember", write, locks=(_lock(owner),))

    async def memories(self, owner: MemoryOwner) -> list[MemoryItem]:
        async def read(conn: Conn) -> list[MemoryItem]:
            cur = await conn.execute(
                "SELECT id, text, author, created_at FROM memories "
                "WHERE channel = %s AND kind = %s AND owner = %s ORDER BY id",
                (owner.channel, owner.kind, owner.id),
            )
            rows = await cur.fetchall()
            return [MemoryItem(int(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in rows]

        # Its writes are awaited, so nothing of it waits in the group commit: a turn's note
        # does not wait for the batch of other conversations' records.
        return await self._read(read, after_queued=False)

    async def forget_memory(self, owner: MemoryOwner, memory_id: int) -> bool:
        params = (owner.channel, owner.kind, owner.id, memory_id)

        async def write(conn: Conn) -> bool:
            cur = await conn.execute(
                "DELETE FROM memories WHERE channel = %s AND kind = %s AND owner = %s AND id = %s",
                params,
            )
            return cur.rowcount > 0

        return await self._commit("forget_memory", write)


__all__ = ["MemoryStore"]
