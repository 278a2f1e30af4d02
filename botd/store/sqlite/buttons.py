"""The buttons botd put under its messages (``ButtonLedger``): one row per message, so a
press is checked against what botd itself offered there (``botd.buttons.presses``)."""

from __future__ import annotations

import sqlite3

from ...chat import MessageRef
from ..records import PostedButtons
from ..rows import button_message_row, posted_buttons_from_row
from .deferred import DeferredWrites


class ButtonStore(DeferredWrites):
    """The ``button_messages`` table (see the module docstring)."""

    def buttons_posted_soon(self, posted: PostedButtons) -> None:
        params = button_message_row(posted)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO button_messages (channel, account, chat_id, message_id, buttons, "
                "posted_at, conversation_key) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT "
                "(channel, account, chat_id, message_id) DO UPDATE SET buttons = "
                "excluded.buttons, posted_at = excluded.posted_at, "
                "conversation_key = coalesce(excluded.conversation_key, conversation_key)",
                params,
            )

        self._defer("buttons_posted", write)

    async def posted_buttons(self, message: MessageRef, answered_key: str) -> PostedButtons | None:
        self.flush_deferred()
        target = message.target
        params = [answered_key, target.channel, target.account_id, target.chat_id]
        params.append(message.message_id)
        row = (
            self._connection()
            .execute(
                "SELECT buttons, posted_at, EXISTS (SELECT 1 FROM inbound_seen s "
                "WHERE s.channel = b.channel AND s.message_id = ?), conversation_key "
                "FROM button_messages b "
                "WHERE b.channel = ? AND b.account = ? AND b.chat_id = ? AND b.message_id = ?",
                params,
            )
            .fetchone()
        )
        return None if row is None else posted_buttons_from_row(message, row)


__all__ = ["ButtonStore"]
