"""``PostgresRate``: the nodes' shared platform rates (``botd.cluster.budget``) in the store.

One row of ``budgets`` per rate (named by platform and bot id, never a token) holds the time
its next slot is free, in seconds of the server's ``clock_timestamp()``, so every node counts
by one clock. A reservation is one upsert that moves it on and answers how long until the
first slot reserved: no transaction is held and no node waits on another beyond that
statement's row lock. A reservation that cannot get a connection within ``CONNECT_WAIT``
fails, and the budget paces the node alone until the store answers again.
"""

from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

__all__ = ["CONNECT_WAIT", "PostgresRate"]

CONNECT_WAIT = 2.0
"""Seconds a reservation waits for a connection of the pool."""


class PostgresRate:
    """``SharedRate`` on a PostgreSQL pool."""

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[TupleRow]]) -> None:
        self._pool = pool

    async def reserve(self, name: str, count: int, spacing: float, tolerance: float) -> float:
        span = count * spacing
        async with self._pool.connection(timeout=CONNECT_WAIT) as conn:
            cur = await conn.execute(
                """
                INSERT INTO budgets AS b (name, next_at)
                VALUES (%(name)s, extract(epoch FROM clock_timestamp()) - %(tol)s + %(span)s)
                ON CONFLICT (name) DO UPDATE
                   SET next_at = greatest(
                           b.next_at, extract(epoch FROM clock_timestamp()) - %(tol)s
                       ) + %(span)s
                RETURNING next_at - %(span)s - extract(epoch FROM clock_timestamp())
                """,
                {"name": name, "span": span, "tol": tolerance},
            )
            row = await cur.fetchone()
        return 0.0 if row is None else max(-tolerance, float(row[0]))
