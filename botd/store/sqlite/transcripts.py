"""Sessions and their append-only transcripts.

Compaction does not rewrite rows: it marks the live rows as compacted (kept for audit) and
appends the compacted view as new live rows, so ``load_transcript`` (the live rows in order)
returns the compacted transcript. The one change made to a row in place is
``rewrite_messages``: a message that must not be sent to a model again (an image the model
refused) gets its new form where it was.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...chat import storable
from ...events import Message
from ..errors import StaleCompactionError, UnknownSessionError
from ..records import SessionRecord
from .deferred import DeferredWrites

if TYPE_CHECKING:
    from ...agent.compaction import CompactionResult


_SESSION_COLUMNS = (
    "s.session_id, s.conversation_key, s.created_at, s.updated_at, s.message_count, s.summary, "
    "a.session_id IS NOT NULL, s.runs"
)
_SESSION_FROM = "sessions s LEFT JOIN active_sessions a ON a.session_id = s.session_id"


def message_json(message: Message) -> str:
    """``message`` as the JSON text the store keeps (transcripts, the inbox's user turns)."""
    # Storable whatever produced the message: one bad record would fail the group commit
    # it rides in, everyone's writes with it.
    body = json.dumps(message.model_dump(mode="json", exclude_none=True), ensure_ascii=False)
    return storable(body)


def _record(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        session_id=str(row[0]),
        conversation_key=str(row[1]),
        created_at=float(row[2]),
        updated_at=float(row[3]),
        message_count=int(row[4]),
        summary=None if row[5] is None else str(row[5]),
        active=bool(row[6]),
        runs=int(row[7]),
    )


class TranscriptStore(DeferredWrites):
    """Sessions per conversation key, and each session's transcript."""

    def _require_session(self, conn: sqlite3.Connection, session_id: str) -> None:
        row = conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,))
        if row.fetchone() is None:
            raise UnknownSessionError(session_id)

    def _insert_messages(
        self, conn: sqlite3.Connection, session_id: str, bodies: Sequence[tuple[str, str]]
    ) -> None:
        now = self._clock()
        conn.executemany(
            "INSERT INTO messages (session_id, role, body, created_at) VALUES (?, ?, ?, ?)",
            [(session_id, role, body, now) for role, body in bodies],
        )

    # --- sessions -----------------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRecord:
        self.flush_deferred()
        row = (
            self._connection()
            .execute(
                f"SELECT {_SESSION_COLUMNS} FROM {_SESSION_FROM} WHERE s.session_id = ?",
                (session_id,),
            )
            .fetchone()
        )
        if row is None:
            raise UnknownSessionError(session_id)
        return _record(row)

    def _create_session(self, conn: sqlite3.Connection, conversation_key: str) -> str:
        session_id = uuid.uuid4().hex
        now = self._clock()
        conn.execute(
            "INSERT INTO sessions (session_id, conversation_key, created_at, updated_at) "
            "VALUES (?, ?, ?, ?)",
            (session_id, conversation_key, now, now),
        )
        conn.execute(
            "INSERT INTO active_sessions (conversation_key, session_id) VALUES (?, ?) "
            "ON CONFLICT (conversation_key) DO UPDATE SET session_id = excluded.session_id",
            (conversation_key, session_id),
        )
        return session_id

    def get_or_create_session(self, conversation_key: str) -> SessionRecord:
        """The active session of ``conversation_key``, created on first use."""
        found = self.active_session(conversation_key)
        if found is not None:
            return found  # a read: no write transaction for a session that exists
        with self._transaction("get_or_create_session") as conn:
            row = conn.execute(
                "SELECT session_id FROM active_sessions WHERE conversation_key = ?",
                (conversation_key,),
            ).fetchone()
            session_id = str(row[0]) if row is not None else None
            if session_id is None:
                session_id = self._create_session(conn, conversation_key)
        return self.get_session(session_id)

    def new_session(self, conversation_key: str) -> SessionRecord:
        """Start a fresh session for ``conversation_key`` (``/new``) and make it the active one.

        The previous session and its transcript stay in the database; they are just no longer
        what ``get_or_create_session`` returns.
        """
        with self._transaction("new_session") as conn:
            session_id = self._create_session(conn, conversation_key)
        return self.get_session(session_id)

    def active_session(self, conversation_key: str) -> SessionRecord | None:
        """The session ``conversation_key`` uses now, or None before its first message."""
        self.flush_deferred()
        row = (
            self._connection()
            .execute(
                f"SELECT {_SESSION_COLUMNS} FROM {_SESSION_FROM} WHERE a.conversation_key = ?",
                (conversation_key,),
            )
            .fetchone()
        )
        return None if row is None else _record(row)

    # --- the async face (``protocols.ConversationLedger``) ---------------------------------

    async def open_session(self, conversation_key: str) -> SessionRecord:
        """``get_or_create_session``, for the conversations."""
        return self.get_or_create_session(conversation_key)

    async def start_session(self, conversation_key: str) -> SessionRecord:
        """``new_session``, for the conversations."""
        return self.new_session(conversation_key)

    async def stored_session(self, conversation_key: str) -> SessionRecord | None:
        """``active_session``, for the conversations."""
        return self.active_session(conversation_key)

    async def transcript(self, session_id: str) -> list[Message]:
        """``load_transcript``, for the conversations."""
        return self.load_transcript(session_id)

    def count_run_soon(self, session_id: str) -> None:
        """Count a run the session starts, committed lazily with the store's next transaction.

        The count survives a restart, so a restarted session numbers its runs on from it. A
        crash before it committed lost the run's start with it: that run is run again, under
        the same number.
        """
        self._defer(
            "count_run",
            lambda conn: conn.execute(
                "UPDATE sessions SET runs = runs + 1 WHERE session_id = ?", (session_id,)
            ),
            lazy=True,
        )

    # --- transcripts --------------------------------------------------------------------------

    def append_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages (user, assistant, tool results: everything of a run) in order."""
        bodies = [(message.role, message_json(message)) for message in messages]
        with self._transaction("append_messages") as conn:
            self._append(conn, session_id, bodies)

    def append_messages_soon(self, session_id: str, messages: Sequence[Message]) -> None:
        """``append_messages``, committed with the store's next transaction (see ``deferred``)."""
        bodies = [(message.role, message_json(message)) for message in messages]
        self._defer("append_messages_soon", lambda conn: self._append(conn, session_id, bodies))

    def append_messages_later(
        self, session_id: str, messages: Sequence[Message]
    ) -> asyncio.Future[None]:
        """``append_messages`` in the store's next transaction, which may be a moment away (a
        lazy write); the future tells once it committed, or what failed it. Its own failure
        (text SQLite cannot take) is undone alone: the rest of that transaction commits."""
        bodies = [(message.role, message_json(message)) for message in messages]
        return self._commit_later(
            "append_messages_soon", lambda conn: self._append(conn, session_id, bodies)
        )

    def _append(
        self, conn: sqlite3.Connection, session_id: str, bodies: Sequence[tuple[str, str]]
    ) -> None:
        cursor = conn.execute(
            "UPDATE sessions SET updated_at = ?, message_count = message_count + ? "
            "WHERE session_id = ?",
            (self._clock(), len(bodies), session_id),
        )
        if cursor.rowcount == 0:
            raise UnknownSessionError(session_id)
        self._insert_messages(conn, session_id, bodies)

    def _live_rows(self, conn: sqlite3.Connection, session_id: str) -> list[tuple[int, str, str]]:
        rows = conn.execute(
            "SELECT id, role, body FROM messages "
            "WHERE session_id = ? AND compacted_at IS NULL ORDER BY id",
            (session_id,),
        ).fetchall()
        return [(int(row[0]), str(row[1]), str(row[2])) for row in rows]

    def load_transcript(self, session_id: str) -> list[Message]:
        """The live transcript, oldest first (after a compaction: the summary, then the rest)."""
        self.flush_deferred()
        conn = self._connection()
        self._require_session(conn, session_id)
        return [
            Message.model_validate(json.loads(body))
            for _, _, body in self._live_rows(conn, session_id)
        ]

    async def rewrite_messages(
        self, session_id: str, rewrite: Callable[[Message], Message | None]
    ) -> int:
        """Give the live messages ``rewrite`` changes their new form, in one transaction;
        returns how many changed.

        ``rewrite`` gets each live message and returns its replacement, or None to leave it
        as it is. A changed message keeps its row (its place in the transcript, and the id
        an inbox row names its user turn by). It rides in the next group commit, after the
        records queued before it, so a message a run wrote a moment ago is rewritten too.
        Compacted rows stay as they were.
        """

        def write(conn: sqlite3.Connection) -> int:
            self._require_session(conn, session_id)
            changed: list[tuple[str, int]] = []
            for row_id, _, body in self._live_rows(conn, session_id):
                replacement = rewrite(Message.model_validate(json.loads(body)))
                if replacement is not None:
                    changed.append((message_json(replacement), row_id))
            conn.executemany("UPDATE messages SET body = ? WHERE id = ?", changed)
            if changed:
                conn.execute(
                    "UPDATE sessions SET updated_at = ? WHERE session_id = ?",
                    (self._clock(), session_id),
                )
            return len(changed)

        return await self._commit("rewrite_messages", write)

    def replace_transcript_prefix(
        self,
        session_id: str,
        prefix_count: int,
        replacement: Sequence[Message],
        *,
        expected_rest: Sequence[Message] | None = None,
        summary: str | None = None,
    ) -> None:
        """Replace the first ``prefix_count`` live messages by ``replacement``.

        The replaced rows are kept, marked compacted. When ``expected_rest`` is given, the
        live messages right after the prefix must equal it, or ``StaleCompactionError`` is
        raised and nothing changes: it catches a replacement computed from an outdated
        transcript. Messages appended after ``expected_rest`` are allowed and stay at the end.
        ``summary`` is recorded on the session.
        """
        if prefix_count < 0:
            raise ValueError(f"prefix_count must be >= 0, got {prefix_count}")
        with self._transaction("replace_transcript_prefix") as conn:
            self._replace_prefix(
                conn, session_id, prefix_count, replacement, expected_rest, summary
            )

    def _replace_prefix(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        prefix_count: int,
        replacement: Sequence[Message],
        expected_rest: Sequence[Message] | None,
        summary: str | None,
    ) -> None:
        self._require_session(conn, session_id)
        live = self._live_rows(conn, session_id)
        if prefix_count > len(live):
            raise StaleCompactionError(
                f"session {session_id}: cannot replace {prefix_count} messages, "
                f"the transcript has {len(live)}"
            )
        rest = live[prefix_count:]
        if expected_rest is not None:
            stored = [json.loads(body) for _, _, body in rest[: len(expected_rest)]]
            expected = [json.loads(message_json(message)) for message in expected_rest]
            if stored != expected:
                raise StaleCompactionError(
                    f"session {session_id}: the transcript changed since it was compacted"
                )
        now = self._clock()
        conn.execute(
            "UPDATE messages SET compacted_at = ? WHERE session_id = ? AND compacted_at IS NULL",
            (now, session_id),
        )
        # The rest is re-appended after the replacement so that id order stays the
        # transcript order; the originals remain as compacted rows.
        bodies: list[tuple[str, str]] = [
            (message.role, message_json(message)) for message in replacement
        ]
        bodies += [(role, body) for _, role, body in rest]
        self._insert_messages(conn, session_id, bodies)
        conn.execute(
            "UPDATE sessions SET message_count = ?, updated_at = ?, "
            "summary = COALESCE(?, summary) WHERE session_id = ?",
            (len(bodies), now, summary, session_id),
        )

    async def compact(self, session_id: str, result: CompactionResult) -> None:
        """Persist a compaction: its summary replaces the messages it summarized, in the next
        group commit (after the records queued before it).

        Raises ``StaleCompactionError`` when the stored transcript no longer matches what
        ``result`` was computed from.
        """
        if result.compacted_count < 0:
            raise ValueError(f"prefix_count must be >= 0, got {result.compacted_count}")
        await self._commit(
            "compact",
            lambda conn: self._replace_prefix(
                conn,
                session_id,
                result.compacted_count,
                result.messages[:1],
                result.kept,
                result.summary,
            ),
        )
