"""Requests to approve tool calls on PostgreSQL (``ApprovalLedger``), as the SQLite store
means them (``botd/store/sqlite/approvals.py``). A decision is a fact about a press, whoever
owns the conversation now: it is written unfenced (``base.UNFENCED``), and the update takes
only a pending row, so of two nodes deciding at once exactly one does."""

from __future__ import annotations

from collections.abc import Sequence

from ...chat import MessageRef
from ..records import ApprovalState, StoredApproval
from ..rows import APPROVAL_COLUMNS, approval_from_row, approval_row, refs_json
from .base import Conn, PostgresBase

_PLACES = ", ".join(["%s"] * len(APPROVAL_COLUMNS.split(",")))


class ApprovalStore(PostgresBase):
    """The approvals table (see the module docstring)."""

    async def open_approval(self, approval: StoredApproval) -> StoredApproval:
        params = approval_row(approval)

        async def write(conn: Conn) -> StoredApproval:
            await conn.execute(
                f"INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES ({_PLACES}) "
                "ON CONFLICT (key) DO NOTHING",
                params,
            )
            cur = await conn.execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE key = %s", (approval.key,)
            )
            row = await cur.fetchone()
            assert row is not None
            return approval_from_row(row)

        return await self._commit("open_approval", write)

    async def approval_posted(self, key: str, messages: Sequence[MessageRef]) -> None:
        params = (refs_json(messages), key)

        async def write(conn: Conn) -> None:
            await conn.execute("UPDATE approvals SET messages = %s WHERE key = %s", params)

        await self._commit("approval_posted", write)

    async def approval(self, key: str) -> StoredApproval | None:
        return await self._approval_where("key", key)

    async def approval_for_token(self, token: str) -> StoredApproval | None:
        return await self._approval_where("token", token)

    async def _approval_where(self, column: str, value: str) -> StoredApproval | None:
        async def read(conn: Conn) -> StoredApproval | None:
            cur = await conn.execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE {column} = %s", (value,)
            )
            row = await cur.fetchone()
            return None if row is None else approval_from_row(row)

        return await self._read(read)

    async def decide_approval(
        self, token: str, state: ApprovalState, decided_by: str = ""
    ) -> StoredApproval | None:
        params = (state, decided_by, self._clock(), token)

        async def write(conn: Conn) -> StoredApproval | None:
            cur = await conn.execute(
                "UPDATE approvals SET state = %s, decided_by = %s, decided_at = %s "
                f"WHERE token = %s AND state = 'pending' RETURNING {APPROVAL_COLUMNS}",
                params,
            )
            row = await cur.fetchone()
            return None if row is None else approval_from_row(row)

        return await self._commit("decide_approval", write)

    async def granted(self, grant: str) -> StoredApproval | None:
        async def read(conn: Conn) -> StoredApproval | None:
            cur = await conn.execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals "
                "WHERE grant_key = %s AND state = 'always' ORDER BY created_at LIMIT 1",
                (grant,),
            )
            row = await cur.fetchone()
            return None if row is None else approval_from_row(row)

        return await self._read(read)

    async def grants(self, chat: str) -> Sequence[StoredApproval]:
        async def read(conn: Conn) -> list[StoredApproval]:
            cur = await conn.execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals "
                "WHERE grant_chat = %s AND state = 'always' ORDER BY created_at, key",
                (chat,),
            )
            return [approval_from_row(row) for row in await cur.fetchall()]

        return await self._read(read)

    async def revoke_grant(self, token: str, revoked_by: str) -> bool:
        params = (revoked_by, self._clock(), token)

        async def write(conn: Conn) -> bool:
            cur = await conn.execute(
                "UPDATE approvals SET state = 'revoked', decided_by = %s, decided_at = %s "
                "WHERE token = %s AND state = 'always' AND grant_key IS NOT NULL",
                params,
            )
            return cur.rowcount > 0

        return await self._commit("revoke_grant", write)


async def awaiting_calls(conn: Conn, session_id: str) -> set[str]:
    """The tool call ids of ``session_id`` that have a request to approve them."""
    cur = await conn.execute("SELECT call_id FROM approvals WHERE session_id = %s", (session_id,))
    return {str(row[0]) for row in await cur.fetchall()}


__all__ = ["ApprovalStore", "awaiting_calls"]
