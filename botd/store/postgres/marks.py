"""Catch-up marks on PostgreSQL (``CatchUpMarks``), as the SQLite store means them
(``botd/store/sqlite/marks.py``): moved forward only, in the transaction that accepts or
keeps the message. Ids compare as the C locale orders them (digits by value within one
length), whatever the database's collation."""

from __future__ import annotations

from ...chat import InboundMessage
from ..records import ChatMark
from ..rows import chat_mark_from_row, chat_mark_row
from .base import Conn, PostgresBase

_MARK_NEWER = (
    "length(excluded.message_id) > length(chat_marks.message_id) OR ("
    "length(excluded.message_id) = length(chat_marks.message_id) "
    'AND excluded.message_id COLLATE "C" > chat_marks.message_id COLLATE "C")'
)


async def mark_chat(conn: Conn, message: InboundMessage, now: float) -> None:
    """In the caller's transaction: move ``message``'s chat mark to it, if it is a message
    of a readable history and newer than the mark."""
    row = chat_mark_row(message, now)
    if row is None:
        return
    await conn.execute(
        "INSERT INTO chat_marks (channel, account, chat_id, thread_id, message_id, marked_at) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (channel, account, chat_id, thread_id) "
        "DO UPDATE SET message_id = excluded.message_id, marked_at = excluded.marked_at "
        f"WHERE {_MARK_NEWER}",
        row,
    )


class MarkStore(PostgresBase):
    """The ``chat_marks`` table (see the module docstring)."""

    async def chat_marks(self, channel: str, account: str, *, limit: int) -> list[ChatMark]:
        async def read(conn: Conn) -> list[ChatMark]:
            cur = await conn.execute(
                "SELECT chat_id, thread_id, message_id, marked_at FROM chat_marks "
                "WHERE channel = %s AND account = %s ORDER BY marked_at DESC LIMIT %s",
                (channel, account, limit),
            )
            return [chat_mark_from_row(row) for row in await cur.fetchall()]

        return await self._read(read)


__all__ = ["MarkStore", "mark_chat"]
