"""The scheduler's state: its jobs, each job's run log, and one-time imports.

The store keeps the jobs as plain data (the trigger as a JSON object); the scheduler turns them
into APScheduler jobs at start and writes every change back, so this table is what survives a
restart, next run times included.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from ..chat import Target
from .base import StoreBase
from .targets import target_from_json, target_json

Outcome = Literal["submitted", "failed"]

_JOB_COLUMNS = (
    "id, kind, trigger, name, prompt, target, conversation_key, source, fingerprint, "
    "next_run_time, heartbeat"
)


@dataclass(frozen=True, slots=True)
class StoredJob:
    """One scheduled job as the store keeps it."""

    id: str
    kind: str
    """``cron``, ``every`` or ``at``."""
    trigger: dict[str, Any]
    """The trigger's data: ``expr`` and ``timezone``; ``seconds`` and ``start``; ``run_date``."""
    name: str
    """How listings show the job."""
    prompt: str
    target: Target
    conversation_key: str | None = None
    source: str | None = None
    """``config`` for a job the configuration owns; None for one made at run time."""
    fingerprint: str | None = None
    """A config job's definition as text, to tell whether the configuration changed it."""
    next_run_time: datetime | None = None
    heartbeat: int | None = None
    """A heartbeat check's acknowledgement bound (``JobSpec.heartbeat``); None: not one."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of a job: when, and whether its prompt was handed over."""

    job_id: str
    at: datetime
    outcome: Outcome
    error: str | None = None


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


class ScheduleStore(StoreBase):
    """Scheduled jobs, their run log, and the record of imports done once."""

    def load_jobs(self) -> list[StoredJob]:
        """Every job, by id."""
        rows = (
            self._connection()
            .execute(f"SELECT {_JOB_COLUMNS} FROM scheduler_jobs ORDER BY id")
            .fetchall()
        )
        return [_job(row) for row in rows]

    def get_job(self, job_id: str) -> StoredJob | None:
        row = (
            self._connection()
            .execute(f"SELECT {_JOB_COLUMNS} FROM scheduler_jobs WHERE id = ?", (job_id,))
            .fetchone()
        )
        return None if row is None else _job(row)

    def save_job(self, job: StoredJob) -> None:
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

    def set_job_next_run(self, job_id: str, next_run_time: datetime | None) -> None:
        """Record when a job runs next (nothing happens for an unknown id)."""
        with self._transaction("set_job_next_run") as conn:
            conn.execute(
                "UPDATE scheduler_jobs SET next_run_time = ?, updated_at = ? WHERE id = ?",
                (_iso(next_run_time), self._clock(), job_id),
            )

    def delete_job(self, job_id: str) -> bool:
        """Remove a job; False if there was none. Its run log is kept."""
        with self._transaction("delete_job") as conn:
            cursor = conn.execute("DELETE FROM scheduler_jobs WHERE id = ?", (job_id,))
            return cursor.rowcount > 0

    def add_job_run(self, record: RunRecord, *, keep: int) -> None:
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

    def job_runs(self, job_id: str) -> list[RunRecord]:
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

    def imported(self, name: str) -> bool:
        """Whether the import called ``name`` was done."""
        row = self._connection().execute("SELECT 1 FROM imports WHERE name = ?", (name,)).fetchone()
        return row is not None

    def import_jobs(self, name: str, jobs: Sequence[StoredJob], *, detail: str = "") -> bool:
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
