"""The durable inbox: every accepted message, and what became of it.

A message is *accepted* when ``accept_inbound`` has written it in the same transaction as its
dedupe ids; only then may the platform be told it arrived (Telegram's offset, Slack's ack).
Each row then goes ``accepted`` -> ``running`` (``start_inbox_run``, which writes the run's user
turn to the transcript in the same transaction) -> ``answered``, ``failed`` or ``skipped``
(``finish_inbox``). A row still ``accepted`` or ``running`` when botd starts was not answered:
the dispatcher's first poll claims each conversation that has one and reads its rows in
arrival order (``conversation_inbox``); ``unfinished_inbox`` lists every such row.

A running row keeps the transcript row id of the user turn it wrote. ``trim_interrupted``
makes such a transcript resumable: it keeps the user turn and every finished step after it
(assistant messages whose tool calls all have results, and those results) and removes what
an interrupted step left behind, so the model can be asked again from there.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...chat import InboundMessage
from ...events import Message
from ..errors import ChatterKept
from ..records import FINISHED_STATES, InboxBacklog, InboxEntry, InboxState
from ..rows import inbound_from_json, inbound_json, message_json, resumable_prefix
from .approvals import awaiting_calls
from .chatter import consume_chatter as _consume_chatter
from .chatter import keeps_chatter
from .marks import mark_chat
from .transcripts import TranscriptStore

ENTRY_COLUMNS = "id, message, state, session_id, user_turn_id, attempts"
"""An entry's columns, in the order ``inbox_entry`` reads them."""


def inbox_entry(row: Sequence[Any]) -> InboxEntry:
    """An unfinished entry from its ``ENTRY_COLUMNS``; its place in its conversation
    (``seq``) is its id (ids are given in commit order)."""
    return InboxEntry(
        id=int(row[0]),
        message=inbound_from_json(row[1], int(row[0])),
        state=row[2],
        session_id=row[3],
        user_turn_id=None if row[4] is None else int(row[4]),
        attempts=int(row[5]),
        seq=int(row[0]),
    )


def insert_accepted(
    conn: sqlite3.Connection,
    channel: str,
    keys: Sequence[str],
    message: InboundMessage,
    now: float,
) -> int | None:
    """In the caller's transaction: record ``keys`` (distinct) and, unless any was seen
    before, the message as an accepted inbox row; its id, or None for a repeat (then only
    the ids are recorded, so a later form of the repeat is caught too). The message's
    chat mark moves with it (``marks``)."""
    inserted = 0
    for key in keys:
        inserted += conn.execute(
            "INSERT OR IGNORE INTO inbound_seen (channel, message_id, seen_at) VALUES (?, ?, ?)",
            (channel, key, now),
        ).rowcount
    if inserted < len(keys):
        return None
    cursor = conn.execute(
        "INSERT INTO inbox (channel, conversation_key, message, state, accepted_at, "
        "updated_at) VALUES (?, ?, ?, 'accepted', ?, ?)",
        (channel, message.conversation_key, inbound_json(message), now, now),
    )
    assert cursor.lastrowid is not None
    mark_chat(conn, message, now)
    return int(cursor.lastrowid)


