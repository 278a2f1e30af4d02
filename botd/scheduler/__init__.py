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
job store, rebuilt from the table whenever this node starts running the schedule; adding,
cancelling and syncing jobs write the table. Each run is **fired** through the store
(``JobLedger.fire_job``): in one transaction a compare-and-set of the job's next run time (from
the one this node knew to the next) and the accept of its prompt into the inbox under the
dedupe key ``job:<id>:<run time>``. So a run fires once, even when two nodes both believe they
run the schedule; a fire that finds the next run time moved writes nothing, and this node
reloads that job from the table. A one-shot job is removed once fired, except a configured
one: it stays with no next run time, so the config sync (which adds jobs it does not find)
does not bring it back to run again after a restart. Jobs call a bound method of their
scheduler with plain arguments: nothing is pickled. A ``schedule.sqlite3`` left by an earlier
botd is imported once at start (``botd.scheduler.store``) and then left alone.

Several nodes (``leases``, on the ``postgres`` backend): one node runs the schedule, the
holder of the lease ``scheduler``; the others retry the claim every third of the TTL. Losing
the lease pauses this node's schedule at once. The holder reloads the table as often, so a
job another node added, changed or cancelled is picked up. Without ``leases`` (SQLite) the
node is alone and runs the schedule from its start.

Misfires are coalesced: runs missed while botd was down become one run on start, if the latest
one is within ``misfire_grace_time``. Reminders (id prefix ``reminder-``) have no grace limit:
a reminder missed while down still posts, late, rather than never.

The ``clock`` serves botd's own arithmetic (one-shot and interval start times, a new job's
first run time, run log times); APScheduler itself waits on the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Literal, cast

from apscheduler.jobstores.base import JobLookupError  # type: ignore[import-untyped,unused-ignore]
from apscheduler.jobstores.memory import MemoryJobStore  # type: ignore[import-untyped,unused-ignore]
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped,unused-ignore]
from apscheduler.schedulers.base import BaseScheduler  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped,unused-ignore]

from ..chat import InboundMessage, Target
from ..cluster.fencing import Fence
from ..cluster.leases import Lease, LeaseKeeper
from ..config.cron import cron_trigger, zone
from ..ops.logging import mask_secrets
from ..store import JobLedger, RunRecord, StoredJob
from ..subscriber import HEARTBEAT_INSTRUCTION
from .slots import Slot, SlotExecutor
from .store import import_legacy_jobs

log = logging.getLogger(__name__)

