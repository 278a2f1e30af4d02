"""The durable outbox: each block or final reply of a run, written before it is sent.

``outbox_add`` writes a piece as ``pending`` (with where it goes, its text and the references
of the files it uploads, never their bytes);
``outbox_sent`` marks it sent with the platform's message ids, ``outbox_failed`` marks a piece
the platform refused. A piece is keyed to its run by ``anchor``: the inbox id the run answers
(the first of its batch), so a run resumed after a restart finds what it already posted
(``outbox_sent_texts``). ``outbox_pending`` lists what a crash left unconfirmed.

``preview_keep`` keeps, by the same anchor, the live messages a run shows its answer in (an
``edit`` preview, a Slack stream), one row per run replaced as it grows; ``preview_of``
reads it back for a resumed run.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...chat import Button, MessageRef, Target
from ..records import OutboxEntry, StoredPreview
from ..rows import (
    OUTBOX_COLUMNS,
    buttons_json,
    media_json,
    outbox_entry_from_row,
    preview_from_row,
    preview_refs_json,
)
from ..targets import target_json
from .deferred import DeferredWrites


class OutboxStore(DeferredWrites):
    """The outbox table (see the module docstring)."""

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
        """Write a piece about to be sent; its row id once committed (see ``deferred``)."""
        now = self._clock()
        files = media_json(media, audio_as_voice)
        params = (
            anchor,
            seq,
            kind,
            target_json(target),
            text,
            files,
            buttons_json(buttons),
            now,
            now,
        )

        def write(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "INSERT INTO outbox (anchor, seq, kind, target, text, media, buttons, state, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                params,
            )
            assert cursor.lastrowid is not None
            return int(cursor.lastrowid)

        return await self._commit("outbox_add", write)

    def outbox_sent(self, row_id: int, message_ids: Sequence[str]) -> None:
        """Mark a piece sent (committed with the store's next transaction, see ``deferred``)."""
        params = (json.dumps(list(message_ids)), self._clock(), row_id)
        self._defer(
            "outbox_sent",
            lambda conn: conn.execute(
                "UPDATE outbox SET state = 'sent', refs = ?, updated_at = ? WHERE id = ?", params
            ),
        )

    def outbox_failed(self, row_id: int) -> None:
        params = (self._clock(), row_id)
        self._defer(
            "outbox_failed",
            lambda conn: conn.execute(
                "UPDATE outbox SET state = 'failed', updated_at = ? WHERE id = ?", params
            ),
        )

    async def outbox_sent_texts(self, anchors: Sequence[int]) -> list[str]:
        """The texts sent for runs anchored at ``anchors``, in the order they were sent."""
        if not anchors:
            return []
        self.flush_deferred()
        placeholders = ",".join("?" * len(anchors))
        rows = (
            self._connection()
            .execute(
                f"SELECT text FROM outbox WHERE anchor IN ({placeholders}) AND state = 'sent' "
                "ORDER BY id",
                tuple(anchors),
            )
            .fetchall()
        )
        return [str(row[0]) for row in rows]

    def outbox_pending(self) -> list[OutboxEntry]:
        """Every piece written and never confirmed, oldest first."""
        self.flush_deferred()
        rows = (
            self._connection()
            .execute(f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE state = 'pending' ORDER BY id")
            .fetchall()
        )
        return [outbox_entry_from_row(row) for row in rows]

    async def unconfirmed_pieces(self) -> list[OutboxEntry]:
        """``outbox_pending``, for the conversations."""
        return self.outbox_pending()

    async def outbox_pending_count(self) -> int:
        """How many pieces are written and not confirmed (one read of the partial index
        ``outbox_waiting``); what is committed, like ``inbox_backlog``."""
        row = (
            self._connection()
            .execute("SELECT count(*) FROM outbox WHERE state = 'pending'")
            .fetchone()
        )
        return int(row[0])

    async def outbox_supersede(self, row_ids: Sequence[int]) -> None:
        """Pieces a resumed run will produce again: no longer waiting to be sent."""
        if not row_ids:
            return
        now = self._clock()
        with self._transaction("outbox_supersede") as conn:
            conn.executemany(
                "UPDATE outbox SET state = 'superseded', updated_at = ? WHERE id = ?",
                [(now, row_id) for row_id in row_ids],
            )

    async def preview_keep(
        self, anchor: int, refs: Sequence[MessageRef], *, streaming: bool = False
    ) -> None:
        """Keep the messages of the run's preview (replacing what was kept before)."""
        params = (anchor, preview_refs_json(refs), int(streaming), self._clock())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO previews (anchor, refs, streaming, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (anchor) DO UPDATE SET refs = excluded.refs, "
                "streaming = excluded.streaming, updated_at = excluded.updated_at",
                params,
            )

        await self._commit("preview_keep", write)

    async def preview_of(self, anchor: int) -> StoredPreview | None:
        """The run's kept preview, if any."""
        self.flush_deferred()
        row = (
            self._connection()
            .execute("SELECT refs, streaming FROM previews WHERE anchor = ?", (anchor,))
            .fetchone()
        )
        return None if row is None else preview_from_row(str(row[0]), row[1])


__all__ = ["OutboxStore"]
