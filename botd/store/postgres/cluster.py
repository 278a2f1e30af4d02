"""What the dispatcher reads of a conversation's inbox on the shared database
(``ConversationInbox``), and the signal that tells the nodes a message arrived.

The holder pulls a conversation's ``accepted`` entries by ``seq`` (commit order, see
``inbound``) past the last one it took; a node that takes a conversation over reads its
unfinished entries and unconfirmed pieces; the poller finds the conversations with
unfinished entries whose lease is absent or expired, in one statement joining the inbox
and the leases. An arrival is a ``NOTIFY`` on ``ARRIVALS`` whose payload is the
conversation key; ``listen_arrivals`` is a connection of its own that ``LISTEN``s, woken
by its socket only, with keepalives, replaced when it stops answering, and reconnecting
with backoff while the database is away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg import AsyncConnection

from ...cluster.leases import CONVERSATION_LEASE
from ..records import InboxEntry, OutboxEntry
from ..rows import inbound_from_json, outbox_entry_from_row
from .base import CONNECT_TIMEOUT, Conn, PostgresBase, words
from .session import answer_within
from .text import ADAPTERS

log = logging.getLogger(__name__)

ARRIVALS = "botd_inbox"
"""The NOTIFY channel of arrivals (payload: the conversation key)."""
BACKOFF = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Seconds between attempts to listen again while the database is away."""

_ENTRY = "SELECT id, message, state, session_id, user_turn_id, attempts, seq FROM inbox "


def _entry(row: Sequence[Any]) -> InboxEntry:
    return InboxEntry(
        id=int(row[0]),
        message=inbound_from_json(row[1], int(row[0])),
        state=row[2],
        session_id=row[3],
        user_turn_id=None if row[4] is None else int(row[4]),
        attempts=int(row[5]),
        seq=int(row[6]),
    )


