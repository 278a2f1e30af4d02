"""The buttons botd put under its messages on PostgreSQL (``ButtonLedger``), as the SQLite
store means them (``botd/store/sqlite/buttons.py``). A message's buttons are a fact about
the platform, whoever holds its conversation now: the record is written unfenced
(``base.UNFENCED``)."""

from __future__ import annotations

from ...chat import MessageRef
from ..records import PostedButtons
from ..rows import button_message_row, posted_buttons_from_row
from .base import Conn, PostgresBase


class ButtonStore(PostgresBase):
    """The ``button_messages`` table (see the module docstring)."""

    def buttons_posted_soon(self, posted: PostedButtons) -> None:
        params = button_message_row(posted)

        async def write(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO button_messages (channel, account, chat_id, message_id, buttons, "
                "posted_at, conversation_key) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT "
                "(channel, account, chat_id, message_id) DO UPDATE SET buttons = "
                "excluded.buttons, posted_at = excluded.posted_at, conversation_key = "
                "coalesce(excluded.conversation_key, button_messages.conversation_key)",
                params,
            )

        self._defer("buttons_posted", write)

    async def posted_buttons(self, message: MessageRef, answered_key: str) -> PostedButtons | None:
        target = message.target
        params = (
            answered_key,
            target.channel,
            target.account_id,
            target.chat_id,
            message.message_id,
        )

        async def read(conn: Conn) -> PostedButtons | None:
            cur = await conn.execute(
                "SELECT buttons, posted_at, EXISTS (SELECT 1 FROM inbound_seen s "
                "WHERE s.channel = b.channel AND s.message_id = %s), conversation_key "
                "FROM button_messages b "
                "WHERE b.channel = %s AND b.account = %s AND b.chat_id = %s AND b.message_id = %s",
                params,
            )
            row = await cur.fetchone()
            return None if row is None else posted_buttons_from_row(message, row)

        return await self._read(read)


__all__ = ["ButtonStore"]
