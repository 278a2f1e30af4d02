"""The router's ledger on PostgreSQL: dedupe ids, accepted messages, kept chatter, and the
channels' offsets (``InboundLedger``, ``Offsets``), as the SQLite store means them.

``accept_inbound`` records the ids, the inbox row and the chatter it consumes in one
transaction; asked to go only while the conversation keeps no chatter, its one statement
checks that too. An accept that moves no chat mark and consumes no chatter is that one
statement (``batch.Statement``), sent with the rest of its batch, its transaction's start and
its commit in one query: one round trip. The
row's ``seq`` is the next of its conversation, read under a transaction advisory lock on the
conversation key (taken before the ids are recorded): an accept of the same conversation on
another node waits for this one to commit, so ``seq`` order is commit order and has no gaps
(an identity id is taken when the insert runs, not when it commits). Two nodes recording the
same id at once: the second insert waits for the first's row and then finds it, so the
message is accepted once.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence

from psycopg.rows import TupleRow

from ...chat import InboundMessage
from ..errors import ChatterKept
from ..records import CHATTER_RETENTION_SECONDS, DEFAULT_INBOUND_RETENTION_SECONDS, KeptLine
from ..rows import chat_mark_row, inbound_json
from ..targets import attachments_data, attachments_from_data
from .base import Conn, PostgresBase
from .batch import Statement
from .marks import mark_chat

_RECORD_IDS = (
    "INSERT INTO inbound_seen (channel, message_id, seen_at) "
    "SELECT %s, key, %s FROM unnest(%s::text[]) AS key ON CONFLICT DO NOTHING"
)


async def _record_ids(conn: Conn, channel: str, keys: list[str], now: float) -> bool:
    """Record ``keys``; whether any was recorded before (a repeat)."""
    cur = await conn.execute(_RECORD_IDS, (channel, now, keys))
    return cur.rowcount < len(keys)


_ACCEPT = (
    "WITH kept AS ("
    "SELECT 1 FROM chatter WHERE %(check)s AND conversation_key = %(key)s "
    "AND kept_at >= %(since)s LIMIT 1), "
    "recorded AS ("
    "INSERT INTO inbound_seen (channel, message_id, seen_at) "
    "SELECT %(channel)s, key, %(now)s FROM unnest(%(keys)s::text[]) AS key "
    "WHERE NOT EXISTS (SELECT 1 FROM kept) "
    "ON CONFLICT DO NOTHING RETURNING 1), "
    "placed AS ("
    "INSERT INTO inbox (channel, conversation_key, seq, message, state, accepted_at, updated_at) "
    "SELECT %(channel)s, %(key)s, coalesce(max(seq), 0) + 1, %(message)s, 'accepted', %(now)s, "
    "%(now)s FROM inbox WHERE conversation_key = %(key)s "
    "HAVING (SELECT count(*) FROM recorded) = %(count)s RETURNING id, seq) "
    "SELECT placed.id, placed.seq, EXISTS (SELECT 1 FROM kept) "
    "FROM (SELECT 1) AS one LEFT JOIN placed ON true"
)
"""An accept in one statement (one round trip): the ids recorded, and the inbox row added
only if every one of them was new; with ``check``, neither if the conversation keeps chatter
(the last column says so). Always one row: (id, seq) of the row added, or nulls."""

_KEPT = object()
"""What ``_placed`` returns when ``check`` found chatter kept (nothing written)."""


async def insert_accepted(
    conn: Conn, channel: str, keys: list[str], message: InboundMessage, now: float
) -> int | None:
    """In the caller's transaction, which holds the conversation's advisory lock: record
    ``keys`` (distinct) and, unless any was seen before, the message as the conversation's
    next inbox row; its id, or None for a repeat (only the ids recorded). The message's
    chat mark moves with it (``marks``)."""
    placed = await _placed(conn, channel, keys, message, now)
    assert placed is not _KEPT  # not checked
    return None if not isinstance(placed, tuple) else int(placed[0])


def _accepting(
    channel: str, keys: list[str], message: InboundMessage, now: float, *, check: bool
) -> Statement[tuple[int, int] | object | None]:
    """The accept's statement (``_ACCEPT``): its result is the new row's id and ``seq``,
    None for a repeat, or (``check``) ``_KEPT`` when the conversation keeps chatter."""
    return Statement(
        _ACCEPT,
        {
            "check": check,
            "since": now - CHATTER_RETENTION_SECONDS,
            "channel": channel,
            "now": now,
            "keys": keys,
            "key": message.conversation_key,
            "message": inbound_json(message),
            "count": len(keys),
        },
        _place,
    )


def _place(rows: list[TupleRow]) -> tuple[int, int] | object | None:
    [row] = rows  # the statement returns one row
    if row[2]:
        return _KEPT
    if row[0] is None:
        return None
    return int(row[0]), int(row[1])


async def _placed(
    conn: Conn,
    channel: str,
    keys: list[str],
    message: InboundMessage,
    now: float,
    *,
    check: bool = False,
) -> tuple[int, int] | object | None:
    """``insert_accepted``, the new row's id and ``seq``; with ``check``, ``_KEPT`` (and
    nothing written) when the conversation keeps chatter."""
    placed = await _accepting(channel, keys, message, now, check=check)(conn)
    if isinstance(placed, tuple):
        await mark_chat(conn, message, now)
    return placed


def _unique(keys: Sequence[str], what: str) -> list[str]:
    unique = list(dict.fromkeys(keys))
    if not unique:
        raise ValueError(f"{what} needs at least one key")
    return unique


class InboundStore(PostgresBase):
    """Dedupe ids, accepts, chatter and offsets (see the module docstring)."""

    async def seen_inbound(self, channel: str, *keys: str) -> bool:
        """Record a message's ids in one transaction; True if any was recorded before."""
        unique = _unique(keys, "seen_inbound")
        now = self._clock()
        return await self._commit(
            "seen_inbound", lambda conn: _record_ids(conn, channel, unique, now)
        )

    async def accept_inbound(
        self,
        channel: str,
        keys: Sequence[str],
        message: InboundMessage,
        *,
        consume_chatter: tuple[str, int] | None = None,
        unless_chatter_kept: bool = False,
        chatter_read_by: str | None = None,
    ) -> int | None:
        """Record the message's ids and the message, atomically: its inbox id once
        committed, or None when any id was seen before (then only the ids are recorded);
        ``unless_chatter_kept``, ``ChatterKept`` and nothing written when the conversation
        keeps chatter (checked by the accept's own statement); ``chatter_read_by``: the
        consumed lines are shared and stay, that reader's mark moves past them."""
        unique = _unique(keys, "accept_inbound")
        now = self._clock()
        key = message.conversation_key

        async def write(conn: Conn) -> tuple[int, int] | object | None:
            placed = await _placed(conn, channel, unique, message, now, check=unless_chatter_kept)
            if isinstance(placed, tuple) and consume_chatter is not None:
                await _consume(conn, *consume_chatter, read_by=chatter_read_by, now=now)
            return placed

        accept: Callable[[Conn], Awaitable[tuple[int, int] | object | None]] = write
        if consume_chatter is None and chat_mark_row(message, now) is None:
            # Its one statement: it rides in its batch's query (``batch.Statement``).
            accept = _accepting(channel, unique, message, now, check=unless_chatter_kept)
        # The conversation's lock, taken at the start of the batch (``base``), is held
        # until it commits: the next accept of the conversation reads this row's seq.
        placed = await self._commit("accept_inbound", accept, locks=(key,))
        if placed is _KEPT:
            raise ChatterKept(key)
        if not isinstance(placed, tuple):
            return None
        self._remember_place(*placed)
        return int(placed[0])

    async def prune_inbound(
        self, older_than_seconds: float = DEFAULT_INBOUND_RETENTION_SECONDS
    ) -> int:
        """Forget inbound ids first seen more than ``older_than_seconds`` ago; how many."""
        cut = self._clock() - older_than_seconds

        async def write(conn: Conn) -> int:
            cur = await conn.execute("DELETE FROM inbound_seen WHERE seen_at < %s", (cut,))
            return max(cur.rowcount, 0)

        return await self._commit("prune_inbound", write)

    # --- kept chatter -----------------------------------------------------------------------

    async def keep_chatter(
        self, channel: str, keys: Sequence[str], message: InboundMessage, *, limit: int
    ) -> bool:
        """Record the ids and, unless any was seen before, keep the message as chatter of
        its conversation (its newest ``limit`` lines kept); whether it was a repeat."""
        unique = _unique(keys, "keep_chatter")
        now = self._clock()
        key = message.conversation_key
        files = json.dumps(attachments_data(message.attachments)) if message.attachments else ""
        line = (key, message.sender_id, message.sender_name, message.text, now, files)

        async def write(conn: Conn) -> bool:
            if await _record_ids(conn, channel, unique, now):
                return True
            await conn.execute(
                "INSERT INTO chatter "
                "(conversation_key, sender_id, sender_name, text, kept_at, attachments) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                line,
            )
            await mark_chat(conn, message, now)
            await conn.execute(
                "DELETE FROM chatter WHERE conversation_key = %s AND (id <= ("
                "SELECT id FROM chatter WHERE conversation_key = %s ORDER BY id DESC "
                "LIMIT 1 OFFSET %s) OR kept_at < %s)",
                (key, key, limit, now - CHATTER_RETENTION_SECONDS),
            )
            return False

        return await self._commit("keep_chatter", write)

    async def kept_chatter(
        self, conversation_key: str, *, read_by: str | None = None
    ) -> list[KeptLine]:
        """The conversation's kept lines, oldest first; ``read_by``: those after that
        reader's mark (a user-scoped group's lines, shared by its members)."""
        since = self._clock() - CHATTER_RETENTION_SECONDS

        async def read(conn: Conn) -> list[KeptLine]:
            cur = await conn.execute(
                "SELECT id, sender_id, sender_name, text, attachments FROM chatter "
                "WHERE conversation_key = %s AND kept_at >= %s AND id > coalesce(("
                "SELECT up_to FROM chatter_read WHERE reader_key = %s), 0) ORDER BY id",
                (conversation_key, since, read_by),
            )
            return [
                KeptLine(
                    int(r[0]),
                    str(r[1]),
                    str(r[2]),
                    str(r[3]),
                    attachments_from_data(json.loads(r[4])) if r[4] else (),
                )
                for r in await cur.fetchall()
            ]

        return await self._read(read, after_queued=False)

    async def prune_chatter(self, older_than_seconds: float = CHATTER_RETENTION_SECONDS) -> int:
        """Drop chatter kept more than ``older_than_seconds`` ago; how many lines."""
        cut = self._clock() - older_than_seconds

        async def write(conn: Conn) -> int:
            cur = await conn.execute("DELETE FROM chatter WHERE kept_at < %s", (cut,))
            # A mark read before the cut passed only lines kept before it: gone too.
            await conn.execute("DELETE FROM chatter_read WHERE read_at < %s", (cut,))
            return max(cur.rowcount, 0)

        return await self._commit("prune_chatter", write)

    # --- offsets ----------------------------------------------------------------------------

    async def get_offset(self, channel: str, account: str) -> str | None:
        async def read(conn: Conn) -> str | None:
            cur = await conn.execute(
                "SELECT value FROM offsets WHERE channel = %s AND account = %s",
                (channel, account),
            )
            row = await cur.fetchone()
            return None if row is None else str(row[0])

        return await self._read(read)

    def set_offset_soon(self, channel: str, account: str, value: str) -> None:
        """Save a channel account's position with a later batch (a lazy record).

        A numeric position only moves forward: a node that polled before another took over
        (and was paused meanwhile) cannot set it back."""
        params = (channel, account, value, self._clock())

        async def write(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO offsets (channel, account, value, updated_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (channel, account) DO UPDATE "
                "SET value = excluded.value, updated_at = excluded.updated_at "
                "WHERE offsets.value !~ '^[0-9]+$' OR excluded.value !~ '^[0-9]+$' "
                "OR excluded.value::numeric >= offsets.value::numeric",
                params,
            )

        self._defer("set_offset_soon", write, lazy=True)


async def _consume(
    conn: Conn, conversation_key: str, up_to: int, *, read_by: str | None, now: float
) -> None:
    """Delete the conversation's chatter up to line ``up_to`` (what the model was shown);
    ``read_by``: the lines are shared and stay, that reader's mark moves to ``up_to``."""
    if read_by is not None:
        await conn.execute(
            "INSERT INTO chatter_read (reader_key, up_to, read_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (reader_key) DO UPDATE SET "
            "up_to = greatest(chatter_read.up_to, excluded.up_to), read_at = excluded.read_at",
            (read_by, up_to, now),
        )
        return
    await conn.execute(
        "DELETE FROM chatter WHERE conversation_key = %s AND id <= %s", (conversation_key, up_to)
    )


__all__ = ["InboundStore", "insert_accepted"]
