"""Which run of a job is due: APScheduler's asyncio executor, telling the job what it fires.

APScheduler calls a due job's function with the job's own arguments and nothing about the
run. botd's fire needs three times (a ``Slot``): the next run time the job had when it came
due (what the store's compare-and-set expects to find), the run time being fired (the latest
of those missed, runs being coalesced; it names the run in the prompt's dedupe key), and the
one after it (what the store is set to; None once a one-shot job is done). ``SlotExecutor``
computes the last one as APScheduler does right after handing the job over, from the same
trigger and run time, and marks a run missed beyond the job's ``misfire_grace_time`` (what
APScheduler's own executor skips).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.executors.asyncio import AsyncIOExecutor  # type: ignore[import-untyped,unused-ignore]


@dataclass(frozen=True, slots=True)
class Slot:
    """One due run of a job."""

    due: datetime
    """The job's next run time as this node knew it when it came due."""
    at: datetime
    """The run time fired."""
    next: datetime | None
    """The run time after it; None: the job has no further run."""
    missed: bool = False
    """Later than the job's grace allows: only its next run time moves on."""


class SlotExecutor(AsyncIOExecutor):  # type: ignore[misc,unused-ignore]
    """Runs a due job as ``job.func(*job.args, slot=slot)`` in a task on the loop (a job is
    added with ``kwargs={"slot": None}``, the place this fills in; coalesced: one run time
    per submission). Shut down, it cancels the runs in flight."""

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        at = run_times[-1]
        now = datetime.now(UTC)
        grace = job.misfire_grace_time
        slot = Slot(
            due=job.next_run_time,
            at=at,
            next=job.trigger.get_next_fire_time(at, now),
            missed=grace is not None and now - at > timedelta(seconds=grace),
        )
        run = job.func(*job.args, **{**job.kwargs, "slot": slot})
        task: asyncio.Task[None] = self._eventloop.create_task(run)
        self._pending_futures.add(task)

        def finished(task: asyncio.Task[None]) -> None:
            self._pending_futures.discard(task)
            error = None if task.cancelled() else task.exception()
            if error is None:
                self._run_job_success(job.id, [])
            else:
                self._run_job_error(job.id, error, error.__traceback__)

        task.add_done_callback(finished)


__all__ = ["Slot", "SlotExecutor"]
