"""DM pairing in the PostgreSQL database, shared by every node and by ``botd pairing``.

The rules are ``botd.store.pairing``'s. Each change of one channel's codes runs in a
transaction under an advisory lock of that channel, so two nodes issuing codes at once keep
the per-channel limit. ``is_approved`` answers from a snapshot of the approved senders, taken
by ``refresh`` and kept current by this process's own approvals and revocations; the router
refreshes before it turns a DM sender away, so an approval made elsewhere counts at once.

The messages a waiting sender wrote are kept with the code (``held``); an approval moves them
to ``pairing_welcomes`` in the same transaction. ``welcomes`` hands each welcome to one node
for ``WELCOME_TAKEN_FOR`` seconds (``taken_until``): another node takes it only if the first
did not finish (``welcomed``) by then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from psycopg import AsyncConnection
from psycopg.errors import UniqueViolation
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..pairing import HELD_AT_MOST, MAX_PENDING_PER_CHANNEL, PAIRING_TTL_SECONDS, new_code
from ..records import PendingCode, Welcome

log = logging.getLogger(__name__)

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]

WELCOME_TAKEN_FOR = 60.0
"""Seconds a welcome handed to one node is not handed to another."""


class PostgresPairing:
    """``store.protocols.Pairing`` on a PostgreSQL pool (see the module docstring)."""

    def __init__(self, pool: Pool, *, clock: Callable[[], float] = time.time) -> None:
        self._pool = pool
        self._clock = clock
        self._approved: set[tuple[str, str]] = set()

    def is_approved(self, channel: str, sender: str) -> bool:
        return (channel, sender) in self._approved

    async def refresh(self) -> None:
        async with self._pool.connection() as conn:
            cur = await conn.execute("SELECT channel, sender FROM pairing_approved")
            self._approved = {(str(c), str(s)) for c, s in await cur.fetchall()}

    def _oldest_valid(self) -> float:
        return self._clock() - PAIRING_TTL_SECONDS

    async def issue(self, channel: str, sender: str, name: str | None = None) -> tuple[str, bool]:
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('pairing:' || %s, 0))", (channel,)
            )
            await conn.execute(
                "DELETE FROM pairing_codes WHERE issued_at < %s", (self._oldest_valid(),)
            )
            cur = await conn.execute(
                "SELECT code FROM pairing_codes WHERE channel = %s AND sender = %s",
                (channel, sender),
            )
            row = await cur.fetchone()
            if row is not None:
                return str(row[0]), False
            cur = await conn.execute(
                "SELECT code, sender FROM pairing_codes WHERE channel = %s"
                " ORDER BY issued_at, code",
                (channel,),
            )
            waiting = await cur.fetchall()
            for code, who in waiting[: max(0, len(waiting) - MAX_PENDING_PER_CHANNEL + 1)]:
                await conn.execute("DELETE FROM pairing_codes WHERE code = %s", (code,))
                log.warning(
                    "pairing: the code of %s on %s expired early: %d codes were waiting there",
                    who,
                    channel,
                    MAX_PENDING_PER_CHANNEL,
                )
            while True:
                code = new_code(())
                try:
                    async with conn.transaction():  # a savepoint: a taken code is drawn again
                        await conn.execute(
                            "INSERT INTO pairing_codes (code, channel, sender, name, issued_at)"
                            " VALUES (%s, %s, %s, %s, %s)",
                            (code, channel, sender, name or None, self._clock()),
                        )
                except UniqueViolation:
                    continue
                return code, True

    async def approve(self, channel: str, code: str) -> str | None:
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "DELETE FROM pairing_codes WHERE code = %s AND channel = %s AND issued_at >= %s"
                " RETURNING sender, name, held",
                (code.strip().upper(), channel, self._oldest_valid()),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            sender, name = str(row[0]), row[1]
            await conn.execute(
                "INSERT INTO pairing_welcomes (channel, sender, held) VALUES (%s, %s, %s)"
                " ON CONFLICT (channel, sender) DO UPDATE SET held = excluded.held",
                (channel, sender, Jsonb(row[2])),
            )
            await conn.execute(
                "INSERT INTO pairing_approved (channel, sender, name, approved_at)"
                " VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (channel, sender) DO UPDATE"
                " SET name = coalesce(excluded.name, pairing_approved.name)",
                (channel, sender, name, self._clock()),
            )
        self._approved.add((channel, sender))
        return sender

    async def hold(self, channel: str, sender: str, message: str) -> bool:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE pairing_codes SET held = held || %s"
                " WHERE channel = %s AND sender = %s AND issued_at >= %s"
                " AND jsonb_array_length(held) < %s RETURNING 1",
                (Jsonb([message]), channel, sender, self._oldest_valid(), HELD_AT_MOST),
            )
            return await cur.fetchone() is not None

    async def welcomes(self) -> list[Welcome]:
        now = self._clock()
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE pairing_welcomes SET taken_until = %s WHERE taken_until < %s"
                " RETURNING channel, sender, held",
                (now + WELCOME_TAKEN_FOR, now),
            )
            return [
                Welcome(str(c), str(s), tuple(str(m) for m in held))
                for c, s, held in await cur.fetchall()
            ]

    async def welcomed(self, channel: str, sender: str) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                "DELETE FROM pairing_welcomes WHERE channel = %s AND sender = %s",
                (channel, sender),
            )

    async def revoke(self, channel: str, sender: str) -> bool:
        async with self._pool.connection() as conn:
            await conn.execute(
                "DELETE FROM pairing_welcomes WHERE channel = %s AND sender = %s",
                (channel, sender),
            )
            cur = await conn.execute(
                "DELETE FROM pairing_approved WHERE channel = %s AND sender = %s RETURNING 1",
                (channel, sender),
            )
            gone = await cur.fetchone() is not None
        self._approved.discard((channel, sender))
        return gone

    async def waiting(self) -> list[PendingCode]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT code, channel, sender, name, issued_at FROM pairing_codes"
                " WHERE issued_at >= %s ORDER BY code",
                (self._oldest_valid(),),
            )
            return [
                PendingCode(str(c), str(ch), str(s), None if n is None else str(n), float(at))
                for c, ch, s, n, at in await cur.fetchall()
            ]

    async def approved(self) -> list[tuple[str, str, str | None]]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT channel, sender, name FROM pairing_approved ORDER BY channel, sender"
            )
            return [
                (str(c), str(s), None if n is None else str(n)) for c, s, n in await cur.fetchall()
            ]

    async def channels(self) -> set[str]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT channel FROM pairing_codes WHERE issued_at >= %s"
                " UNION SELECT channel FROM pairing_approved",
                (self._oldest_valid(),),
            )
            return {str(row[0]) for row in await cur.fetchall()}


__all__ = ["PostgresPairing"]
