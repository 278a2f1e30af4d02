"""What the web page reads (``PageReads``), on SQLite: the queries of
``botd.store.overview``."""

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
from .deferred import DeferredWrites


class OverviewStore(DeferredWrites):
    """The web page's reads (see the module docstring)."""

    async def conversation_summaries(self, limit: int = 200) -> list[ConversationSummary]:
        self.flush_deferred()  # an entry answered a moment ago is read as answered
        query = CONVERSATIONS_QUERY.format(p="?")
        return conversation_summaries(self._connection().execute(query, (limit,)).fetchall())

    async def conversation_pieces(self, conversation_key: str) -> list[LoggedPiece]:
        self.flush_deferred()  # a piece marked sent a moment ago is read as sent
        query = PIECES_QUERY.format(p="?")
        params = (conversation_key,) * 3
        return logged_pieces(self._connection().execute(query, params).fetchall())

    async def pending_approvals(self) -> list[StoredApproval]:
        self.flush_deferred()
        rows = (
            self._connection()
            .execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE state = 'pending' "
                "ORDER BY created_at"
            )
            .fetchall()
        )
        return [approval_from_row(row) for row in rows]


__all__ = ["OverviewStore"]
