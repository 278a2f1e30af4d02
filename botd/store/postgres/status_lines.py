"""The tool status each conversation's run shows, on PostgreSQL: the SQLite store's
``status_lines`` (``botd/store/sqlite/status_lines.py``) method by method."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..records import StatusKind, StatusLine
from ..targets import target_from_json, target_json
from .base import Conn, PostgresBase


class StatusLineStore(PostgresBase):
    """The ``status_lines`` table (see the module docstring)."""

    async def keep_status_line(self, conversation_key: str, line: StatusLine) -> None:
        params = (
            conversation_key,
            line.kind,
            line.message_id,
            target_json(line.target),
            self._clock(),
        )

        async def write(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO status_lines (conversation_key, kind, message_id, target, "
                "created_at) VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                params,
            )

        await self._commit("keep_status_line", write)

    async def status_lines(self, conversation_key: str) -> list[StatusLine]:
        async def read(conn: Conn) -> list[StatusLine]:
            cur = await conn.execute(
                "SELECT kind, target, message_id FROM status_lines WHERE conversation_key = %s "
                "ORDER BY created_at, message_id",
                (conversation_key,),
            )
            return [_line(row) for row in await cur.fetchall()]

        return await self._read(read)

    async def forget_status_line(
        self, conversation_key: str, kind: StatusKind, message_id: str
    ) -> None:
        params = (conversation_key, kind, message_id)

        async def write(conn: Conn) -> None:
            await conn.execute(
                "DELETE FROM status_lines WHERE conversation_key = %s AND kind = %s "
                "AND message_id = %s",
                params,
            )

        await self._commit("forget_status_line", write)


def _line(row: Sequence[Any]) -> StatusLine:
    kind: StatusKind = "assistant" if row[0] == "assistant" else "message"
    return StatusLine(kind, target_from_json(str(row[1])), str(row[2]))


__all__ = ["StatusLineStore"]
