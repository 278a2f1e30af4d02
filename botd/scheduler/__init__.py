"""Scheduled prompts: APScheduler 3 inside botd's event loop, jobs kept in botd's database.

A job runs a prompt by handing an ``InboundMessage`` to ``submit`` (the session manager): in a
named conversation, or in its own session ``cron:<job id>``, answering to the job's target.
Three kinds of trigger: ``cron`` (standard cron: day-of-week 0 and 7 are Sunday, and when both
day-of-month and day-of-week are restricted a day matching either fires, as in Vixie cron),
``every`` (seconds) and ``at`` (one shot).

A job may be a heartbeat check (``JobSpec.heartbeat``): its prompt ends with
``HEARTBEAT_INSTRUCTION`` and its message carries the acknowledgement bound, so the run posts
nothing when the agent answers ``HEARTBEAT_OK`` (``botd.conversation.run``).

Storage is the store's job ledger (``botd.store.JobLedger``): each job's definition as plain
data and its next run time, and beside it each job's run log. APScheduler runs on its in-memory
job store, rebuilt from the table at start; adding, cancelling and syncing jobs write the table,
and the in-memory store writes back every next run time APScheduler computes and every job it
drops once done, so a restart knows what was missed. Jobs call a bound method of their scheduler
with plain arguments: nothing is pickled. A ``schedule.sqlite3`` left by an earlier botd is
imported once at start (``botd.scheduler.store``) and then left alone.

Misfires are coalesced: runs missed while botd was down become one run on start, if the latest
one is within ``misfire_grace_time``. Reminders (id prefix ``reminder-``) have no grace limit:
a reminder missed while down still posts, late, rather than never.

The ``clock`` serves botd's own arithmetic (one-shot and interval start times, a new job's
first run time, run log times); APScheduler itself waits on the wall clock.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Literal, cast

from apscheduler.jobstores.base import JobLookupError  # type: ignore[import-untyped,unused-ignore]
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped,unused-ignore]
from apscheduler.schedulers.base import BaseScheduler  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped,unused-ignore]

from ..chat import InboundMessage, Target
from ..config.cron import cron_trigger, zone
from ..ops.logging import mask_secrets
from ..store import JobLedger, RunRecord, StoredJob
from ..subscriber import HEARTBEAT_INSTRUCTION
from .store import MirroredJobStore, import_legacy_jobs

log = logging.getLogger(__name__)

REMINDER_PREFIX = "reminder-"
SENDER = "scheduler"
RUN_LOG_KEEP = 200
"""Run records kept per job (older ones are pruned)."""

Clock = Callable[[], datetime]
Submit = Callable[[InboundMessage], Awaitable[None]]
Kind = Literal["cron", "every", "at"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


# --- public types ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job from the configuration: exactly one of ``cron``, ``every`` (seconds), ``at``."""

    id: str
    prompt: str
    target: Target
    cron: str | None = None
    every: float | None = None
    at: datetime | None = None
    timezone: str | None = None
    """For ``cron`` and a naive ``at``; default: the scheduler's zone."""
    conversation_key: str | None = None
    """A named conversation to run in; None: the job's own session ``cron:<id>``."""
    heartbeat: int | None = None
    """A heartbeat check: an answer that is ``HEARTBEAT_OK`` with a remark of at most this
    many characters is not posted. None: an ordinary job."""


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: str
    next_run_time: datetime | None
    """None when the job has no next run."""
    description: str
    conversation_key: str
    """Where the prompt runs (``cron:<id>`` for a job with its own session)."""
    target: Target


class _LoopScheduler(AsyncIOScheduler):  # type: ignore[misc,unused-ignore]
    """AsyncIOScheduler with a shutdown that completes at once, on the loop's thread."""

    def shutdown_now(self) -> None:
        BaseScheduler.shutdown(self, wait=False)
        self._stop_timer()

    def _process_jobs(self) -> float | None:
        if not self.running:  # a wakeup queued before the shutdown: nothing to do
            return None
        return cast("float | None", super()._process_jobs())


