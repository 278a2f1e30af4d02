"""The one-time import of an earlier botd's ``schedule.sqlite3`` into the store's job ledger
(``botd.store.JobLedger``).

Earlier botd versions kept jobs in ``state_dir/schedule.sqlite3`` through APScheduler's
SQLAlchemy job store: a table ``apscheduler_jobs`` whose ``job_state`` column holds each job's
pickled state (a dict with its id, trigger, kwargs, name and next run time). On start the
scheduler reads that file once (read-only, with ``sqlite3``; the file is botd's own, so
unpickling it trusts nothing new), turns each job into a table row, records in the database
that the import was done, and never touches the file again.
"""

from __future__ import annotations

import logging
import pickle
import re
import sqlite3
from pathlib import Path
from typing import Any

from apscheduler.triggers.combining import OrTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped,unused-ignore]

from ..store import JobLedger, StoredJob
from ..store.targets import target_from_data

log = logging.getLogger(__name__)

LEGACY_DB_NAME = "schedule.sqlite3"
LEGACY_IMPORT = "schedule.sqlite3"
"""The name under which the store records that the old file was imported."""

# How earlier versions named a cron job: "cron <expression> (<zone>): <prompt>".
_CRON_NAME = re.compile(r"^cron (?P<expr>[^()]+?) \((?P<zone>[^()]+)\): ")


async def import_legacy_jobs(table: JobLedger, path: Path) -> int | None:
    """Import the jobs of an old ``schedule.sqlite3`` once; how many, or None if nothing was
    done (no file, or imported before). A job that cannot be read is logged and skipped."""
    if not path.exists() or await table.imported(LEGACY_IMPORT):
        return None
    try:
        rows = _read_rows(path)
    except sqlite3.Error as exc:
        log.error("cannot read the old job file %s (kept for another try): %s", path, exc)
        return None
    jobs: list[StoredJob] = []
    for job_id, blob in rows:
        try:
            jobs.append(_job(pickle.loads(blob)))
        except Exception as exc:  # any damage to one pickled job: that job is skipped
            log.warning("job %s in %s not imported: %s", job_id, path, exc)
    if not await table.import_jobs(LEGACY_IMPORT, jobs, detail=str(path)):
        return None
    log.info("imported %d job(s) from %s; the file is no longer used", len(jobs), path)
    return len(jobs)


def _read_rows(path: Path) -> list[tuple[str, bytes]]:
    """Each job's id and pickled state, read without writing to the file."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        table = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'apscheduler_jobs'"
        ).fetchone()
        if table is None:
            return []
        rows = conn.execute("SELECT id, job_state FROM apscheduler_jobs ORDER BY id").fetchall()
    finally:
        conn.close()
    return [(str(job_id), bytes(blob)) for job_id, blob in rows]


def _job(state: dict[str, Any]) -> StoredJob:
    """One pickled APScheduler job state as a table row."""
    job_id = str(state["id"])
    trigger = state["trigger"]
    kwargs: dict[str, Any] = state["kwargs"]
    name = str(state["name"])
    data: dict[str, Any]
    if isinstance(trigger, DateTrigger):
        kind, data = "at", {"run_date": trigger.run_date.isoformat()}
    elif isinstance(trigger, IntervalTrigger):
        start = trigger.start_date.isoformat()
        kind, data = "every", {"seconds": trigger.interval.total_seconds(), "start": start}
    elif isinstance(trigger, CronTrigger | OrTrigger):
        match = _CRON_NAME.match(name)
        if match is None:
            raise ValueError(f"no cron expression in its name {name!r}")
        kind, data = "cron", {"expr": match["expr"], "timezone": match["zone"]}
    else:
        raise ValueError(f"unknown trigger {trigger!r}")
    target = kwargs["target"]
    return StoredJob(
        id=job_id,
        kind=kind,
        trigger=data,
        name=name,
        prompt=str(kwargs["prompt"]),
        target=target_from_data(target),
        conversation_key=kwargs.get("conversation_key"),
        source=kwargs.get("source"),
        fingerprint=kwargs.get("fingerprint"),
        next_run_time=state.get("next_run_time"),
    )
