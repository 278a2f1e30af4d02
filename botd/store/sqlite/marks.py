"""Catch-up marks (``CatchUpMarks``): in each chat, the newest message of its history botd
took (accepted, or kept as context).

``mark_chat`` moves a chat's mark in the transaction that accepts or keeps the message, so
the mark never names a message the store does not have. It only moves forward: platform ids
that are numbers (Discord's snowflakes, Slack's ``ts``) compare by their value, the longer
one being the larger (``MARK_NEWER``), so a missed message taken after a newer one leaves the
mark where it was. The adapters read the marks at a start (``chat_marks``) to read each
chat's history since (``botd.channels.catch_up``).
"""

from __future__ import annotations

import sqlite3

from ...chat import InboundMessage
from ..records import ChatMark
from ..rows import chat_mark_from_row, chat_mark_row
from .deferred import DeferredWrites

MARK_NEWER = (
    "length(excluded.message_id) > length(chat_marks.message_id) OR ("
    "length(excluded.message_id) = length(chat_marks.message_id) "
    "AND excluded.message_id > chat_marks.message_id)"
)
"""Whether the message being marked is newer than the chat's mark (ids that are numbers)."""


def mark_chat(conn: sqlite3.Connection, message: InboundMessage, now: float) -> None:
    """In the caller's transaction: move ``message``'s chat mark to it, if it is a message
    of a readable history and newer than the mark."""
    row = chat_mark_row(message, now)
    if row is None:
        return
    conn.execute(
        "INSERT INTO chat_marks (channel, account, chat_id, thread_id, message_id, marked_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (channel, account, chat_id, thread_id) "
        "DO UPDATE SET message_id = excluded.message_id, marked_at = excluded.marked_at "
        f"WHERE {MARK_NEWER}",
        row,
    )


class MarkStore(DeferredWrites):
    """The ``chat_marks`` table (see the module docstring)."""

    async def chat_marks(self, channel: str, account: str, *, limit: int) -> list[ChatMark]:
        """The marks of ``channel``'s ``account``, the most recently moved first, at most
        ``limit`` (what an accept queued is committed first)."""
        self.flush_deferred()
        rows = (
            self._connection()
            .execute(
                "SELECT chat_id, thread_id, message_id, marked_at FROM chat_marks "
                "WHERE channel = ? AND account = ? ORDER BY marked_at DESC LIMIT ?",
                (channel, account, limit),
            )
            .fetchall()
        )
        return [chat_mark_from_row(row) for row in rows]


__all__ = ["MARK_NEWER", "MarkStore", "mark_chat"]
