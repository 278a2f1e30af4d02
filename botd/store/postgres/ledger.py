"""The conversations' ledger on PostgreSQL: sessions and transcripts, inbox entries and
outbox pieces (``ConversationLedger``), with the SQLite store's meaning method by method
(``botd/store/sqlite/transcripts.py``, ``inbox.py``, ``outbox.py`` say what each does).

What differs is only how: a run's start (its user turn written, its entries marked
running) is one statement, so it pipelines with the other records of its batch; a piece
written before it is sent (``outbox_add``) and a transcript appended for a caller that waits
(``append_messages_later``) are each one statement whose rows give the result
(``batch.Statement``), sent in their batch's one query with its start and its commit; the
unfinished entries come in the order of their conversations' ``seq``, which is the order
their accepts committed (``accept_inbound``), and conversations by their oldest entry.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from psycopg.rows import TupleRow

from ...chat import Button, MessageRef, Target
from ...events import Message
from ..errors import StaleCompactionError, UnknownSessionError
from ..records import (
    FINISHED_STATES,
    InboxBacklog,
    InboxEntry,
    InboxState,
    OutboxEntry,
    SessionRecord,
    StoredPreview,
)
from ..rows import (
    OUTBOX_COLUMNS,
    buttons_json,
    inbound_from_json,
    media_json,
    message_from_json,
    message_json,
    outbox_entry_from_row,
    preview_from_row,
    preview_refs_json,
    resumable_prefix,
)
from ..targets import target_json
from .approvals import awaiting_calls
from .base import Conn, PostgresBase
from .batch import Statement

if TYPE_CHECKING:
    from ...agent.compaction import CompactionResult

_SESSION = (
    "SELECT s.session_id, s.conversation_key, s.created_at, s.updated_at, s.message_count, "
    "s.summary, a.session_id IS NOT NULL, s.runs "
    "FROM sessions s LEFT JOIN active_sessions a ON a.session_id = s.session_id "
)


def _session(row: Sequence[Any]) -> SessionRecord:
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


def _first_int(rows: list[TupleRow]) -> int:
    """The one value a statement returned (an id ``RETURNING``)."""
    [(value, *_)] = rows
    return int(value)


async def _require_session(conn: Conn, session_id: str) -> None:
    cur = await conn.execute("SELECT 1 FROM sessions WHERE session_id = %s", (session_id,))
    if await cur.fetchone() is None:
        raise UnknownSessionError(session_id)


async def _live_rows(conn: Conn, session_id: str) -> list[tuple[int, str, str]]:
    cur = await conn.execute(
        "SELECT id, role, body FROM messages WHERE session_id = %s AND compacted_at IS NULL "
        "ORDER BY id",
        (session_id,),
    )
    return [(int(r[0]), str(r[1]), str(r[2])) for r in await cur.fetchall()]


class LedgerStore(PostgresBase):
    """Sessions, transcripts, the inbox's entries and the outbox's pieces."""

    # --- sessions ---------------------------------------------------------------------------

    async def _session_by_id(self, session_id: str) -> SessionRecord:
        async def read(conn: Conn) -> SessionRecord:
            cur = await conn.execute(_SESSION + "WHERE s.session_id = %s", (session_id,))
            row = await cur.fetchone()
            if row is None:
                raise UnknownSessionError(session_id)
            return _session(row)

        return await self._read(read, after_queued=False)

    async def _create_session(self, conn: Conn, conversation_key: str) -> str:
        session_id = uuid.uuid4().hex
        now = self._clock()
        await conn.execute(
            "INSERT INTO sessions (session_id, conversation_key, created_at, updated_at) "
            "VALUES (%s, %s, %s, %s)",
            (session_id, conversation_key, now, now),
        )
        await conn.execute(
            "INSERT INTO active_sessions (conversation_key, session_id) VALUES (%s, %s) "
            "ON CONFLICT (conversation_key) DO UPDATE SET session_id = excluded.session_id",
            (conversation_key, session_id),
        )
        return session_id

    async def stored_session(self, conversation_key: str) -> SessionRecord | None:
        """The active session of the conversation, if it has one (nothing is created)."""

        async def read(conn: Conn) -> SessionRecord | None:
            cur = await conn.execute(
                _SESSION + "WHERE a.conversation_key = %s", (conversation_key,)
            )
            row = await cur.fetchone()
            return None if row is None else _session(row)

        return await self._read(read)

    async def open_session(self, conversation_key: str) -> SessionRecord:
        """The conversation's active session, created when it has none."""
        found = await self.stored_session(conversation_key)
        if found is not None:
            return found

        async def write(conn: Conn) -> str:
            cur = await conn.execute(
                "SELECT session_id FROM active_sessions WHERE conversation_key = %s",
                (conversation_key,),
            )
            row = await cur.fetchone()
            if row is not None:
                return str(row[0])
            return await self._create_session(conn, conversation_key)

        return await self._session_by_id(await self._commit("get_or_create_session", write))

    async def start_session(self, conversation_key: str) -> SessionRecord:
        """A fresh session for the conversation (``/new``), made its active one."""
        session_id = await self._commit(
            "new_session", lambda conn: self._create_session(conn, conversation_key)
        )
        return await self._session_by_id(session_id)

    def count_run_soon(self, session_id: str) -> None:
        async def write(conn: Conn) -> None:
            await conn.execute(
                "UPDATE sessions SET runs = runs + 1 WHERE session_id = %s", (session_id,)
            )

        self._defer("count_run", write, lazy=True)

    # --- transcripts ------------------------------------------------------------------------

    async def transcript(self, session_id: str) -> list[Message]:
        """The live transcript, oldest first."""

        async def read(conn: Conn) -> list[Message]:
            await _require_session(conn, session_id)
            return [message_from_json(body) for _, _, body in await _live_rows(conn, session_id)]

        return await self._read(read)

    async def _append(self, conn: Conn, session_id: str, bodies: Sequence[tuple[str, str]]) -> None:
        """Append ``bodies`` as a record (in a pipeline nothing is read: the messages'
        foreign key refuses an unknown session instead)."""
        now = self._clock()
        await conn.execute(
            "UPDATE sessions SET updated_at = %s, message_count = message_count + %s "
            "WHERE session_id = %s",
            (now, len(bodies), session_id),
        )
        async with conn.cursor() as insert:
            await insert.executemany(
                "INSERT INTO messages (session_id, role, body, created_at) VALUES (%s, %s, %s, %s)",
                [(session_id, role, body, now) for role, body in bodies],
            )

    def _checked_append(
        self, session_id: str, bodies: Sequence[tuple[str, str]]
    ) -> Statement[None]:
        """Append ``bodies`` in one statement (``batch.Statement``: it rides in its batch's
        query), ``UnknownSessionError`` (and nothing written) for an unknown session."""

        def counted(rows: list[TupleRow]) -> None:
            if _first_int(rows) == 0:
                raise UnknownSessionError(session_id)

        return Statement(
            """
            WITH counted AS (
                UPDATE sessions
                   SET updated_at = %(now)s, message_count = message_count + %(count)s
                 WHERE session_id = %(session)s
                RETURNING session_id
            ), added AS (
                INSERT INTO messages (session_id, role, body, created_at)
                SELECT counted.session_id, t.role, t.body, %(now)s
                  FROM counted, unnest(%(roles)s::text[], %(bodies)s::text[])
                       WITH ORDINALITY AS t(role, body, n)
                 ORDER BY t.n
            )
            SELECT count(*) FROM counted
            """,
            {
                "now": self._clock(),
                "count": len(bodies),
                "session": session_id,
                "roles": [role for role, _ in bodies],
                "bodies": [body for _, body in bodies],
            },
            counted,
        )

    def append_messages_soon(self, session_id: str, messages: Sequence[Message]) -> None:
        bodies = [(m.role, message_json(m)) for m in messages]
        self._defer("append_messages_soon", lambda conn: self._append(conn, session_id, bodies))

    def append_messages_later(
        self, session_id: str, messages: Sequence[Message]
    ) -> asyncio.Future[None]:
        bodies = [(m.role, message_json(m)) for m in messages]
        return self._commit_later("append_messages_soon", self._checked_append(session_id, bodies))

    async def rewrite_messages(
        self, session_id: str, rewrite: Callable[[Message], Message | None]
    ) -> int:
        """Give the live messages ``rewrite`` changes their new form, in place; how many."""

        async def write(conn: Conn) -> int:
            await _require_session(conn, session_id)
            changed: list[tuple[str, int]] = []
            for row_id, _, body in await _live_rows(conn, session_id):
                replacement = rewrite(message_from_json(body))
                if replacement is not None:
                    changed.append((message_json(replacement), row_id))
            if changed:
                async with conn.cursor() as cur:
                    await cur.executemany("UPDATE messages SET body = %s WHERE id = %s", changed)
                await conn.execute(
                    "UPDATE sessions SET updated_at = %s WHERE session_id = %s",
                    (self._clock(), session_id),
                )
            return len(changed)

        return await self._commit("rewrite_messages", write)

    async def compact(self, session_id: str, result: CompactionResult) -> None:
        """Keep a compaction: its summary replaces the messages it summarized (the replaced
        rows stay, marked compacted); ``StaleCompactionError`` when the transcript changed."""
        if result.compacted_count < 0:
            raise ValueError(f"prefix_count must be >= 0, got {result.compacted_count}")
        replacement = result.messages[:1]
        expected_rest = result.kept

        async def write(conn: Conn) -> None:
            await _require_session(conn, session_id)
            live = await _live_rows(conn, session_id)
            count = result.compacted_count
            if count > len(live):
                raise StaleCompactionError(
                    f"session {session_id}: cannot replace {count} messages, "
                    f"the transcript has {len(live)}"
                )
            rest = live[count:]
            stored = [json.loads(body) for _, _, body in rest[: len(expected_rest)]]
            if stored != [json.loads(message_json(m)) for m in expected_rest]:
                raise StaleCompactionError(
                    f"session {session_id}: the transcript changed since it was compacted"
                )
            now = self._clock()
            await conn.execute(
                "UPDATE messages SET compacted_at = %s "
                "WHERE session_id = %s AND compacted_at IS NULL",
                (now, session_id),
            )
            # The rest is written again after the summary, so id order stays transcript order.
            bodies: list[tuple[str, str]] = [(m.role, message_json(m)) for m in replacement]
            bodies += [(role, body) for _, role, body in rest]
            async with conn.cursor() as insert:
                await insert.executemany(
                    "INSERT INTO messages (session_id, role, body, created_at) "
                    "VALUES (%s, %s, %s, %s)",
                    [(session_id, role, body, now) for role, body in bodies],
                )
            await conn.execute(
                "UPDATE sessions SET message_count = %s, updated_at = %s, "
                "summary = COALESCE(%s, summary) WHERE session_id = %s",
                (len(bodies), now, result.summary, session_id),
            )

        await self._commit("compact", write)

    # --- inbox entries ----------------------------------------------------------------------

    def start_inbox_run(
        self,
        ids: Sequence[int],
        *,
        session_id: str,
        run_id: str,
        user_turn: Sequence[Message] = (),
    ) -> None:
        """accepted -> running with the run's user turn, in one statement (a lazy record);
        with no user turn, the entries keep the one they had."""
        roles = [m.role for m in user_turn]
        bodies = [message_json(m) for m in user_turn]
        ids = list(ids)

        async def write(conn: Conn) -> None:
            now = self._clock()
            await conn.execute(
                """
                WITH turn AS (
                    INSERT INTO messages (session_id, role, body, created_at)
                    SELECT %(session)s, t.role, t.body, %(now)s
                      FROM unnest(%(roles)s::text[], %(bodies)s::text[])
                           WITH ORDINALITY AS t(role, body, n)
                     ORDER BY t.n
                    RETURNING id
                ), counted AS (
                    UPDATE sessions
                       SET updated_at = %(now)s, message_count = message_count + %(count)s
                     WHERE session_id = %(session)s AND %(count)s > 0
                )
                UPDATE inbox
                   SET state = 'running', run_id = %(run)s, session_id = %(session)s,
                       user_turn_id = COALESCE((SELECT min(id) FROM turn), user_turn_id),
                       attempts = attempts + 1, updated_at = %(now)s
                 WHERE id = ANY(%(ids)s)
                """,
                {
                    "session": session_id,
                    "now": now,
                    "roles": roles,
                    "bodies": bodies,
                    "count": len(bodies),
                    "run": run_id,
                    "ids": ids,
                },
            )

        self._defer("start_inbox_run", write, lazy=True)

    def finish_inbox(self, ids: Sequence[int], state: InboxState) -> None:
        """-> answered | failed | skipped (a record)."""
        if state not in FINISHED_STATES:
            raise ValueError(f"not a final inbox state: {state!r}")
        if not ids:
            return
        params = (state, self._clock(), list(ids))

        async def write(conn: Conn) -> None:
            await conn.execute(
                "UPDATE inbox SET state = %s, updated_at = %s WHERE id = ANY(%s)", params
            )

        self._defer("finish_inbox", write)

    async def inbox_state(self, inbox_id: int) -> InboxState | None:
        async def read(conn: Conn) -> InboxState | None:
            cur = await conn.execute("SELECT state FROM inbox WHERE id = %s", (inbox_id,))
            row = await cur.fetchone()
            return None if row is None else row[0]

        return await self._read(read)

    async def unfinished_entries(self) -> list[InboxEntry]:
        """Every accepted or running entry: each conversation's in ``seq`` (commit) order,
        conversations by their oldest entry."""

        async def read(conn: Conn) -> list[InboxEntry]:
            cur = await conn.execute(
                "SELECT id, message, state, session_id, user_turn_id, attempts FROM inbox "
                "WHERE state IN ('accepted', 'running') "
                "ORDER BY min(id) OVER (PARTITION BY conversation_key), conversation_key, seq"
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
                for row in await cur.fetchall()
            ]

        return await self._read(read)

    async def trim_interrupted(self, session_id: str, user_turn_id: int) -> bool:
        """Make an interrupted run's transcript resumable from its last finished step (see
        the SQLite store's); False when its user turn is no longer live."""

        async def write(conn: Conn) -> bool:
            cur = await conn.execute(
                "SELECT id, role, body FROM messages WHERE session_id = %s AND id >= %s "
                "AND compacted_at IS NULL ORDER BY id",
                (session_id, user_turn_id),
            )
            rows = await cur.fetchall()
            cur = await conn.execute(
                "SELECT 1 FROM active_sessions WHERE session_id = %s", (session_id,)
            )
            active = await cur.fetchone()
            if not rows or int(rows[0][0]) != user_turn_id or active is None:
                return False
            keep = resumable_prefix(
                [message_from_json(r[2]) for r in rows], await awaiting_calls(conn, session_id)
            )
            drop = [int(r[0]) for r in rows[keep:]]
            if drop:
                await conn.execute("DELETE FROM messages WHERE id = ANY(%s)", (drop,))
                await conn.execute(
                    "UPDATE sessions SET message_count = message_count - %s WHERE session_id = %s",
                    (len(drop), session_id),
                )
            return True

        return await self._commit("trim_interrupted", write)

    async def inbox_backlog(self) -> InboxBacklog:
        """How many accepted messages are not finished, and the oldest one's age (what is
        committed: nothing waits for the queue)."""

        async def read(conn: Conn) -> tuple[Any, ...] | None:
            cur = await conn.execute(
                "SELECT count(*), min(accepted_at) FROM inbox "
                "WHERE state IN ('accepted', 'running')"
            )
            return await cur.fetchone()

        row = await self._read(read, after_queued=False)
        assert row is not None
        count, oldest = int(row[0]), row[1]
        age = None if oldest is None else max(0.0, self._clock() - float(oldest))
        return InboxBacklog(count, age)

    # --- outbox pieces ----------------------------------------------------------------------

    async def outbox_add(
        self,
        anchor: int | None,
        seq: int,
        kind: str,
        target: Target,
        text: str,
        *,
        media: Sequence[str] = (),
        audio_as_voice: bool = False,
        buttons: Sequence[Sequence[Button]] = (),
    ) -> int:
        """A piece written before it is sent: its key once committed (with the epoch of
        the lease its run holds, in cluster mode)."""
        now = self._clock()
        fence = self._fence
        params = (
            anchor,
            seq,
            kind,
            target_json(target),
            text,
            media_json(media, audio_as_voice),
            buttons_json(buttons),
            now,
            now,
            None if fence is None else fence.epoch,
        )

        write = Statement(
            "INSERT INTO outbox (anchor, seq, kind, target, text, media, buttons, state, "
            "created_at, updated_at, epoch) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending', %s, %s, %s) RETURNING id",
            params,
            _first_int,
        )
        return await self._commit("outbox_add", write)

    def outbox_sent(self, row_id: int, message_ids: Sequence[str]) -> None:
        params = (json.dumps(list(message_ids)), self._clock(), row_id)

        async def write(conn: Conn) -> None:
            await conn.execute(
                "UPDATE outbox SET state = 'sent', refs = %s, updated_at = %s WHERE id = %s",
                params,
            )

        self._defer("outbox_sent", write)

    def outbox_failed(self, row_id: int) -> None:
        params = (self._clock(), row_id)

        async def write(conn: Conn) -> None:
            await conn.execute(
                "UPDATE outbox SET state = 'failed', updated_at = %s WHERE id = %s", params
            )

        self._defer("outbox_failed", write)

    async def outbox_sent_texts(self, anchors: Sequence[int]) -> list[str]:
        """The texts sent for runs anchored at ``anchors``, in the order they were written."""
        if not anchors:
            return []

        async def read(conn: Conn) -> list[str]:
            cur = await conn.execute(
                "SELECT text FROM outbox WHERE anchor = ANY(%s) AND state = 'sent' ORDER BY id",
                (list(anchors),),
            )
            return [str(row[0]) for row in await cur.fetchall()]

        return await self._read(read)

    async def preview_keep(
        self, anchor: int, refs: Sequence[MessageRef], *, streaming: bool = False
    ) -> None:
        """Keep the messages of the run's preview (replacing what was kept before), under
        the lease its run holds, like its pieces."""
        params = (anchor, preview_refs_json(refs), streaming, self._clock())

        async def write(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO previews (anchor, refs, streaming, updated_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (anchor) DO UPDATE SET "
                "refs = excluded.refs, streaming = excluded.streaming, "
                "updated_at = excluded.updated_at",
                params,
            )

        await self._commit("preview_keep", write)

    async def preview_of(self, anchor: int) -> StoredPreview | None:
        """The run's kept preview, if any."""

        async def read(conn: Conn) -> StoredPreview | None:
            cur = await conn.execute(
                "SELECT refs, streaming FROM previews WHERE anchor = %s", (anchor,)
            )
            row = await cur.fetchone()
            return None if row is None else preview_from_row(str(row[0]), row[1])

        return await self._read(read)

    async def unconfirmed_pieces(self) -> list[OutboxEntry]:
        """Every piece written and never confirmed, oldest first."""

        async def read(conn: Conn) -> list[OutboxEntry]:
            cur = await conn.execute(
                f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE state = 'pending' ORDER BY id"
            )
            return [outbox_entry_from_row(row) for row in await cur.fetchall()]

        return await self._read(read)

    async def outbox_pending_count(self) -> int:
        async def read(conn: Conn) -> int:
            cur = await conn.execute("SELECT count(*) FROM outbox WHERE state = 'pending'")
            row = await cur.fetchone()
            return 0 if row is None else int(row[0])

        return await self._read(read, after_queued=False)

    async def outbox_supersede(self, row_ids: Sequence[int]) -> None:
        """Pieces a resumed run will produce again: no longer waiting to be sent."""
        if not row_ids:
            return
        params = (self._clock(), list(row_ids))

        async def write(conn: Conn) -> None:
            await conn.execute(
                "UPDATE outbox SET state = 'superseded', updated_at = %s WHERE id = ANY(%s)",
                params,
            )

        await self._commit("outbox_supersede", write)

    async def prune_finished(self, older_than_seconds: float) -> int:
        """Forget finished inbox rows and sent or failed outbox pieces older than the cut."""
        cut = self._clock() - older_than_seconds

        async def write(conn: Conn) -> int:
            inbox = await conn.execute(
                "DELETE FROM inbox WHERE state IN ('answered', 'failed', 'skipped') "
                "AND updated_at < %s",
                (cut,),
            )
            outbox = await conn.execute(
                "DELETE FROM outbox WHERE state != 'pending' AND updated_at < %s", (cut,)
            )
            approvals = await conn.execute(
                "DELETE FROM approvals WHERE state != 'pending' AND decided_at < %s "
                "AND NOT (state = 'always' AND grant_key IS NOT NULL)",
                (cut,),
            )
            # A run's preview matters only while its entries may resume: gone with them.
            await conn.execute(
                "DELETE FROM previews WHERE updated_at < %s AND anchor NOT IN "
                "(SELECT id FROM inbox WHERE state IN ('accepted', 'running'))",
                (cut,),
            )
            # Buttons expire in a week at most (``BUTTONS_KEPT_AT_MOST``): older records
            # would only ever refuse a press.
            await conn.execute("DELETE FROM button_messages WHERE posted_at < %s", (cut,))
            counts = (inbox.rowcount, outbox.rowcount, approvals.rowcount)
            return sum(max(count, 0) for count in counts)

        return await self._commit("prune_finished", write)


__all__ = ["LedgerStore"]