REMINDER_PREFIX = "reminder-"
SENDER = "scheduler"
LEASE = "scheduler"
"""The lease whose holder runs the schedule (several nodes)."""
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
    ``leases``: this node's lease keeper when it is one of several (the schedule runs while
    it holds ``scheduler``); None for a node alone.
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
        leases: LeaseKeeper | None = None,
    ) -> None:
        self.timezone = timezone or "UTC"
        self._tz = zone(self.timezone)
        self._store = store
        self._submit = submit
        self._clock = clock
        self._legacy_db = legacy_db
        self._leases = leases
        self._aps: Any = _LoopScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": SlotExecutor()},
            job_defaults={
                "coalesce": True,
                "misfire_grace_time": misfire_grace_time,
                "max_instances": 1,
            },
            timezone=self._tz,
        )
        self._config: list[JobSpec] | None = None
        self._leading = False
        self._known: dict[str, StoredJob] = {}
        """Each scheduled job as this node last read or wrote its row."""
        self._lease_task: asyncio.Task[None] | None = None

    # lifecycle

    async def start(self) -> None:
        """Load the jobs and begin running them (missed runs coalesce into one now); with
        ``leases``, begin claiming the lease that runs them."""
        if self._aps.running:
            raise RuntimeError("the scheduler is already running")
        if self._legacy_db is not None:
            await import_legacy_jobs(self._store, self._legacy_db)
        if self._config is not None:  # config handed over before start
            await self._sync(self._config)
            self._config = None
        self._aps.start(paused=True)
        if self._leases is None:
            await self._lead()
        else:
            self._lease_task = asyncio.create_task(
                self._keep_lease(self._leases), name="scheduler-lease"
            )

    @property
    def leading(self) -> bool:
        """Whether this node runs the schedule now."""
        return self._leading

    def shutdown(self) -> None:
        """Stop running jobs (a run in flight is cancelled) and claiming the lease.

        Call it on the loop's thread. AsyncIOScheduler defers its shutdown to the loop's next
        turn; this one completes on return, so the store may be closed at once.
        """
        self._leading = False
        if self._lease_task is not None:
            self._lease_task.cancel()
        if self._aps.running:
            self._aps.shutdown_now()

    async def close(self) -> None:
        """``shutdown``, then wait for the lease task to end."""
        self.shutdown()
        if self._lease_task is not None:
            await asyncio.wait({self._lease_task})
            self._lease_task = None

    async def _lead(self) -> None:
        """Run the schedule: every job from the table, handed to APScheduler."""
        self._aps.remove_all_jobs()
        self._known.clear()
        for job in await self._store.load_jobs():
            self._schedule_safely(job)
        self._leading = True
        self._aps.resume()

    def _follow(self) -> None:
        """Stop running the schedule, at once (a run in flight goes on: its fire writes
        nothing if another node fired it)."""
        self._leading = False
        if self._aps.running:  # not shut down meanwhile
            self._aps.pause()
            self._aps.remove_all_jobs()
        self._known.clear()

    async def _keep_lease(self, keeper: LeaseKeeper) -> None:
        """Claim the lease every third of its TTL until it is held; run the schedule while
        it is, and pause it the moment it is lost; then claim again."""
        while True:
            try:
                lease = await keeper.try_claim(LEASE)
            except Exception as exc:  # the database is away: claimed on a later try
                log.warning("the scheduler's lease could not be claimed: %s", exc)
                lease = None
            if lease is None:
                await asyncio.sleep(keeper.renew_every)
                continue
            log.info("this node runs the schedule (lease %s, epoch %d)", LEASE, lease.epoch)
            await self._run_while_held(lease, keeper.renew_every)
            await asyncio.sleep(keeper.renew_every)  # as a standby, before claiming again

    async def _run_while_held(self, lease: Lease, every: float) -> None:
        refresher: asyncio.Task[None] | None = None
        try:
            await self._lead()
            refresher = asyncio.create_task(self._refresh_every(every), name="scheduler-refresh")
            await lease.lost.wait()
        except Exception as exc:  # the jobs could not be read: the lease goes for another
            log.warning("the schedule could not be loaded (%s); the lease is given up", exc)
            if self._leases is not None:
                with contextlib.suppress(Exception):
                    await self._leases.release(lease)
        finally:
            self._follow()
            if refresher is not None:
                refresher.cancel()
                await asyncio.wait({refresher})
        if lease.lost.is_set():
            log.warning("lease %s lost: this node's schedule is paused", LEASE)

    async def _refresh_every(self, every: float) -> None:
        """Take up what other nodes changed in the table (a job added, changed, cancelled)."""
        while True:
            await asyncio.sleep(every)
            try:
                await self._refresh()
            except Exception as exc:  # tried again next time
                log.warning("the jobs could not be reloaded: %s", exc)

    async def _refresh(self) -> None:
        rows = {job.id: job for job in await self._store.load_jobs()}
        if not self._leading:
            return
        for job_id in self._known.keys() - rows.keys():
            self._unschedule(job_id)
        for job in rows.values():
            if self._known.get(job.id) != job:
                self._schedule_safely(job)

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
        fence: Fence | None = None,
    ) -> JobInfo:
        """Once at ``when`` (a naive time is read in ``timezone``, default the scheduler's).

        ``label`` names the job in listings instead of its prompt (a reminder's own words);
        ``fence``: the lease of the conversation whose run sets it (a reminder), which the
        write is fenced by (None: unfenced).
        """
        job = self._at_job(job_id, when, prompt, target, timezone, conversation_key, label)
        return await self._put(job, fence)

    async def sync_config_jobs(self, jobs: list[JobSpec]) -> None:
        """Make the configured jobs exactly ``jobs``; jobs the agent created are kept.

        A job whose definition is unchanged is left alone, so a run missed while botd was down
        still happens (coalesced) after a restart. Called before ``start``, it applies on start.
        Every job is checked before anything changes: a bad one raises ValueError.
        """
        if not self._aps.running:  # not started
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

    async def cancel(self, job_id: str, *, fence: Fence | None = None) -> bool:
        """Remove a job; False if there was none. Its run log is kept. ``fence``: as
        ``add_at``'s."""
        removed = await self._store.fenced(fence).delete_job(job_id)
        self._unschedule(job_id)
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

    async def _put(self, job: StoredJob, fence: Fence | None = None) -> JobInfo:
        """Write a job to the table (fenced by ``fence``), and hand it to APScheduler when
        this node runs the schedule (else the node that does takes it from the table)."""
        await self._store.fenced(fence).save_job(job)
        if self._leading:
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
        """Hand a job from the table to APScheduler (replacing one with its id); a job with
        no next run time (a configured one-shot that ran) is not scheduled."""
        self._known[job.id] = job
        if job.next_run_time is None:
            self._unschedule(job.id, forget=False)
            return
        extra: dict[str, Any] = {}
        if job.id.startswith(REMINDER_PREFIX):
            extra["misfire_grace_time"] = None  # late rather than never
        self._aps.add_job(
            self._fire,
            trigger=self._trigger(job),
            args=(job,),
            kwargs={"slot": None},  # the run's, filled in by SlotExecutor
            id=job.id,
            name=job.name,
            next_run_time=job.next_run_time,
            replace_existing=True,
            **extra,
        )

    def _schedule_safely(self, job: StoredJob) -> None:
        try:
            self._schedule(job)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("job %s cannot be scheduled and is skipped: %s", job.id, exc)

    def _unschedule(self, job_id: str, *, forget: bool = True) -> None:
        if forget:
            self._known.pop(job_id, None)
        if self._aps.running:
            with contextlib.suppress(JobLookupError):  # not scheduled, or already done
                self._aps.remove_job(job_id)

    async def _reload(self, job_id: str) -> None:
        """Schedule ``job_id`` as the table has it now (a fire found it changed)."""
        try:
            job = await self._store.get_job(job_id)
        except Exception as exc:  # tried again by the next reload or the job's next run
            log.warning("job %s could not be reloaded: %s", job_id, exc)
            self._known.pop(job_id, None)
            return
        if not self._leading:
            return
        if job is None:
            self._unschedule(job_id)
        else:
            self._schedule_safely(job)

    @staticmethod
    def _info(job: StoredJob) -> JobInfo:
        return JobInfo(
            id=job.id,
            next_run_time=job.next_run_time,
            description=job.name,
            conversation_key=job.conversation_key or f"cron:{job.id}",
            target=job.target,
        )

    def _prompt(self, job: StoredJob, at: datetime) -> InboundMessage:
        """The message a run of ``job`` at ``at`` hands to its conversation; its id is the
        run's dedupe key, the same on every node."""
        target = job.target
        prompt = job.prompt
        return InboundMessage(
            channel=target.channel,
            chat_id=target.chat_id,
            sender_id=SENDER,
            text=prompt if job.heartbeat is None else f"{prompt}\n\n{HEARTBEAT_INSTRUCTION}",
            message_id=f"job:{job.id}:{at.astimezone(UTC).isoformat()}",
            conversation_key=job.conversation_key or f"cron:{job.id}",
            account_id=target.account_id,
            thread_id=target.thread_id,
            sender_name=SENDER,
            is_direct=True,
            target=target,
            heartbeat=job.heartbeat,
            reactable=False,
        )

    async def _fire(self, job: StoredJob, *, slot: Slot) -> None:
        """What every job runs: fire its run through the store, hand the accepted prompt to
        its conversation, and log the run."""
        message = None if slot.missed else self._prompt(job, slot.at)
        keep = job.source == "config"
        # The compare-and-set expects the next run time this node last read or wrote in the
        # table, not APScheduler's: APScheduler moves its own past a run it skips (the job's
        # last run still in flight), the table does not, and the two would never meet again.
        known = self._known.get(job.id)
        due = slot.due if known is None or known.next_run_time is None else known.next_run_time
        try:
            fired = await self._store.fire_job(job.id, due, slot.next, message, keep=keep)
        except Exception as exc:
            # Nothing written: the table still has the run due. Forgotten here, the job is
            # taken from the table again by the next reload (several nodes), by its next
            # run's fire finding the table behind, or by the next start.
            self._known.pop(job.id, None)
            error = mask_secrets(str(exc) or type(exc).__name__)
            log.warning("job %s: its run at %s could not be written: %s", job.id, slot.at, error)
            await self._record(RunRecord(job.id, self._clock(), "failed", error))
            return
        if not fired.advanced:
            log.info("job %s: its run at %s was fired elsewhere, or it changed", job.id, slot.at)
            await self._reload(job.id)
            return
        if slot.next is None and not keep:
            self._known.pop(job.id, None)
        else:
            self._known[job.id] = replace(job, next_run_time=slot.next)
        if message is None:
            log.warning("job %s: its run at %s was missed beyond its grace", job.id, slot.at)
            return
        if fired.inbox_id is None:  # the run's key was recorded by an earlier fire
            return
        try:
            await self._submit(replace(message, inbox_id=fired.inbox_id))
        except Exception as exc:  # accepted: the next start resumes it; the schedule goes on
            error = mask_secrets(str(exc) or type(exc).__name__)  # kept in the run log
            log.warning("job %s failed: %s", job.id, error)
            await self._record(RunRecord(job.id, self._clock(), "failed", error))
            return
        log.info("job %s submitted to %s", job.id, message.conversation_key)
        await self._record(RunRecord(job.id, self._clock(), "submitted"))

    async def _record(self, record: RunRecord) -> None:
        try:
            await self._store.add_job_run(record, keep=RUN_LOG_KEEP)
        except Exception:
            log.exception("the run of job %s could not be logged", record.job_id)
