"""Requests to approve tool calls (``ApprovalLedger``): one row per gated call.

A row is written when its run asks (``open_approval``, which finds the row a resumed run's
interrupted attempt wrote instead), its messages are recorded once posted, and a press or
the run's timeout decides it once: the update takes only a pending row, so of two decisions
the first wins. ``trim_interrupted`` (``inbox``) reads a session's rows to keep the
unanswered calls a resumed run goes on with.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ...chat import MessageRef
from ..records import ApprovalState, StoredApproval
from ..rows import APPROVAL_COLUMNS, approval_from_row, approval_row, refs_json
from .deferred import DeferredWrites

_PLACES = ", ".join(["?"] * len(APPROVAL_COLUMNS.split(",")))


class ApprovalStore(DeferredWrites):
    """The approvals table (see the module docstring)."""

    async def open_approval(self, approval: StoredApproval) -> StoredApproval:
        params = approval_row(approval)

        def write(conn: sqlite3.Connection) -> StoredApproval:
            conn.execute(
                f"INSERT INTO approvals ({APPROVAL_COLUMNS}) "
                f"VALUES ({_PLACES}) ON CONFLICT (key) DO NOTHING",
                params,
            )
            row = conn.execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE key = ?", (approval.key,)
            ).fetchone()
            return approval_from_row(row)

        return await self._commit("open_approval", write)

    async def approval_posted(self, key: str, messages: Sequence[MessageRef]) -> None:
        params = (refs_json(messages), key)
        await self._commit(
            "approval_posted",
            lambda conn: conn.execute("UPDATE approvals SET messages = ? WHERE key = ?", params),
        )

    async def approval(self, key: str) -> StoredApproval | None:
        return self._approval_where("key", key)

    async def approval_for_token(self, token: str) -> StoredApproval | None:
        return self._approval_where("token", token)

    def _approval_where(self, column: str, value: str) -> StoredApproval | None:
        self.flush_deferred()
        row = (
            self._connection()
            .execute(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE {column} = ?", (value,))
            .fetchone()
        )
        return None if row is None else approval_from_row(row)

    async def decide_approval(
        self, token: str, state: ApprovalState, decided_by: str = ""
    ) -> StoredApproval | None:
        params = (state, decided_by, self._clock(), token)

        def write(conn: sqlite3.Connection) -> StoredApproval | None:
            row = conn.execute(
                "UPDATE approvals SET state = ?, decided_by = ?, decided_at = ? "
                f"WHERE token = ? AND state = 'pending' RETURNING {APPROVAL_COLUMNS}",
                params,
            ).fetchone()
            return None if row is None else approval_from_row(row)

        return await self._commit("decide_approval", write)

    async def granted(self, grant: str) -> StoredApproval | None:
        self.flush_deferred()
        row = (
            self._connection()
            .execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals "
                "WHERE grant_key = ? AND state = 'always' ORDER BY created_at LIMIT 1",
                (grant,),
            )
            .fetchone()
        )
        return None if row is None else approval_from_row(row)

    async def grants(self, chat: str) -> Sequence[StoredApproval]:
        self.flush_deferred()
        rows = self._connection().execute(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals "
            "WHERE grant_chat = ? AND state = 'always' ORDER BY created_at, key",
            (chat,),
        )
        return [approval_from_row(row) for row in rows]

    async def revoke_grant(self, token: str, revoked_by: str) -> bool:
        params = (revoked_by, self._clock(), token)

        def write(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE approvals SET state = 'revoked', decided_by = ?, decided_at = ? "
                "WHERE token = ? AND state = 'always' AND grant_key IS NOT NULL",
                params,
            )
            return cursor.rowcount > 0

        return await self._commit("revoke_grant", write)


def awaiting_calls(conn: sqlite3.Connection, session_id: str) -> set[str]:
    """The tool call ids of ``session_id`` that have a request to approve them."""
    rows = conn.execute("SELECT call_id FROM approvals WHERE session_id = ?", (session_id,))
    return {str(row[0]) for row in rows}


__all__ = ["ApprovalStore", "awaiting_calls"]
