"""The ACP channel's sessions (``EditorSessions``): ``editor_sessions`` keeps each session an
editor made, with its cwd, title and last change, so that ``session/list`` lists it after a
restart; ``conversation_said`` reads a conversation's accepted messages and sent pieces back
from the inbox and the outbox, and ``conversation_runs`` what its runs added to the
transcript (thinking, tool calls, their results), for ``session/load`` to replay.

The inbox has no index by conversation for finished rows: a replay reads the inbox (a
retention's worth of rows) once per ``session/load``, which is rare, rather than every
accept paying for one more index.
"""

from __future__ import annotations

from ..records import EditorSession, RunSteps, SaidLine
from ..rows import (
    EDITOR_SESSION_COLUMNS,
    RUN_ENTRIES_QUERY,
    RUN_MESSAGES_QUERY,
    editor_session_from_row,
    editor_sessions_query,
    run_steps,
    said_lines,
)
from .deferred import DeferredWrites


class EditorSessionStore(DeferredWrites):
    """The ``editor_sessions`` table, and the replay read (see the module docstring)."""

    async def keep_editor_session(
        self, channel: str, session_id: str, cwd: str, *, title: str | None = None
    ) -> None:
        now = self._clock()
        with self._transaction("keep_editor_session") as conn:
            conn.execute(
                "INSERT INTO editor_sessions (channel, session_id, cwd, title, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (channel, session_id) DO "
                "UPDATE SET cwd = excluded.cwd, updated_at = excluded.updated_at, "
                "title = coalesce(editor_sessions.title, excluded.title)",
                (channel, session_id, cwd, title, now, now),
            )

    async def editor_session(self, channel: str, session_id: str) -> EditorSession | None:
        row = (
            self._connection()
            .execute(
                f"SELECT {EDITOR_SESSION_COLUMNS} FROM editor_sessions "
                "WHERE channel = ? AND session_id = ?",
                (channel, session_id),
            )
            .fetchone()
        )
        return None if row is None else editor_session_from_row(row)

    async def editor_sessions(
        self,
        channel: str,
        *,
        cwd: str | None = None,
        after: EditorSession | None = None,
        limit: int,
    ) -> list[EditorSession]:
        query, params = editor_sessions_query(
            channel, cwd=cwd, after=after, limit=limit, placeholder="?"
        )
        rows = self._connection().execute(query, params).fetchall()
        return [editor_session_from_row(row) for row in rows]

    async def conversation_said(self, conversation_key: str) -> list[SaidLine]:
        self.flush_deferred()  # a piece marked sent a moment ago is read as sent
        rows = (
            self._connection()
            .execute(
                "SELECT 'user', message, accepted_at, id FROM inbox WHERE conversation_key = ? "
                "UNION ALL "
                "SELECT 'bot', o.text, o.created_at, o.anchor FROM outbox o JOIN inbox i "
                "ON o.anchor = i.id WHERE i.conversation_key = ? AND o.state = 'sent' "
                "ORDER BY 3",
                (conversation_key, conversation_key),
            )
            .fetchall()
        )
        return said_lines(rows)

    async def conversation_runs(self, conversation_key: str) -> list[RunSteps]:
        self.flush_deferred()  # a step written a moment ago is read
        conn = self._connection()
        entries = conn.execute(RUN_ENTRIES_QUERY.format(p="?"), (conversation_key,)).fetchall()
        if not entries:
            return []
        rows = conn.execute(RUN_MESSAGES_QUERY.format(p="?"), (conversation_key,)).fetchall()
        return run_steps(entries, rows)


__all__ = ["EditorSessionStore"]
