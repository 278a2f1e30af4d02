"""The scheduler's state: its jobs, each job's run log, and one-time imports.

The store keeps the jobs as plain data (the trigger as a JSON object); the scheduler turns them
into APScheduler jobs at start and writes every change back, so this table is what survives a
restart, next run times included.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from ..records import Outcome, RunRecord, StoredJob
from ..targets import target_from_json, target_json
from .deferred import DeferredWrites

_JOB_COLUMNS = (
    "id, kind, trigger, name, prompt, target, conversation_key, source, fingerprint, "
    "next_run_time, heartbeat"
)


def _job(row: Sequence[Any]) -> StoredJob:
    return StoredJob(
        id=str(row[0]),
        kind=str(row[1]),
        trigger=json.loads(row[2]),
        name=str(row[3]),
        prompt=str(row[4]),
        target=target_from_json(row[5]),
        conversation_key=None if row[6] is None else str(row[6]),
        source=None if row[7] is None else str(row[7]),
        fingerprint=None if row[8] is None else str(row[8]),
        next_run_time=None if row[9] is None else datetime.fromisoformat(row[9]),
        heartbeat=None if row[10] is None else int(row[10]),
    )


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


class ScheduleStore(DeferredWrites):
    """Scheduled jobs, their run log, and the record of imports done once."""

    async def load_jobs(self) -> list[StoredJob]:
        """Every job, by id."""
        self.flush_deferred()  # a next run time or a removal queued a moment ago
        rows = (
            self._connection()
            .execute(f"SELECT {_JOB_COLUMNS} FROM scheduler_jobs ORDER BY id")
            .fetchall()
        )
        return [_job(row) for row in rows]

    async def get_job(self, job_id: str) -> StoredJob | None:
        self.flush_deferred()
        row = (
            self._connection()
            .execute(f"SELECT {_JOB_COLUMNS} FROM scheduler_jobs WHERE id = ?", (job_id,))
            .fetchone()
        )
        return None if row is None else _job(row)

    async def save_job(self, job: StoredJob) -> None:
        """Add a job, or replace the one with its id."""
        with self._transaction("save_job") as conn:
            self._save_job(conn, job)

    def _save_job(self, conn: sqlite3.Connection, job: StoredJob) -> None:
        conn.execute(
            f"INSERT OR REPLACE INTO scheduler_jobs ({_JOB_COLUMNS}, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                job.id,
                job.kind,
                json.dumps(job.trigger, ensure_ascii=False),
                job.name,
                job.prompt,
                target_json(job.target),
                job.conversation_key,
                job.source,
                job.fingerprint,
                _iso(job.next_run_time),
                job.heartbeat,
                self._clock(),
            ),
        )

    def set_job_next_run_soon(self, job_id: str, next_run_time: datetime | None) -> None:
        """Record when a job runs next, with the next group commit (nothing happens for an
        unknown id). Lost in a crash, the job's earlier next run time is kept: a run that
        already happened is caught up once (coalesced), as after any missed run."""
        params = (_iso(next_run_time), self._clock(), job_id)
        self._defer(
            "set_job_next_run",
            lambda conn: conn.execute(
                "UPDATE scheduler_jobs SET next_run_time = ?, updated_at = ? WHERE id = ?",
                params,
            ),
        )

    def delete_job_soon(self, job_id: str) -> None:
        """Remove a job that will not run again, with the next group commit."""
        self._defer(
            "delete_job",
            lambda conn: conn.execute("DELETE FROM scheduler_jobs WHERE id = ?", (job_id,)),
        )

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
