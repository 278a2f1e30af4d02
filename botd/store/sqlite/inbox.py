"""The durable inbox: every accepted message, and what became of it.

A message is *accepted* when ``accept_inbound`` has written it in the same transaction as its
dedupe ids; only then may the platform be told it arrived (Telegram's offset, Slack's ack).
Each row then goes ``accepted`` -> ``running`` (``start_inbox_run``, which writes the run's user
turn to the transcript in the same transaction) -> ``answered``, ``failed`` or ``skipped``
(``finish_inbox``). A row still ``accepted`` or ``running`` when botd starts was not answered:
``unfinished_inbox`` lists them for the sessions to resume, in arrival order.

A running row keeps the transcript row id of the user turn it wrote. ``trim_interrupted``
makes such a transcript resumable: it keeps the user turn and every finished step after it
(assistant messages whose tool calls all have results, and those results) and removes what
an interrupted step left behind, so the model can be asked again from there.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from ...chat import InboundMessage
from ...events import Message, ToolCallContent
from ..records import FINISHED_STATES, InboxBacklog, InboxEntry, InboxState
from ..targets import attachments_data, attachments_from_data, target_data, target_from_data
from .chatter import consume_chatter as _consume_chatter
from .transcripts import TranscriptStore, message_json

_INBOUND_FIELDS = tuple(f.name for f in fields(InboundMessage))


def inbound_json(message: InboundMessage) -> str:
    """``message`` as the inbox keeps it (its ``inbox_id`` left out)."""
    data: dict[str, Any] = {
        name: getattr(message, name)
        for name in _INBOUND_FIELDS
        if name not in ("inbox_id", "attachments")
    }
    target = message.target
    if target is not None:
        data["target"] = target_data(target)
    if message.attachments:
        data["attachments"] = attachments_data(message.attachments)
    return json.dumps(data, ensure_ascii=False)


def inbound_from_json(text: str, inbox_id: int | None = None) -> InboundMessage:
    data: dict[str, Any] = json.loads(text)
    target = data.pop("target", None)
    data["dedupe_keys"] = tuple(data.get("dedupe_keys") or ())
    data["attachments"] = attachments_from_data(data.get("attachments"))
    data["inbox_id"] = inbox_id
    return InboundMessage(**data, target=None if target is None else target_from_data(target))


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
    ) -> int | None:
        """Record the message's dedupe ids and the message itself, atomically, and wait for
        the commit (grouped with other writes of the moment, see ``deferred``).

        Returns the new inbox id, or None when any id was seen before (then only the ids are
        recorded, so a later form of the repeat is caught too). ``consume_chatter``
        (conversation key, last row id) deletes the kept chatter the message carries, in the
        same transaction as the message is accepted.
        """
        unique = list(dict.fromkeys(keys))
        if not unique:
            raise ValueError("accept_inbound needs at least one key")
        now = self._clock()
        params = (channel, message.conversation_key, inbound_json(message), now, now)

        def write(conn: sqlite3.Connection) -> int | None:
            inserted = 0
            for key in unique:
                inserted += conn.execute(
                    "INSERT OR IGNORE INTO inbound_seen (channel, message_id, seen_at) "
                    "VALUES (?, ?, ?)",
                    (channel, key, now),
                ).rowcount
            if inserted < len(unique):
                return None  # a repeat: its ids are recorded, the message is not
            cursor = conn.execute(
                "INSERT INTO inbox (channel, conversation_key, message, state, accepted_at, "
                "updated_at) VALUES (?, ?, ?, 'accepted', ?, ?)",
                params,
            )
            assert cursor.lastrowid is not None
            if consume_chatter is not None:
                _consume_chatter(conn, *consume_chatter)
            return int(cursor.lastrowid)

        return await self._commit("accept_inbound", write)

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
                "SELECT id, message, state, session_id, user_turn_id, attempts FROM inbox "
                "WHERE state IN ('accepted', 'running') ORDER BY id"
            )
            .fetchall()
        )
        return [
            InboxEntry(
                id=int(row[0]),
                message=inbound_from_json(row[1], int(row[0])),
                state=row[2],
                session_id=row[3],
                user_turn_id=None if row[4] is None else int(row[4]),
                attempts=int(row[5]),
            )
            for row in rows
        ]

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
            keep = _clean_prefix([Message.model_validate(json.loads(r[2])) for r in rows])
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
        return int(inbox) + int(outbox)


def _clean_prefix(messages: Sequence[Message]) -> int:
    """How many of ``messages`` (a user turn, then a run's steps) a model can continue from:
    up to the last message that is not an assistant's and leaves no tool call unanswered."""
    keep = 1
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "assistant":
            content = message.content if isinstance(message.content, list) else []
            open_calls = {b.id for b in content if isinstance(b, ToolCallContent)}
            if not open_calls or message.stop_reason not in (None, "tool_use", "toolUse"):
                # A finished answer is regenerated with the rest; a cut one is dropped.
                open_calls = {"<answer>"}
            continue
        if message.role == "tool_result" and message.tool_call_id is not None:
            open_calls.discard(message.tool_call_id)
        if not open_calls:
            keep = index + 1
    return keep


__all__ = ["InboxStore", "inbound_from_json"]