class ClusterStore(PostgresBase):
    """``ConversationInbox`` (see the module docstring)."""

    async def conversation_backlog(
        self, conversation_key: str
    ) -> tuple[list[InboxEntry], list[OutboxEntry]]:
        """The conversation's unfinished entries in ``seq`` order, and the unconfirmed pieces
        of its runs (finished or not), oldest first."""

        async def read(conn: Conn) -> tuple[list[InboxEntry], list[OutboxEntry]]:
            cur = await conn.execute(
                _ENTRY + "WHERE conversation_key = %s AND state IN ('accepted', 'running') "
                "ORDER BY seq",
                (conversation_key,),
            )
            entries = [_entry(row) for row in await cur.fetchall()]
            cur = await conn.execute(
                "SELECT o.id, o.anchor, o.seq, o.kind, o.target, o.text, o.media, o.created_at,"
                " o.buttons"
                " FROM outbox o JOIN inbox i ON i.id = o.anchor"
                " WHERE i.conversation_key = %s AND o.state = 'pending' ORDER BY o.id",
                (conversation_key,),
            )
            return entries, [outbox_entry_from_row(row) for row in await cur.fetchall()]

        return await self._read(read)

    async def accepted_after(self, conversation_key: str, seq: int) -> list[InboxEntry]:
        """The conversation's ``accepted`` entries past ``seq``, in ``seq`` order."""

        async def read(conn: Conn) -> list[InboxEntry]:
            cur = await conn.execute(
                _ENTRY + "WHERE conversation_key = %s AND state = 'accepted' AND seq > %s "
                "ORDER BY seq",
                (conversation_key, seq),
            )
            return [_entry(row) for row in await cur.fetchall()]

        return await self._read(read, after_queued=False)

    async def accepted_places_after(self, conversation_key: str, seq: int) -> list[tuple[int, int]]:
        """``(inbox id, seq)`` of the conversation's ``accepted`` entries past ``seq``, in
        order: ``accepted_after`` without the messages."""

        async def read(conn: Conn) -> list[tuple[int, int]]:
            cur = await conn.execute(
                "SELECT id, seq FROM inbox WHERE conversation_key = %s AND state = 'accepted' "
                "AND seq > %s ORDER BY seq",
                (conversation_key, seq),
            )
            return [(int(row[0]), int(row[1])) for row in await cur.fetchall()]

        return await self._read(read, after_queued=False)

    def next_place(self, inbox_id: int, seq: int) -> int | None:
        """The ``seq`` this store gave ``inbox_id`` when it accepted it, if that is the one
        after ``seq``: a conversation's ``seq``s have no gaps (``inbound``), so nothing lies
        between. Forgotten once asked."""
        place = self._places.pop(inbox_id, None)
        return place if place == seq + 1 else None

    async def accepted_heads(self, conversation_keys: Sequence[str]) -> dict[str, int]:
        """The latest ``seq`` of an ``accepted`` entry of each of the conversations that
        have one."""
        if not conversation_keys:
            return {}

        async def read(conn: Conn) -> dict[str, int]:
            cur = await conn.execute(
                "SELECT conversation_key, max(seq) FROM inbox WHERE state = 'accepted' "
                "AND conversation_key = ANY(%s) GROUP BY conversation_key",
                (list(conversation_keys),),
            )
            return {str(key): int(seq) for key, seq in await cur.fetchall()}

        return await self._read(read, after_queued=False)

    async def unanchored_pieces(self) -> list[OutboxEntry]:
        """Unconfirmed pieces of runs that answered no inbox entry, oldest first."""

        async def read(conn: Conn) -> list[OutboxEntry]:
            cur = await conn.execute(
                "SELECT id, anchor, seq, kind, target, text, media, created_at, buttons"
                " FROM outbox WHERE state = 'pending' AND anchor IS NULL ORDER BY id"
            )
            return [outbox_entry_from_row(row) for row in await cur.fetchall()]

        return await self._read(read)

    async def unowned_conversations(self, limit: int = 100) -> list[str]:
        """Conversations with unfinished entries whose lease is absent or expired, the one
        waiting longest first."""

        async def read(conn: Conn) -> list[str]:
            cur = await conn.execute(
                "SELECT i.conversation_key FROM inbox i"
                " LEFT JOIN leases l ON l.name = %s || i.conversation_key"
                " WHERE i.state IN ('accepted', 'running')"
                " AND (l.name IS NULL OR l.expires_at <= clock_timestamp())"
                " GROUP BY i.conversation_key ORDER BY min(i.id) LIMIT %s",
                (CONVERSATION_LEASE, limit),
            )
            return [str(row[0]) for row in await cur.fetchall()]

        return await self._read(read, after_queued=False)

    async def signal_arrival(self, conversation_key: str) -> None:
        """Tell every listening node that the conversation has a new entry."""

        async def notify(conn: Conn) -> None:
            await conn.execute("SELECT pg_notify(%s, %s)", (ARRIVALS, conversation_key))

        await self._read(notify, after_queued=False)

    async def listen_arrivals(self) -> AsyncIterator[str | None]:
        """The keys of arrivals, as they come, for as long as the caller iterates; None after
        each (re)connection (arrivals may have been missed while it was away).

        The listener sleeps until the connection's socket has something to read (not
        psycopg's ``notifies``, whose wait wakes up ten times a second to look for a
        cancellation: most of what an idle node spent). The connection carries the store's
        session bounds and TCP keepalives, and is asked ``SELECT 1`` after each third of the
        TTL in which nothing came: one the server does not answer within that time (a network
        that went silent, which TCP alone may not notice for a long while) is cut and
        replaced."""
        failures = 0
        every = self.bounds.lease_ttl / 3
        while True:
            try:
                conn = await AsyncConnection.connect(
                    self._dsn,
                    autocommit=True,
                    connect_timeout=CONNECT_TIMEOUT,
                    context=ADAPTERS,
                    **self.bounds.connect_kwargs(self._dsn),
                )
            except psycopg.Error as exc:
                delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                log.warning(
                    "listening for arrivals: %s; again in %g s", words(exc, self._password), delay
                )
                await asyncio.sleep(delay)
                continue
            try:
                async with answer_within(conn, every):
                    await conn.execute(f"LISTEN {ARRIVALS}")
                failures = 0
                yield None
                while True:
                    # What came (and what psycopg kept while a SELECT 1 ran), without waiting.
                    async for notice in conn.notifies(timeout=0):
                        yield notice.payload
                    if not await _readable(conn, every):
                        async with answer_within(conn, every):
                            await conn.execute("SELECT 1")
            except psycopg.Error as exc:
                delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                log.warning(
                    "listening for arrivals: %s; again in %g s", words(exc, self._password), delay
                )
                await asyncio.sleep(delay)
            finally:
                await conn.close()


async def _readable(conn: AsyncConnection[Any], seconds: float) -> bool:
    """Whether ``conn``'s socket has something to read within ``seconds`` (an event of the
    loop's, no polling meanwhile)."""
    loop = asyncio.get_running_loop()
    fd = conn.pgconn.socket
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        async with asyncio.timeout(seconds):
            await ready
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
    return True


__all__ = ["ARRIVALS", "ClusterStore"]
