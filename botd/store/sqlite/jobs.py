"""The scheduler's state: its jobs, each job's run log, and one-time imports.

The store keeps the jobs as plain data (the trigger as a JSON object); the scheduler turns them
into APScheduler jobs at start, and each run it fires moves the job's next run time in the same
transaction as its prompt is accepted (``fire_job``), so this table is what survives a restart,
next run times included.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import cast

from ...chat import InboundMessage
from ..records import JobFire, Outcome, RunRecord, StoredJob
from ..rows import JOB_COLUMNS, iso, job_from_row, job_row
from .deferred import DeferredWrites
from .inbox import insert_accepted


class ScheduleStore(DeferredWrites):
    """Scheduled jobs, their run log, and the record of imports done once."""

    async def load_jobs(self) -> list[StoredJob]:
        """Every job, by id."""
        self.flush_deferred()  # what was queued a moment ago is read back
        rows = (
            self._connection()
            .execute(f"SELECT {JOB_COLUMNS} FROM scheduler_jobs ORDER BY id")
            .fetchall()
        )
        return [job_from_row(row) for row in rows]

    async def get_job(self, job_id: str) -> StoredJob | None:
        self.flush_deferred()
        row = (
            self._connection()
            .execute(f"SELECT {JOB_COLUMNS} FROM scheduler_jobs WHERE id = ?", (job_id,))
            .fetchone()
        )
        return None if row is None else job_from_row(row)

    async def save_job(self, job: StoredJob) -> None:
        """Add a job, or replace the one with its id."""
        with self._transaction("save_job") as conn:
            self._save_job(conn, job)

    def _save_job(self, conn: sqlite3.Connection, job: StoredJob) -> None:
        conn.execute(
            f"INSERT OR REPLACE INTO scheduler_jobs ({JOB_COLUMNS}, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            job_row(job, self._clock()),
        )

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
        one transaction (``JobLedger.fire_job``)."""
        now = self._clock()

        def write(conn: sqlite3.Connection) -> JobFire:
            if next_run_time is None and not keep:
                cursor = conn.execute(
                    "DELETE FROM scheduler_jobs WHERE id = ? AND next_run_time = ?",
                    (job_id, iso(due)),
                )
            else:
                cursor = conn.execute(
                    "UPDATE scheduler_jobs SET next_run_time = ?, updated_at = ? "
                    "WHERE id = ? AND next_run_time = ?",
                    (iso(next_run_time), now, job_id, iso(due)),
                )
            if cursor.rowcount == 0:
                return JobFire(advanced=False)
            if prompt is None:
                return JobFire(advanced=True)
            keys = [prompt.message_id]
            return JobFire(True, insert_accepted(conn, prompt.channel, keys, prompt, now))

        return await self._commit("fire_job", write)

    async def delete_job(self, job_id: str) -> bool:
        """Remove a job; False if there was none. Its run log is kept."""
        with self._transaction("delete_job") as conn:
            cursor = conn.execute("DELETE FROM scheduler_jobs WHERE id = ?", (job_id,))
            return cursor.rowcount > 0

    async def add_job_run(self, record: RunRecord, *, keep: int) -> None:
        """Append to a job's run log, keeping its last ``keep`` records."""
        with self._transaction("add_job_run") as conn:
            conn.execute(
                "INSERT INTO scheduler_runs (job_id, at, outcome, error) VALUES (?, ?, ?, ?)",
                (record.job_id, record.at.isoformat(), record.outcome, record.error),
            )
            conn.execute(
                "DELETE FROM scheduler_runs WHERE job_id = ? AND id NOT IN"
                " (SELECT id FROM scheduler_runs WHERE job_id = ? ORDER BY id DESC LIMIT ?)",
                (record.job_id, record.job_id, keep),
            )

    async def job_runs(self, job_id: str) -> list[RunRecord]:
        """Each recorded run of the job, oldest first."""
        rows = (
            self._connection()
            .execute(
                "SELECT at, outcome, error FROM scheduler_runs WHERE job_id = ? ORDER BY id",
                (job_id,),
            )
            .fetchall()
        )
        return [
            RunRecord(job_id, datetime.fromisoformat(at), cast(Outcome, outcome), error)
            for at, outcome, error in rows
        ]

    # --- one-time imports ---------------------------------------------------------------------

    async def imported(self, name: str) -> bool:
        """Whether the import called ``name`` was done."""
        row = self._connection().execute("SELECT 1 FROM imports WHERE name = ?", (name,)).fetchone()
        return row is not None

    async def import_jobs(self, name: str, jobs: Sequence[StoredJob], *, detail: str = "") -> bool:
        """Add ``jobs`` (ids already present are left alone) and record the import ``name``,
        in one transaction; False, with nothing changed, if it was done before."""
        with self._transaction("import_jobs") as conn:
            if conn.execute("SELECT 1 FROM imports WHERE name = ?", (name,)).fetchone():
                return False
            for job in jobs:
                exists = conn.execute("SELECT 1 FROM scheduler_jobs WHERE id = ?", (job.id,))
                if exists.fetchone() is None:
                    self._save_job(conn, job)
            conn.execute(
                "INSERT INTO imports (name, imported_at, detail) VALUES (?, ?, ?)",
                (name, self._clock(), detail),
            )
        return True
