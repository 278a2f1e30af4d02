"""The lease table on PostgreSQL (``botd.cluster.leases`` says what a lease is).

Expiries are the server's ``clock_timestamp()`` (not ``now()``, which is the transaction's
start), so every node measures a lease by the same clock.

Every call is **one statement, on its own** (no transaction around it): the server runs it
to its end whatever becomes of the client, so no node frozen or cut off mid-call leaves a
lock on a lease row behind. The only lease-row lock a client holds across round trips is a
fence's, on a lease its node holds:

* ``fence`` is what a fenced write runs first inside its own transaction: it holds the row
  ``FOR KEY SHARE`` until the transaction ends.
* A **claim** locks the row ``FOR UPDATE`` only when it has expired (one that is held is
  neither locked nor changed), then moves holder and epoch on; ``FOR UPDATE`` waits for the
  fences, so no claim moves the epoch on while the old holder's fenced write is open. A
  concurrent claim of the same row waits for the winner and re-checks the expiry against
  its row, so only one of them gets the next epoch. A never-held name is inserted.
* A **renewal** moves only the expiry of the holder's own unexpired rows (``FOR NO KEY
  UPDATE``, which a fence lets through), and a **release** sets the holder's expiry to now.

So a renewal waits on nothing another node holds: not on a fence (only the holder fences
its rows), not on a claim (a claim locks only an expired row, which is no longer renewable).

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
from ..errors import StoreError
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
        """A connection of ``pool`` for one call, answered within its bound; the database
        unreachable (or the connection cut) is raised as a ``StoreError``, a fault of the
        store's, not of the caller's."""
        try:
            async with (
                pool.connection(timeout=self._within) as conn,
                answer_within(conn, self._within),
            ):
                yield conn
        except psycopg.errors.LockNotAvailable:
            raise
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise StoreError(f"the lease table: {' '.join(str(exc).split())}") from exc

    async def claim(self, name: str, holder: str, ttl: float) -> int | None:
        try:
            return await self._claim(name, holder, ttl)
        except psycopg.errors.LockNotAvailable:
            return None  # another node's transaction holds the row: not claimable now

    async def _claim(self, name: str, holder: str, ttl: float) -> int | None:
        # One statement (see the module docstring): ``free`` locks the row only if it has
        # expired (a held row fails the condition and is not locked), waiting for its fences;
        # ``taken`` moves it on; ``fresh`` inserts a name never held. Not an upsert: its
        # ``ON CONFLICT DO UPDATE`` would lock a held row too, even when its condition fails.
        async with self._connection(self._pool) as conn:
            cur = await conn.execute(
                """
                WITH free AS (
                    SELECT name FROM leases
                     WHERE name = %(name)s AND expires_at <= clock_timestamp()
                       FOR UPDATE
                ), taken AS (
                    UPDATE leases
                       SET holder = %(holder)s, epoch = leases.epoch + 1,
                           expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
                      FROM free
                     WHERE leases.name = free.name
                    RETURNING leases.epoch
                ), fresh AS (
                    INSERT INTO leases (name, holder, epoch, expires_at)
                    SELECT %(name)s, %(holder)s, 1,
                           clock_timestamp() + make_interval(secs => %(ttl)s)
                     WHERE NOT EXISTS (SELECT 1 FROM leases WHERE name = %(name)s)
                    ON CONFLICT (name) DO NOTHING
                    RETURNING epoch
                )
                SELECT epoch FROM taken UNION ALL SELECT epoch FROM fresh
                """,
                {"name": name, "holder": holder, "ttl": ttl},
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
        # No lock of its own is needed: the next claim locks the expired row FOR UPDATE,
        # which waits for this holder's fences.
        async with self._connection(self._pool) as conn:
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


async def fence(conn: AsyncConnection[TupleRow], name: str, holder: str, epoch: int) -> None:
    """Inside the caller's transaction: hold the lease row until it ends, or raise
    ``LeaseLost`` when ``holder`` no longer holds ``name`` at ``epoch`` unexpired. The row is
    held ``FOR KEY SHARE``: no claim may move its holder or epoch on meanwhile (it locks the
    expired row ``FOR UPDATE`` first), while the holder's own renewal, which only moves the
    expiry, never waits behind its writes."""
    cur = await conn.execute(
        "SELECT 1 FROM leases WHERE name = %s AND holder = %s AND epoch = %s"
        " AND expires_at > clock_timestamp() FOR KEY SHARE",
        (name, holder, epoch),
    )
    if await cur.fetchone() is None:
        raise LeaseLost(f"lease {name} (epoch {epoch}) is no longer held by {holder}")
