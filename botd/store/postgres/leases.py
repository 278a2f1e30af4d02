"""The lease table on PostgreSQL (``botd.cluster.leases`` says what a lease is).

Expiries are the server's ``clock_timestamp()`` (not ``now()``, which is the transaction's
start), so every node measures a lease by the same clock. A claim is one upsert whose update
applies only to an expired row; a concurrent claim of the same name waits on the row lock and
re-checks the condition against the winner's row, so only one of them gets the next epoch.
``fence`` is what a fenced write runs first inside its own transaction: it takes a key-share
lock on the lease row, and a claim or a release locks the row ``FOR UPDATE`` first, so no
claim can move the epoch on until that transaction ends; a renewal, which moves only the
expiry, is not held up by it.

Renewals run on a connection of their own (``renewals``: the store gives the table a pool of
one that nothing else uses), so they never queue behind writes, reads or claims; claims,
releases and listings share a small pool of the table's own. A claim of a lease whose row
another node's transaction holds (a fenced batch of a node frozen mid-transaction) waits at
most the session's ``lock_timeout`` and counts as not claimed: it is tried again later, by
which time the server has ended the frozen transaction (``session``). Each call must be
answered within a third of the TTL (``answer_within``), so a renewal that met a silent
server has failed, its connection cut, by the time the next one is due.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from ...cluster.leases import CONVERSATION_LEASE, LeaseLost, LeaseRow
from .session import DEFAULT_LEASE_TTL, SessionBounds, answer_within

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]


class PostgresLeases:
    """``LeaseTable`` on PostgreSQL: ``pool`` for claims, releases and listings, ``renewals``
    (default: the same pool) for renewals (see the module docstring)."""

    def __init__(
        self, pool: Pool, *, renewals: Pool | None = None, bounds: SessionBounds | None = None
    ) -> None:
        self._pool = pool
        self._renewals = renewals or pool
        self._within = (bounds or SessionBounds(DEFAULT_LEASE_TTL)).lease_ttl / 3
        """Seconds a call may go unanswered: less than the third of the TTL between two
        renewals, so one that met a silent server has failed before the next is due."""

    @contextlib.asynccontextmanager
    async def _connection(self, pool: Pool) -> AsyncIterator[AsyncConnection[TupleRow]]:
        async with pool.connection(timeout=self._within) as conn, answer_within(conn, self._within):
            yield conn

    async def claim(self, name: str, holder: str, ttl: float) -> int | None:
        try:
            return await self._claim(name, holder, ttl)
        except psycopg.errors.LockNotAvailable:
            return None  # another node's transaction holds the row: not claimable now

    async def _claim(self, name: str, holder: str, ttl: float) -> int | None:
        async with self._connection(self._pool) as conn, conn.transaction():
            await _lock_for_change(conn, name)
            cur = await conn.execute(
                """
                INSERT INTO leases (name, holder, epoch, expires_at)
                VALUES (%s, %s, 1, clock_timestamp() + make_interval(secs => %s))
                ON CONFLICT (name) DO UPDATE
                   SET holder = excluded.holder, epoch = leases.epoch + 1,
                       expires_at = excluded.expires_at
                 WHERE leases.expires_at <= clock_timestamp()
                RETURNING epoch
                """,
                (name, holder, ttl),
            )
            row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def renew(self, holder: str, held: Mapping[str, int], ttl: float) -> set[str]:
        if not held:
            return set()
        async with self._connection(self._renewals) as conn:
            cur = await conn.execute(
                """
                UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => %s)
                  FROM unnest(%s::text[], %s::bigint[]) AS mine(name, epoch)
                 WHERE leases.name = mine.name AND leases.epoch = mine.epoch
                   AND leases.holder = %s AND leases.expires_at > clock_timestamp()
                RETURNING leases.name
                """,
                (ttl, list(held), list(held.values()), holder),
            )
            return {str(row[0]) for row in await cur.fetchall()}

    async def expire(self, name: str, holder: str, epoch: int) -> None:
        async with self._connection(self._pool) as conn, conn.transaction():
            await _lock_for_change(conn, name)
            await conn.execute(
                "UPDATE leases SET expires_at = clock_timestamp()"
                " WHERE name = %s AND holder = %s AND epoch = %s",
                (name, holder, epoch),
            )

    async def rows(self) -> list[LeaseRow]:
        return await self._select("")

    async def standing(self) -> list[LeaseRow]:
        return await self._select(
            " WHERE expires_at > clock_timestamp() OR left(name, %s) <> %s",
            (len(CONVERSATION_LEASE), CONVERSATION_LEASE),
        )

    async def holder(self, name: str) -> str | None:
        async with self._connection(self._pool) as conn:
            cur = await conn.execute(
                "SELECT holder FROM leases WHERE name = %s AND expires_at > clock_timestamp()",
                (name,),
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def _select(self, where: str, params: tuple[object, ...] = ()) -> list[LeaseRow]:
        async with self._connection(self._pool) as conn:
            cur = await conn.execute(
                "SELECT name, holder, epoch,"
                " extract(epoch FROM expires_at - clock_timestamp())::float8"
                f" FROM leases{where} ORDER BY name",
                params,
            )
            return [
                LeaseRow(str(n), str(h), int(e), float(x)) for n, h, e, x in await cur.fetchall()
            ]


async def _lock_for_change(conn: AsyncConnection[TupleRow], name: str) -> None:
    """Inside a claim's or a release's transaction: lock ``name``'s row against every fence
    (``FOR UPDATE`` conflicts with the fences' ``FOR KEY SHARE``), waiting at most the
    session's ``lock_timeout``. A plain ``UPDATE`` of the row's other columns would not: it
    takes ``FOR NO KEY UPDATE``, which a fence lets through, and a renewal relies on that."""
    await conn.execute("SELECT 1 FROM leases WHERE name = %s FOR UPDATE", (name,))


async def fence(conn: AsyncConnection[TupleRow], name: str, holder: str, epoch: int) -> None:
    """Inside the caller's transaction: hold the lease row until it ends, or raise
    ``LeaseLost`` when ``holder`` no longer holds ``name`` at ``epoch`` unexpired. The row is
    held ``FOR KEY SHARE``: no claim or release may change its holder meanwhile (they lock it
    ``FOR UPDATE`` first), while the holder's own renewal, which only moves the expiry, never
    waits behind its writes."""
    cur = await conn.execute(
        "SELECT 1 FROM leases WHERE name = %s AND holder = %s AND epoch = %s"
        " AND expires_at > clock_timestamp() FOR KEY SHARE",
        (name, holder, epoch),
    )
    if await cur.fetchone() is None:
        raise LeaseLost(f"lease {name} (epoch {epoch}) is no longer held by {holder}")
