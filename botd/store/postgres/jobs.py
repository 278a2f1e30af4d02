"""The scheduler's jobs and run log, one-time imports, token usage and the conversations'
model and voice choices on PostgreSQL (``JobLedger``, ``ModelChoices``, ``VoiceChoices``), as
the SQLite store means them (``botd/store/sqlite/jobs.py``, ``usage.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import cast

from ...chat import InboundMessage
from ..records import JobFire, ModelUsage, Outcome, RunRecord, StoredJob, UsageTotals
from ..rows import JOB_COLUMNS, iso, job_from_row, job_row
from .base import Conn, PostgresBase
from .inbound import insert_accepted

_SAVE_JOB = (
    f"INSERT INTO scheduler_jobs ({JOB_COLUMNS}, updated_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (id) DO {action}"
)
_REPLACE = (
    "UPDATE SET kind = excluded.kind, trigger = excluded.trigger, name = excluded.name, "
    "prompt = excluded.prompt, target = excluded.target, "
    "conversation_key = excluded.conversation_key, source = excluded.source, "
    "fingerprint = excluded.fingerprint, next_run_time = excluded.next_run_time, "
    "heartbeat = excluded.heartbeat, updated_at = excluded.updated_at"
)


class JobStore(PostgresBase):
    """Jobs, their run log, imports, usage and model choices."""

    async def load_jobs(self) -> list[StoredJob]:
        """Every job, by id."""

        async def read(conn: Conn) -> list[StoredJob]:
            cur = await conn.execute(f"SELECT {JOB_COLUMNS} FROM scheduler_jobs ORDER BY id")
            return [job_from_row(row) for row in await cur.fetchall()]

        return await self._read(read)

    async def get_job(self, job_id: str) -> StoredJob | None:
        async def read(conn: Conn) -> StoredJob | None:
            cur = await conn.execute(
                f"SELECT {JOB_COLUMNS} FROM scheduler_jobs WHERE id = %s", (job_id,)
            )
            row = await cur.fetchone()
            return None if row is None else job_from_row(row)

        return await self._read(read)

    async def save_job(self, job: StoredJob) -> None:
        """Add a job, or replace the one with its id."""
        params = job_row(job, self._clock())

        async def write(conn: Conn) -> None:
            await conn.execute(_SAVE_JOB.format(action=_REPLACE), params)

        await self._commit("save_job", write)

    async def fire_job(
        self,
        job_id: str,
        due: datetime,
        next_run_time: datetime | None,
        prompt: InboundMessage | None,
        *,
        keep: bool = False,
    ) -> JobFire:
        """Fire one run of a job: compare-and-set its next run time, accept its prompt, in
        one transaction (``JobLedger.fire_job``). Two nodes firing the same run at once: the
        second's update waits for the first's row and then finds its next run time moved,
        so it writes nothing."""
        now = self._clock()

        async def write(conn: Conn) -> JobFire:
            if next_run_time is None and not keep:
                cur = await conn.execute(
                    "DELETE FROM scheduler_jobs WHERE id = %s AND next_run_time = %s",
                    (job_id, iso(due)),
                )
            else:
                cur = await conn.execute(
                    "UPDATE scheduler_jobs SET next_run_time = %s, updated_at = %s "
                    "WHERE id = %s AND next_run_time = %s",
                    (iso(next_run_time), now, job_id, iso(due)),
                )
            if cur.rowcount != 1:
                return JobFire(advanced=False)
            if prompt is None:
                return JobFire(advanced=True)
            inbox_id = await insert_accepted(conn, prompt.channel, [prompt.message_id], prompt, now)
            return JobFire(True, inbox_id)

        # An accept takes its conversation's lock (``inbound``): the prompt's seq is next.
        locks = () if prompt is None else (prompt.conversation_key,)
        return await self._commit("fire_job", write, locks=locks)

    async def delete_job(self, job_id: str) -> bool:
        """Remove a job; False if there was none. Its run log is kept."""

        async def write(conn: Conn) -> bool:
            cur = await conn.execute("DELETE FROM scheduler_jobs WHERE id = %s", (job_id,))
            return cur.rowcount > 0

        return await self._commit("delete_job", write)

    async def add_job_run(self, record: RunRecord, *, keep: int) -> None:
        """Append to a job's run log, keeping its last ``keep`` records."""

        async def write(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO scheduler_runs (job_id, at, outcome, error) VALUES (%s, %s, %s, %s)",
                (record.job_id, record.at.isoformat(), record.outcome, record.error),
            )
            await conn.execute(
                "DELETE FROM scheduler_runs WHERE job_id = %s AND id NOT IN "
                "(SELECT id FROM scheduler_runs WHERE job_id = %s ORDER BY id DESC LIMIT %s)",
                (record.job_id, record.job_id, keep),
            )

        await self._commit("add_job_run", write)

    async def job_runs(self, job_id: str) -> list[RunRecord]:
        """Each recorded run of the job, oldest first."""

        async def read(conn: Conn) -> list[RunRecord]:
            cur = await conn.execute(
                "SELECT at, outcome, error FROM scheduler_runs WHERE job_id = %s ORDER BY id",
                (job_id,),
            )
            return [
                RunRecord(job_id, datetime.fromisoformat(at), cast(Outcome, outcome), error)
                for at, outcome, error in await cur.fetchall()
            ]

        return await self._read(read, after_queued=False)

    async def imported(self, name: str) -> bool:
        """Whether the import called ``name`` was done."""

        async def read(conn: Conn) -> bool:
            cur = await conn.execute("SELECT 1 FROM imports WHERE name = %s", (name,))
            return await cur.fetchone() is not None

        return await self._read(read, after_queued=False)

    async def import_jobs(self, name: str, jobs: Sequence[StoredJob], *, detail: str = "") -> bool:
        """Add ``jobs`` (ids present already left alone) and record the import ``name``, in
        one transaction; False, with nothing changed, when it was done before."""
        rows = [job_row(job, self._clock()) for job in jobs]
        now = self._clock()

        async def write(conn: Conn) -> bool:
            cur = await conn.execute(
                "INSERT INTO imports (name, imported_at, detail) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO NOTHING",
                (name, now, detail),
            )
            if cur.rowcount == 0:
                return False
            if rows:
                async with conn.cursor() as insert:
                    await insert.executemany(_SAVE_JOB.format(action="NOTHING"), rows)
            return True

        return await self._commit("import_jobs", write)

    # --- usage and model choices ------------------------------------------------------------

    def record_usage_soon(
        self, conversation_key: str, session_id: str, run_id: str, usage: Sequence[ModelUsage]
    ) -> None:
        """Queue one row per model of a run's usage (a lazy record)."""
        if not usage:
            return
        now = self._clock()
        rows = [
            (conversation_key, session_id, run_id, u.model, u.input, u.output, u.cache_read,
             u.cache_write, now)
            for u in usage
        ]  # fmt: skip

        async def write(conn: Conn) -> None:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO run_usage (conversation_key, session_id, run_id, model, "
                    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
                    "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    rows,
                )

        self._defer("record_usage_soon", write, lazy=True)

    async def usage_totals(
        self, *, conversation_key: str | None = None, since: float | None = None
    ) -> UsageTotals:
        """The usage of one conversation, or of every run since ``since`` (or both)."""
        where: list[str] = []
        params: list[object] = []
        if conversation_key is not None:
            where.append("conversation_key = %s")
            params.append(conversation_key)
        if since is not None:
            where.append("created_at >= %s")
            params.append(since)
        clause = f" WHERE {' AND '.join(where)}" if where else ""

        async def read(conn: Conn) -> UsageTotals:
            cur = await conn.execute(
                "SELECT count(DISTINCT run_id), coalesce(sum(input_tokens), 0), "
                "coalesce(sum(output_tokens), 0), coalesce(sum(cache_read_tokens), 0), "
                f"coalesce(sum(cache_write_tokens), 0) FROM run_usage{clause}",
                params,
            )
            row = await cur.fetchone()
            assert row is not None
            return UsageTotals(*(int(v) for v in row))

        return await self._read(read)

    async def last_model(self, conversation_key: str) -> str | None:
        """The model that answered last in the conversation (None: none has yet)."""

        async def read(conn: Conn) -> str | None:
            cur = await conn.execute(
                "SELECT model FROM run_usage WHERE conversation_key = %s ORDER BY id DESC LIMIT 1",
                (conversation_key,),
            )
            row = await cur.fetchone()
            return None if row is None else str(row[0])

        return await self._read(read)

    async def model_choice(self, conversation_key: str) -> str | None:
        """The model ``/model`` chose for the conversation (None: the configured primary)."""

        async def read(conn: Conn) -> str | None:
            cur = await conn.execute(
                "SELECT model FROM conversation_models WHERE conversation_key = %s",
                (conversation_key,),
            )
            row = await cur.fetchone()
            return None if row is None else str(row[0])

        return await self._read(read, after_queued=False)

    async def set_model_choice(self, conversation_key: str, model: str | None) -> None:
        """Keep ``model`` as the conversation's choice; None goes back to the primary."""
        now = self._clock()

        async def write(conn: Conn) -> None:
            if model is None:
                await conn.execute(
                    "DELETE FROM conversation_models WHERE conversation_key = %s",
                    (conversation_key,),
                )
            else:
                await conn.execute(
                    "INSERT INTO conversation_models (conversation_key, model, updated_at) "
                    "VALUES (%s, %s, %s) ON CONFLICT (conversation_key) DO UPDATE SET "
                    "model = excluded.model, updated_at = excluded.updated_at",
                    (conversation_key, model, now),
                )

        await self._commit("set_model_choice", write)

    async def voice_replies(self, conversation_key: str) -> bool:
        """Whether the conversation's answers are spoken (``/voice on``)."""

        async def read(conn: Conn) -> bool:
            cur = await conn.execute(
                "SELECT 1 FROM conversation_voice WHERE conversation_key = %s",
                (conversation_key,),
            )
            return await cur.fetchone() is not None

        return await self._read(read, after_queued=False)

    async def set_voice_replies(self, conversation_key: str, on: bool) -> None:
        """Keep whether the conversation's answers are spoken."""
        now = self._clock()

        async def write(conn: Conn) -> None:
            if on:
                await conn.execute(
                    "INSERT INTO conversation_voice (conversation_key, updated_at) "
                    "VALUES (%s, %s) ON CONFLICT (conversation_key) DO UPDATE SET "
                    "updated_at = excluded.updated_at",
                    (conversation_key, now),
                )
            else:
                await conn.execute(
                    "DELETE FROM conversation_voice WHERE conversation_key = %s",
                    (conversation_key,),
                )

        await self._commit("set_voice_replies", write)


__all__ = ["JobStore"]
