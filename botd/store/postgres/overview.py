"""What the web page reads (``PageReads``), on PostgreSQL: the queries of
``botd.store.overview``, as the SQLite store runs them."""

from __future__ import annotations

from ..overview import (
    CONVERSATIONS_QUERY,
    PIECES_QUERY,
    ConversationSummary,
    LoggedPiece,
    conversation_summaries,
    logged_pieces,
)
from ..records import StoredApproval
from ..rows import APPROVAL_COLUMNS, approval_from_row
from .base import Conn, PostgresBase


class OverviewStore(PostgresBase):
    """The web page's reads (see the module docstring)."""

    async def conversation_summaries(self, limit: int = 200) -> list[ConversationSummary]:
        async def read(conn: Conn) -> list[ConversationSummary]:
            cur = await conn.execute(CONVERSATIONS_QUERY.format(p="%s"), (limit,))
            return conversation_summaries(await cur.fetchall())

        return await self._read(read)

    async def conversation_pieces(self, conversation_key: str) -> list[LoggedPiece]:
        async def read(conn: Conn) -> list[LoggedPiece]:
            cur = await conn.execute(PIECES_QUERY.format(p="%s"), (conversation_key,) * 3)
            return logged_pieces(await cur.fetchall())

        return await self._read(read)

    async def pending_approvals(self) -> list[StoredApproval]:
        async def read(conn: Conn) -> list[StoredApproval]:
            cur = await conn.execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE state = 'pending' "
                "ORDER BY created_at"
            )
            return [approval_from_row(row) for row in await cur.fetchall()]

        return await self._read(read)


__all__ = ["OverviewStore"]