# --- the scheduler ---------------------------------------------------------------------------


class Scheduler:
    """botd's scheduler (see the module docstring). ``start`` inside the running loop.

    ``legacy_db``: a ``schedule.sqlite3`` from an earlier botd, imported once on start.
    """

    reminder_prefix = REMINDER_PREFIX
    """The id prefix of the agent's reminders (no configured job may use it)."""

    def __init__(
        self,
        store: JobLedger,
        submit: Submit,
        *,
        timezone: str | None = None,
        clock: Clock = _utc_now,
        misfire_grace_time: int = 3600,
        legacy_db: Path | None = None,
    ) -> None:
        self.timezone = timezone or "UTC"
        self._tz = zone(self.timezone)
        self._store = store
        self._submit = submit
        self._clock = clock
        self._legacy_db = legacy_db
        self._aps: Any = _LoopScheduler(
            jobstores={"default": MirroredJobStore(store)},
            job_defaults={
                "coalesce": True,
                "misfire_grace_time": misfire_grace_time,
                "max_instances": 1,
            },
            timezone=self._tz,
        )
        self._config: list[JobSpec] | None = None

    # lifecycle

    async def start(self) -> None:
        """Load the jobs and begin running them (missed runs coalesce into one now)."""
        if self._aps.running:
            raise RuntimeError("the scheduler is already running")
        if self._legacy_db is not None:
            await import_legacy_jobs(self._store, self._legacy_db)
        if self._config is not None:  # config handed over before start
            await self._sync(self._config)
            self._config = None
        for job in await self._store.load_jobs():
            try:
                self._schedule(job)
            except (ValueError, KeyError, TypeError) as exc:
                log.error("job %s cannot be scheduled and is skipped: %s", job.id, exc)
        self._aps.start()

    def shutdown(self) -> None:
        """Stop running jobs (a run in flight is cancelled).

        Call it on the loop's thread. AsyncIOScheduler defers its shutdown to the loop's next
        turn; this one completes on return, so the store may be closed at once.
        """
        if self._aps.running:
            self._aps.shutdown_now()

    # jobs

    async def add_cron(
        self,
        job_id: str,
        expr: str,
        *,
        prompt: str,
        target: Target,
        timezone: str | None = None,
        conversation_key: str | None = None,
    ) -> JobInfo:
        """A standard cron job (see ``standard_cron_fields``) in ``timezone``."""
        return await self._put(
            self._cron_job(job_id, expr, prompt, target, timezone, conversation_key)
        )

    async def add_every(
        self,
        job_id: str,
        seconds: float,
        *,
        prompt: str,
        target: Target,
        conversation_key: str | None = None,
        first_run: datetime | None = None,
    ) -> JobInfo:
        """Every ``seconds``: first one interval from now, or at ``first_run``."""
        return await self._put(
            self._every_job(job_id, seconds, prompt, target, conversation_key, first_run)
        )

    async def add_at(
        self,
        job_id: str,
        when: datetime,
        *,
        prompt: str,
        target: Target,
        timezone: str | None = None,
        conversation_key: str | None = None,
        label: str | None = None,
    ) -> JobInfo:
        """Once at ``when`` (a naive time is read in ``timezone``, default the scheduler's).

        ``label`` names the job in listings instead of its prompt (a reminder's own words).
        """
        job = self._at_job(job_id, when, prompt, target, timezone, conversation_key, label)
        return await self._put(job)

    async def sync_config_jobs(self, jobs: list[JobSpec]) -> None:
        """Make the configured jobs exactly ``jobs``; jobs the agent created are kept.

        A job whose definition is unchanged is left alone, so a run missed while botd was down
        still happens (coalesced) after a restart. Called before ``start``, it applies on start.
        Every job is checked before anything changes: a bad one raises ValueError.
        """
        if not self._aps.running:
            for spec in jobs:
                self._spec_job(spec)
            self._config = list(jobs)
            return
        await self._sync(jobs)

    async def _sync(self, specs: list[JobSpec]) -> None:
        wanted = [self._spec_job(spec) for spec in specs]
        ids = {job.id for job in wanted}
        for job in await self._store.load_jobs():
            if job.source == "config" and job.id not in ids:
                await self.cancel(job.id)
        for job in wanted:
            existing = await self._store.get_job(job.id)
            if existing is not None and existing.fingerprint == job.fingerprint:
                continue
            await self._put(job)

    def _spec_job(self, spec: JobSpec) -> StoredJob:
        """A configured job as a table row (ValueError if it is not a valid job)."""
        if spec.id.startswith(REMINDER_PREFIX):
            raise ValueError(f"job {spec.id}: the prefix {REMINDER_PREFIX!r} is for reminders")
        given = [kind for kind in ("cron", "every", "at") if getattr(spec, kind) is not None]
        if len(given) != 1:
            raise ValueError(f"job {spec.id}: give exactly one of cron, every, at")
        args = (spec.prompt, spec.target)
        if spec.cron is not None:
            job = self._cron_job(spec.id, spec.cron, *args, spec.timezone, spec.conversation_key)
        elif spec.every is not None:
            job = self._every_job(spec.id, spec.every, *args, spec.conversation_key, None)
        else:
            assert spec.at is not None
            job = self._at_job(spec.id, spec.at, *args, spec.timezone, spec.conversation_key, None)
        return replace(job, source="config", fingerprint=repr(spec), heartbeat=spec.heartbeat)

    async def list_jobs(self, conversation_key: str | None = None) -> list[JobInfo]:
        """All jobs, or those running in ``conversation_key``; soonest first."""
        infos = [self._info(job) for job in await self._store.load_jobs()]
        if conversation_key is not None:
            infos = [info for info in infos if info.conversation_key == conversation_key]
        far = datetime.max.replace(tzinfo=UTC)
        return sorted(infos, key=lambda info: (info.next_run_time or far, info.id))

    async def get(self, job_id: str) -> JobInfo | None:
        job = await self._store.get_job(job_id)
        return None if job is None else self._info(job)

    async def cancel(self, job_id: str) -> bool:
        """Remove a job; False if there was none. Its run log is kept."""
        removed = await self._store.delete_job(job_id)
        if self._aps.running:
            with contextlib.suppress(JobLookupError):  # a job that already ran once
                self._aps.remove_job(job_id)
        return removed

    def now(self) -> datetime:
        return self._clock()

    # internals

    def _aware(self, when: datetime, timezone: str | None) -> datetime:
        if when.tzinfo is not None:
            return when
        tz: tzinfo = self._tz if timezone is None else zone(timezone)
        return when.replace(tzinfo=tz)

    def _cron_job(
        self,
        job_id: str,
        expr: str,
        prompt: str,
        target: Target,
        timezone: str | None,
        conversation_key: str | None,
    ) -> StoredJob:
        tz = timezone or self.timezone
        cron_trigger(expr, tz)  # ValueError naming the problem
        trigger = {"expr": expr, "timezone": tz}
        return self._job(
            job_id, "cron", trigger, f"cron {expr} ({tz})", prompt, target, conversation_key
        )

    def _every_job(
        self,
        job_id: str,
        seconds: float,
        prompt: str,
        target: Target,
        conversation_key: str | None,
        first_run: datetime | None,
    ) -> StoredJob:
        if seconds <= 0:
            raise ValueError(f"job {job_id}: interval must be positive, got {seconds}")
        start = self._clock() + timedelta(seconds=seconds)
        trigger = {"seconds": seconds, "start": start.isoformat()}
        job = self._job(
            job_id, "every", trigger, f"every {seconds:g}s", prompt, target, conversation_key
        )
        return (
            job if first_run is None else replace(job, next_run_time=self._aware(first_run, None))
        )

    def _at_job(
        self,
        job_id: str,
        when: datetime,
        prompt: str,
        target: Target,
        timezone: str | None,
        conversation_key: str | None,
        label: str | None,
    ) -> StoredJob:
        run_date = self._aware(when, timezone)
        trigger = {"run_date": run_date.isoformat()}
        description = f"at {run_date.isoformat()}"
        return self._job(
            job_id, "at", trigger, description, prompt, target, conversation_key, label
        )

    def _job(
        self,
        job_id: str,
        kind: Kind,
        trigger: dict[str, Any],
        description: str,
        prompt: str,
        target: Target,
        conversation_key: str | None,
        label: str | None = None,
    ) -> StoredJob:
        """A job row named for listings by its trigger and prompt (or ``label``), with its
        first run time after the clock's now."""
        if not job_id.strip():
            raise ValueError("a job needs an id")
        summary = label or prompt
        summary = summary if len(summary) <= 60 else summary[:59] + "…"
        job = StoredJob(
            id=job_id,
            kind=kind,
            trigger=trigger,
            name=f"{description}: {summary}",
            prompt=prompt,
            target=target,
            conversation_key=conversation_key,
        )
        first = self._trigger(job).get_next_fire_time(None, self._clock())
        return replace(job, next_run_time=first)

    async def _put(self, job: StoredJob) -> JobInfo:
        """Write a job to the table, and hand it to APScheduler when running."""
        await self._store.save_job(job)
        if self._aps.running:
            self._schedule(job)
        return self._info(job)

    def _trigger(self, job: StoredJob) -> Any:
        data = job.trigger
        if job.kind == "cron":
            return cron_trigger(str(data["expr"]), str(data["timezone"]))
        if job.kind == "every":
            start = datetime.fromisoformat(str(data["start"]))
            return IntervalTrigger(
                seconds=float(data["seconds"]), start_date=start, timezone=self._tz
            )
        if job.kind == "at":
            return DateTrigger(run_date=datetime.fromisoformat(str(data["run_date"])))
        raise ValueError(f"unknown kind of job {job.kind!r}")

    def _schedule(self, job: StoredJob) -> None:
        """Hand a job from the table to APScheduler (replacing one with its id)."""
        extra: dict[str, Any] = {}
        if job.id.startswith(REMINDER_PREFIX):
            extra["misfire_grace_time"] = None  # late rather than never
        self._aps.add_job(
            self._fire,
            trigger=self._trigger(job),
            args=(job.id, job.prompt, job.target, job.conversation_key, job.heartbeat),
            id=job.id,
            name=job.name,
            next_run_time=job.next_run_time,
            replace_existing=True,
            **extra,
        )

    @staticmethod
    def _info(job: StoredJob) -> JobInfo:
        return JobInfo(
            id=job.id,
            next_run_time=job.next_run_time,
            description=job.name,
            conversation_key=job.conversation_key or f"cron:{job.id}",
            target=job.target,
        )

    async def _fire(
        self,
        job_id: str,
        prompt: str,
        target: Target,
        conversation_key: str | None,
        heartbeat: int | None = None,
    ) -> None:
        """What every job runs: submit its prompt, and log the run."""
        message = InboundMessage(
            channel=target.channel,
            chat_id=target.chat_id,
            sender_id=SENDER,
            text=prompt if heartbeat is None else f"{prompt}\n\n{HEARTBEAT_INSTRUCTION}",
            message_id=f"{SENDER}:{job_id}:{uuid.uuid4().hex}",
            conversation_key=conversation_key or f"cron:{job_id}",
            account_id=target.account_id,
            thread_id=target.thread_id,
            sender_name=SENDER,
            is_direct=True,
            target=target,
            heartbeat=heartbeat,
        )
        try:
            await self._submit(message)
        except Exception as exc:  # the run log and the log say why; the schedule goes on
            error = mask_secrets(str(exc) or type(exc).__name__)  # kept in the run log
            log.warning("job %s failed: %s", job_id, error)
            await self._record(RunRecord(job_id, self._clock(), "failed", error))
            return
        log.info("job %s submitted to %s", job_id, message.conversation_key)
        await self._record(RunRecord(job_id, self._clock(), "submitted"))

    async def _record(self, record: RunRecord) -> None:
        try:
            await self._store.add_job_run(record, keep=RUN_LOG_KEEP)
        except Exception:
            log.exception("the run of job %s could not be logged", record.job_id)
