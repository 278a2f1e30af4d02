"""The ACP channel's sessions on PostgreSQL (``EditorSessions``), as the SQLite store means
them (``botd/store/sqlite/editor_sessions.py``): kept so ``session/list`` lists them after a
restart, and a conversation's accepted messages, sent pieces and what its runs added to the
transcript read back for ``session/load`` to replay. A session is the channel's, not a
conversation's run: its writes take no lease fence (any node an editor is connected to
keeps its own editor's sessions)."""

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
from .base import Conn, PostgresBase


class EditorSessionStore(PostgresBase):
    """The ``editor_sessions`` table, and the replay read (see the module docstring)."""

    async def keep_editor_session(
        self, channel: str, session_id: str, cwd: str, *, title: str | None = None
    ) -> None:
        now = self._clock()

        async def write(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO editor_sessions (channel, session_id, cwd, title, created_at, "
                "updated_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (channel, session_id) "
                "DO UPDATE SET cwd = excluded.cwd, updated_at = excluded.updated_at, "
                "title = coalesce(editor_sessions.title, excluded.title)",
                (channel, session_id, cwd, title, now, now),
            )

        await self._commit("keep_editor_session", write)

    async def editor_session(self, channel: str, session_id: str) -> EditorSession | None:
        async def read(conn: Conn) -> EditorSession | None:
            cur = await conn.execute(
                f"SELECT {EDITOR_SESSION_COLUMNS} FROM editor_sessions "
                "WHERE channel = %s AND session_id = %s",
                (channel, session_id),
            )
            row = await cur.fetchone()
            return None if row is None else editor_session_from_row(row)

        return await self._read(read)

    async def editor_sessions(
        self,
        channel: str,
        *,
        cwd: str | None = None,
        after: EditorSession | None = None,
        limit: int,
    ) -> list[EditorSession]:
        query, params = editor_sessions_query(
            channel, cwd=cwd, after=after, limit=limit, placeholder="%s", byte_order=' COLLATE "C"'
        )

        async def read(conn: Conn) -> list[EditorSession]:
            cur = await conn.execute(query, params)
            return [editor_session_from_row(row) for row in await cur.fetchall()]

        return await self._read(read)

    async def conversation_said(self, conversation_key: str) -> list[SaidLine]:
        async def read(conn: Conn) -> list[SaidLine]:
            cur = await conn.execute(
                "SELECT 'user', message, accepted_at, id FROM inbox WHERE conversation_key = %s "
                "UNION ALL "
                "SELECT 'bot', o.text, o.created_at, o.anchor FROM outbox o JOIN inbox i "
                "ON o.anchor = i.id WHERE i.conversation_key = %s AND o.state = 'sent'",
                (conversation_key, conversation_key),
            )
            return said_lines(await cur.fetchall())

        return await self._read(read)

    async def conversation_runs(self, conversation_key: str) -> list[RunSteps]:
        async def read(conn: Conn) -> list[RunSteps]:
            cur = await conn.execute(RUN_ENTRIES_QUERY.format(p="%s"), (conversation_key,))
            entries = await cur.fetchall()
            if not entries:
                return []
            cur = await conn.execute(RUN_MESSAGES_QUERY.format(p="%s"), (conversation_key,))
            return run_steps(entries, await cur.fetchall())

        return await self._read(read)


__all__ = ["EditorSessionStore"]
