"""Token usage per run, and the model each conversation chose.

A run's usage is one row per model that answered in it (a run that failed over mid-way has
two), queued with the run's last transcript write (``record_usage_soon``) so it rides in the
same group commit and costs no transaction of its own. ``usage_totals`` sums the rows of one
conversation, or of every conversation since a time (today's totals).

``conversation_models`` keeps what ``/model`` set for a conversation, so the choice survives
a restart; a conversation without a row uses the configured primary. ``conversation_voice``
holds a row for each conversation whose answers are spoken (``/voice on``); none: text.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..records import ModelUsage, UsageTotals
from .deferred import DeferredWrites


class UsageStore(DeferredWrites):
    """Token usage per run and the conversations' model choices (see the module docstring)."""

    def record_usage_soon(
        self, conversation_key: str, session_id: str, run_id: str, usage: Sequence[ModelUsage]
    ) -> None:
        """Queue one row per model of a run's usage (committed with the next transaction)."""
        if not usage:
            return
        now = self._clock()
        rows = [
            (
                conversation_key,
                session_id,
                run_id,
                u.model,
                u.input,
                u.output,
                u.cache_read,
                u.cache_write,
                now,
            )
            for u in usage
        ]
        self._defer(
            "record_usage_soon",
            lambda conn: conn.executemany(
                "INSERT INTO run_usage (conversation_key, session_id, run_id, model, "
                "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            ),
            lazy=True,
        )

    async def usage_totals(
        self, *, conversation_key: str | None = None, since: float | None = None
    ) -> UsageTotals:
        """The usage of one conversation, or of every run since ``since`` (or both)."""
        self.flush_deferred()
        where: list[str] = []
        params: list[object] = []
        if conversation_key is not None:
            where.append("conversation_key = ?")
            params.append(conversation_key)
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        row = (
            self._connection()
            .execute(
                "SELECT count(DISTINCT run_id), coalesce(sum(input_tokens), 0), "
                "coalesce(sum(output_tokens), 0), coalesce(sum(cache_read_tokens), 0), "
                f"coalesce(sum(cache_write_tokens), 0) FROM run_usage{clause}",
                params,
            )
            .fetchone()
        )
        return UsageTotals(*(int(v) for v in row))

    async def last_model(self, conversation_key: str) -> str | None:
        """The model that answered last in the conversation (None: none has yet)."""
        self.flush_deferred()
        row = (
            self._connection()
            .execute(
                "SELECT model FROM run_usage WHERE conversation_key = ? ORDER BY id DESC LIMIT 1",
                (conversation_key,),
            )
            .fetchone()
        )
        return None if row is None else str(row[0])

    async def model_choice(self, conversation_key: str) -> str | None:
        """The model ``/model`` chose for the conversation (None: the configured primary)."""
        row = (
            self._connection()
            .execute(
                "SELECT model FROM conversation_models WHERE conversation_key = ?",
                (conversation_key,),
            )
            .fetchone()
        )
        return None if row is None else str(row[0])

    async def set_model_choice(self, conversation_key: str, model: str | None) -> None:
        """Keep ``model`` as the conversation's choice; None goes back to the primary."""
        with self._transaction("set_model_choice") as conn:
            if model is None:
                conn.execute(
                    "DELETE FROM conversation_models WHERE conversation_key = ?",
                    (conversation_key,),
                )
            else:
                conn.execute(
                    "INSERT INTO conversation_models (conversation_key, model, updated_at) "
                    "VALUES (?, ?, ?) ON CONFLICT (conversation_key) DO UPDATE SET "
                    "model = excluded.model, updated_at = excluded.updated_at",
                    (conversation_key, model, self._clock()),
                )

    async def voice_replies(self, conversation_key: str) -> bool:
        """Whether the conversation's answers are spoken (``/voice on``)."""
        row = (
            self._connection()
            .execute(
                "SELECT 1 FROM conversation_voice WHERE conversation_key = ?",
                (conversation_key,),
            )
            .fetchone()
        )
        return row is not None

    async def set_voice_replies(self, conversation_key: str, on: bool) -> None:
        """Keep whether the conversation's answers are spoken."""
        with self._transaction("set_voice_replies") as conn:
            if on:
                conn.execute(
                    "INSERT INTO conversation_voice (conversation_key, updated_at) VALUES (?, ?) "
                    "ON CONFLICT (conversation_key) DO UPDATE SET updated_at = excluded.updated_at",
                    (conversation_key, self._clock()),
                )
            else:
                conn.execute(
                    "DELETE FROM conversation_voice WHERE conversation_key = ?",
                    (conversation_key,),
                )


__all__ = ["UsageStore"]
