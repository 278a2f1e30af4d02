"""The tool status each conversation's run shows (``StatusLines``): kept while it shows,
forgotten once it was removed, so a resumed run removes what a crashed one left behind."""

from __future__ import annotations

import sqlite3

from ..records import StatusKind, StatusLine
from ..targets import target_from_json, target_json
from .deferred import DeferredWrites


class StatusLineStore(DeferredWrites):
    """The ``status_lines`` table (see the module docstring)."""

    async def keep_status_line(self, conversation_key: str, line: StatusLine) -> None:
        params = (conversation_key, line.kind, line.message_id, target_json(line.target))
        now = self._clock()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO status_lines (conversation_key, kind, message_id, target, "
                "created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (*params, now),
            )

        await self._commit("keep_status_line", write)

    async def status_lines(self, conversation_key: str) -> list[StatusLine]:
        self.flush_deferred()
        rows = (
            self._connection()
            .execute(
                "SELECT kind, target, message_id FROM status_lines WHERE conversation_key = ? "
                "ORDER BY created_at, message_id",
                (conversation_key,),
            )
            .fetchall()
        )
        return [_line(row) for row in rows]

    async def forget_status_line(
        self, conversation_key: str, kind: StatusKind, message_id: str
    ) -> None:
        params = (conversation_key, kind, message_id)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM status_lines WHERE conversation_key = ? AND kind = ? "
                "AND message_id = ?",
                params,
            )

        await self._commit("forget_status_line", write)


def _line(row: tuple[object, ...]) -> StatusLine:
    kind: StatusKind = "assistant" if row[0] == "assistant" else "message"
    return StatusLine(kind, target_from_json(str(row[1])), str(row[2]))


__all__ = ["StatusLineStore"]
