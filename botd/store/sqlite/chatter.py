"""Kept chatter: group messages the bot was not addressed in, waiting for its next turn there.

In a group that requires a mention, what people say to each other is not a prompt but is
worth knowing when someone does address the bot. (Edits of earlier messages are kept the same
way, in DMs too: the router hands them over marked as edits.) ``keep_chatter`` records such a
message together with its dedupe ids, in one group-committed transaction (the same commit the
router's ledger write would cost, shared with whatever else the loop iteration writes), and
trims the conversation to its newest ``limit`` rows and to rows younger than
``CHATTER_RETENTION_SECONDS``. ``kept_chatter`` reads a conversation's rows; they are deleted
in the transaction that accepts the addressed message (``accept_inbound``'s
``consume_chatter``), so each line reaches the model once, also across a restart. An accept
asked to go only while its conversation keeps nothing (``unless_chatter_kept``) checks that
in its own transaction (``keeps_chatter``). The daily
pruner drops what conversations that never spoke to the bot again left behind
(``prune_chatter``).

A user-scoped group's lines (``botd.inbound.session_scope``) are shared by its members'
conversations: each reads those after its own mark (``kept_chatter``'s ``read_by``), and the
accept that shows them moves the mark (``chatter_read``) instead of deleting them. A mark is
a line id, so a new line's id is above every mark (SQLite would otherwise reuse the ids of
the newest lines once they are deleted); a mark read more than ``CHATTER_RETENTION_SECONDS``
ago goes with the lines it passed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...chat import InboundMessage
from ..records import CHATTER_RETENTION_SECONDS, KeptLine
from ..targets import attachments_data, attachments_from_data
from .deferred import DeferredWrites
from .marks import mark_chat


class ChatterStore(DeferredWrites):
    """The ``chatter`` table (see the module docstring)."""

    async def keep_chatter(
        self, channel: str, keys: Sequence[str], message: InboundMessage, *, limit: int
    ) -> bool:
        """Record the message's dedupe ids and, unless any was seen before, keep the message
        as chatter of its conversation (its newest ``limit`` rows are kept). Returns whether
        it was a repeat. Waits for the group commit that carries it."""
        unique = list(dict.fromkeys(keys))
        if not unique:
            raise ValueError("keep_chatter needs at least one key")
        now = self._clock()
        key = message.conversation_key
        files = json.dumps(attachments_data(message.attachments)) if message.attachments else ""
        row = (key, message.sender_id, message.sender_name, message.text, now, files)

        def write(conn: sqlite3.Connection) -> bool:
            inserted = 0
            for dedupe in unique:
                inserted += conn.execute(
                    "INSERT OR IGNORE INTO inbound_seen (channel, message_id, seen_at) "
                    "VALUES (?, ?, ?)",
                    (channel, dedupe, now),
                ).rowcount
            if inserted < len(unique):
                return True
            conn.execute(
                "INSERT INTO chatter "
                "(id, conversation_key, sender_id, sender_name, text, kept_at, attachments) "
                f"VALUES (({_NEXT_LINE}), ?, ?, ?, ?, ?, ?)",
                row,
            )
            mark_chat(conn, message, now)
            # Beyond the newest `limit` rows, or too old: dropped (both by the index).
            conn.execute(
                "DELETE FROM chatter WHERE conversation_key = ? AND (id <= ("
                "SELECT id FROM chatter WHERE conversation_key = ? ORDER BY id DESC "
                "LIMIT 1 OFFSET ?) OR kept_at < ?)",
                (key, key, limit, now - CHATTER_RETENTION_SECONDS),
            )
            return False

        return await self._commit("keep_chatter", write)

    async def kept_chatter(
        self, conversation_key: str, *, read_by: str | None = None
    ) -> list[KeptLine]:
        """The conversation's kept chatter, oldest first (what ``keep_chatter`` committed;
        nothing of it waits in the deferred queue, so no flush is needed); ``read_by``: only
        the lines after that reader's mark."""
        rows = (
            self._connection()
            .execute(
                "SELECT id, sender_id, sender_name, text, attachments FROM chatter "
                "WHERE conversation_key = ? AND kept_at >= ? AND id > coalesce(("
                "SELECT up_to FROM chatter_read WHERE reader_key = ?), 0) ORDER BY id",
                (conversation_key, self._clock() - CHATTER_RETENTION_SECONDS, read_by),
            )
            .fetchall()
        )
        return [
            KeptLine(
                int(r[0]),
                str(r[1]),
                str(r[2]),
                str(r[3]),
                attachments_from_data(json.loads(r[4])) if r[4] else (),
            )
            for r in rows
        ]

    async def prune_chatter(self, older_than_seconds: float = CHATTER_RETENTION_SECONDS) -> int:
        """Drop chatter kept more than ``older_than_seconds`` ago; returns how many rows."""
        cut = self._clock() - older_than_seconds
        with self._transaction("prune_chatter") as conn:
            cursor = conn.execute("DELETE FROM chatter WHERE kept_at < ?", (cut,))
            conn.execute("DELETE FROM chatter_read WHERE read_at < ?", (cut,))
            return int(cursor.rowcount)


_NEXT_LINE = (
    "SELECT max(coalesce((SELECT max(id) FROM chatter), 0), "
    "coalesce((SELECT max(up_to) FROM chatter_read), 0)) + 1"
)
"""A new line's id: above every line's and every reader's mark."""


def consume_chatter(
    conn: sqlite3.Connection,
    conversation_key: str,
    up_to: int,
    *,
    read_by: str | None = None,
    now: float = 0.0,
) -> None:
    """Delete the conversation's chatter up to row ``up_to`` (what was shown to the model);
    chatter kept meanwhile stays for the next turn. ``read_by``: the lines are shared, and
    stay; that reader's mark moves to ``up_to`` (read at ``now``)."""
    if read_by is not None:
        conn.execute(
            "INSERT INTO chatter_read (reader_key, up_to, read_at) VALUES (?, ?, ?) "
            "ON CONFLICT (reader_key) DO UPDATE SET up_to = max(up_to, excluded.up_to), "
            "read_at = excluded.read_at",
            (read_by, up_to, now),
        )
        return
    conn.execute(
        "DELETE FROM chatter WHERE conversation_key = ? AND id <= ?", (conversation_key, up_to)
    )


def keeps_chatter(conn: sqlite3.Connection, conversation_key: str, now: float) -> bool:
    """Whether the conversation keeps chatter (a line ``kept_chatter`` would return)."""
    row = conn.execute(
        "SELECT 1 FROM chatter WHERE conversation_key = ? AND kept_at >= ? LIMIT 1",
        (conversation_key, now - CHATTER_RETENTION_SECONDS),
    ).fetchone()
    return row is not None


__all__ = ["ChatterStore", "consume_chatter", "keeps_chatter"]