class InboxStore(TranscriptStore):
    """The inbox table, next to the ledger and transcripts it shares transactions with."""

    _unanswered_from = 0
    """No inbox row below this id is unfinished (see ``unanswered``)."""

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
        """Record the message's dedupe ids and the message itself, atomically, and wait for
        the commit (grouped with other writes of the moment, see ``deferred``).

        Returns the new inbox id, or None when any id was seen before (then only the ids are
        recorded, so a later form of the repeat is caught too). ``consume_chatter``
        (conversation key, last row id) deletes the kept chatter the message carries, in the
        same transaction as the message is accepted. ``unless_chatter_kept``: when the
        message's conversation keeps chatter, nothing is written and ``ChatterKept`` raised.
        ``chatter_read_by``: the consumed lines are shared (a user-scoped group's) and stay;
        that conversation's mark moves past them instead.
        """
        unique = list(dict.fromkeys(keys))
        if not unique:
            raise ValueError("accept_inbound needs at least one key")
        now = self._clock()
        key = message.conversation_key

        def write(conn: sqlite3.Connection) -> int | bool | None:
            if unless_chatter_kept and keeps_chatter(conn, key, now):
                return False
            inbox_id = insert_accepted(conn, channel, unique, message, now)
            if inbox_id is not None and consume_chatter is not None:
                _consume_chatter(conn, *consume_chatter, read_by=chatter_read_by, now=now)
            return inbox_id

        placed = await self._commit("accept_inbound", write)
        if placed is False:
            raise ChatterKept(key)
        return None if placed is None else int(placed)

    def start_inbox_run(
        self,
        ids: Sequence[int],
        *,
        session_id: str,
        run_id: str,
        user_turn: Sequence[Message] = (),
    ) -> None:
        """A run starts on these inbox rows: write its user turn (if any) and mark them running.

        With no ``user_turn`` (a resumed run, whose turn is in the transcript already) the
        rows keep the user turn they had. Lazy (``deferred``): lost in a crash, the rows stay
        as they were and the run starts over.
        """
        bodies = [(m.role, message_json(m)) for m in user_turn]
        ids = list(ids)
        self._defer(
            "start_inbox_run",
            lambda conn: self._start_run(conn, ids, session_id, run_id, bodies),
            lazy=True,
        )

    def _start_run(
        self,
        conn: sqlite3.Connection,
        ids: Sequence[int],
        session_id: str,
        run_id: str,
        bodies: Sequence[tuple[str, str]],
    ) -> None:
        now = self._clock()
        turn_id: int | None = None
        if bodies:
            conn.execute(
                "UPDATE sessions SET updated_at = ?, message_count = message_count + ? "
                "WHERE session_id = ?",
                (now, len(bodies), session_id),
            )
            for role, body in bodies:
                cursor = conn.execute(
                    "INSERT INTO messages (session_id, role, body, created_at) VALUES (?, ?, ?, ?)",
                    (session_id, role, body, now),
                )
                if turn_id is None:
                    turn_id = cursor.lastrowid
        placeholders = ",".join("?" * len(ids))
        conn.execute(
            "UPDATE inbox SET state = 'running', run_id = ?, session_id = ?, "
            "user_turn_id = COALESCE(?, user_turn_id), attempts = attempts + 1, "
            f"updated_at = ? WHERE id IN ({placeholders})",
            (run_id, session_id, turn_id, now, *ids),
        )

    def finish_inbox(self, ids: Sequence[int], state: InboxState) -> None:
        """Mark inbox rows answered, failed or skipped (committed with the next transaction)."""
        if state not in FINISHED_STATES:
            raise ValueError(f"not a final inbox state: {state!r}")
        if not ids:
            return
        placeholders = ",".join("?" * len(ids))
        params = (state, self._clock(), *ids)
        self._defer(
            "finish_inbox",
            lambda conn: conn.execute(
                f"UPDATE inbox SET state = ?, updated_at = ? WHERE id IN ({placeholders})", params
            ),
        )

    def inbox_state(self, inbox_id: int) -> InboxState | None:
        self.flush_deferred()
        row = (
            self._connection()
            .execute("SELECT state FROM inbox WHERE id = ?", (inbox_id,))
            .fetchone()
        )
        return None if row is None else row[0]

    def unfinished_inbox(self) -> list[InboxEntry]:
        """Every accepted or running row, oldest first."""
        self.flush_deferred()
        rows = (
            self._connection()
            .execute(
                f"SELECT {ENTRY_COLUMNS} FROM inbox WHERE state IN ('accepted', 'running') "
                "ORDER BY id"
            )
            .fetchall()
        )
        return [inbox_entry(row) for row in rows]

    async def inbox_backlog(self) -> InboxBacklog:
        """How many accepted messages are not finished, and the age of the oldest (one read
        of the partial index ``inbox_unfinished``, whatever the table holds).

        Reads what is committed: a state change queued a moment ago (``deferred``) shows
        once it is written, a moment later.
        """
        row = (
            self._connection()
            .execute(
                "SELECT count(*), min(accepted_at) FROM inbox "
                "WHERE state IN ('accepted', 'running')"
            )
            .fetchone()
        )
        count, oldest = int(row[0]), row[1]
        age = None if oldest is None else max(0.0, self._clock() - float(oldest))
        return InboxBacklog(count, age)

    async def unfinished_entries(self) -> list[InboxEntry]:
        """``unfinished_inbox``, for the conversations."""
        return self.unfinished_inbox()

    async def trim_interrupted(self, session_id: str, user_turn_id: int) -> bool:
        """Make an interrupted run's transcript resumable from its last finished step.

        Keeps the user turn (row ``user_turn_id``) and every finished step after it; removes
        what follows the last point where the transcript could be sent to a model again
        (an assistant message cut off, or one whose tool calls lack results). False when the
        user turn is not in the session's live transcript any more (a ``/new`` since, or a
        compaction): the run cannot be resumed where it was.
        """
        with self._transaction("trim_interrupted") as conn:
            rows = conn.execute(
                "SELECT id, role, body FROM messages WHERE session_id = ? AND id >= ? "
                "AND compacted_at IS NULL ORDER BY id",
                (session_id, user_turn_id),
            ).fetchall()
            active = conn.execute(
                "SELECT 1 FROM active_sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            if not rows or int(rows[0][0]) != user_turn_id or active is None:
                return False
            keep = resumable_prefix(
                [Message.model_validate(json.loads(r[2])) for r in rows],
                awaiting_calls(conn, session_id),
            )
            drop = [int(r[0]) for r in rows[keep:]]
            if drop:
                conn.executemany("DELETE FROM messages WHERE id = ?", [(i,) for i in drop])
                conn.execute(
                    "UPDATE sessions SET message_count = message_count - ? WHERE session_id = ?",
                    (len(drop), session_id),
                )
            return True

    async def prune_finished(self, older_than_seconds: float) -> int:
        """Forget finished inbox rows and sent or failed outbox rows older than the cut."""
        cut = self._clock() - older_than_seconds
        with self._transaction("prune_finished") as conn:
            inbox = conn.execute(
                "DELETE FROM inbox WHERE state IN ('answered', 'failed', 'skipped') "
                "AND updated_at < ?",
                (cut,),
            ).rowcount
            outbox = conn.execute(
                "DELETE FROM outbox WHERE state != 'pending' AND updated_at < ?", (cut,)
            ).rowcount
            approvals = conn.execute(
                "DELETE FROM approvals WHERE state != 'pending' AND decided_at < ? "
                "AND NOT (state = 'always' AND grant_key IS NOT NULL)",
                (cut,),
            ).rowcount
            # A run's preview matters only while its entries may resume: gone with them.
            conn.execute(
                "DELETE FROM previews WHERE updated_at < ? AND anchor NOT IN "
                "(SELECT id FROM inbox WHERE state IN ('accepted', 'running'))",
                (cut,),
            )
            # Buttons expire in a week at most (``BUTTONS_KEPT_AT_MOST``): older records
            # would only ever refuse a press.
            conn.execute("DELETE FROM button_messages WHERE posted_at < ?", (cut,))
        return int(inbox) + int(outbox) + int(approvals)


__all__ = ["ENTRY_COLUMNS", "InboxStore", "inbound_from_json", "inbound_json", "inbox_entry"]
