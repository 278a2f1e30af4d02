"""Scheduled prompts: APScheduler 3 inside botd's event loop, jobs persisted in SQLite.

A job runs a prompt by handing an ``InboundMessage`` to ``submit`` (the session manager): in a
named conversation, or in its own session ``cron:<job id>``, answering to the job's target.
Three kinds of trigger: ``cron`` (standard cron: day-of-week 0 and 7 are Sunday, and when both
day-of-month and day-of-week are restricted a day matching either fires, as in Vixie cron),
``every`` (seconds) and ``at`` (one shot).

Storage is ``state_dir/schedule.sqlite3``: APScheduler's ``SQLAlchemyJobStore`` keeps the jobs
(table ``apscheduler_jobs``) and this module keeps each job's run log (table ``job_runs``).
APScheduler persists a job's function by reference, so every job calls the module-level
``run_scheduled_job`` with plain data; a registry maps the state directory to the running
``Scheduler``.

Misfires are coalesced: runs missed while botd was down become one run on start, if the latest
one is within ``misfire_grace_time``. Reminders (id prefix ``reminder-``) have no grace limit:
a reminder missed while down still posts, late, rather than never.

The ``clock`` serves botd's own arithmetic (one-shot and interval start times, run log times,
``next_fire_time``); APScheduler itself waits on the wall clock.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.jobstores.base import JobLookupError  # type: ignore[import-untyped,unused-ignore]
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore  # type: ignore[import-untyped,unused-ignore]
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped,unused-ignore]
from apscheduler.schedulers.base import BaseScheduler  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.combining import OrTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped,unused-ignore]

from .chat import InboundMessage, Target

log = logging.getLogger(__name__)

REMINDER_PREFIX = "reminder-"
SENDER = "scheduler"
DB_NAME = "schedule.sqlite3"
RUN_LOG_KEEP = 200
"""Run records kept per job (older ones are pruned)."""

Clock = Callable[[], datetime]
Submit = Callable[[InboundMessage], Awaitable[None]]
Kind = Literal["cron", "every", "at"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


# --- standard cron ---------------------------------------------------------------------------

_FIELDS = ("minute", "hour", "day", "month", "day_of_week")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # index = standard number
_APS_WEEK = (1, 2, 3, 4, 5, 6, 0)  # APScheduler's week order (Monday first), as standard numbers


def _day_number(token: str, expr: str) -> int:
    """A day-of-week token as a standard number 0-7 (names give 0-6)."""
    word = token.strip().lower()
    if word.isdigit() and 0 <= int(word) <= 7:
        return int(word)
    if word in _DAY_NAMES:
        return _DAY_NAMES.index(word)
    raise ValueError(f"cron {expr!r}: day of week {token!r} is not 0-7 or sun..sat")


def _day_of_week(field: str, expr: str) -> str:
    """Translate a standard day-of-week field (Sunday = 0 or 7) to APScheduler's names."""
    days: set[int] = set()
    for item in field.split(","):
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"cron {expr!r}: bad step in day of week {item!r}")
            step = int(step_text)
        if base == "*":
            low, high = 0, 6
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _day_number(first, expr), _day_number(last, expr)
            if low > high:
                raise ValueError(f"cron {expr!r}: day-of-week range {base!r} runs backwards")
        else:
            low = _day_number(base, expr)
            high = 6 if slash else low  # "a/n" means from a to the end of the week
        days.update(day % 7 for day in range(low, high + 1, step))
    if len(days) == 7:
        return "*"
    # Runs of consecutive days (in Monday-first order) become ranges: "mon-fri".
    parts: list[str] = []
    run: list[int] = []
    for day in [*_APS_WEEK, -1]:
        if day in days:
            run.append(day)
            continue
        if run:
            first, last = _DAY_NAMES[run[0]], _DAY_NAMES[run[-1]]
            parts.append(first if len(run) == 1 else f"{first}-{last}")
            run = []
    return ",".join(parts)


def standard_cron_fields(expr: str) -> dict[str, str]:
    """A five-field cron expression (or ``@daily``-style macro) as ``CronTrigger`` fields.

    Day of week follows standard cron (0 and 7 are Sunday, names sun..sat) and is rewritten in
    APScheduler's names, whose numbers count from Monday. Raises ValueError naming the problem.
    """
    text = _MACROS.get(expr.strip().lower(), expr)
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(
            f"cron {expr!r}: needs 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(parts)}"
        )
    fields = dict(zip(_FIELDS, parts, strict=True))
    fields["day_of_week"] = _day_of_week(fields["day_of_week"], expr)
    return fields


def zone(name: str) -> ZoneInfo:
    """An IANA time zone, or ValueError naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def cron_trigger(expr: str, timezone: str) -> Any:
    """The APScheduler trigger of a standard cron expression in a time zone (ValueError if bad).

    When both day fields are restricted, standard cron fires on a day matching either: that is
    an ``OrTrigger`` of the two.
    """
    fields = standard_cron_fields(expr)
    tz = zone(timezone)
    try:
        if fields["day"].startswith("*") or fields["day_of_week"] == "*":
            return CronTrigger(timezone=tz, **fields)
        return OrTrigger(
            [
                CronTrigger(timezone=tz, **{**fields, "day_of_week": "*"}),
                CronTrigger(timezone=tz, **{**fields, "day": "*"}),
            ]
        )
    except ValueError as exc:
        raise ValueError(f"cron {expr!r}: {exc}") from None


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


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: str
    next_run_time: datetime | None
    """None while paused or once a one-shot job has run."""
    description: str
    conversation_key: str
    """Where the prompt runs (``cron:<id>`` for a job with its own session)."""
    target: Target


@dataclass(frozen=True, slots=True)
class RunRecord:
    job_id: str
    at: datetime
    outcome: Literal["submitted", "failed"]
    error: str | None = None


# --- the job function and its registry -------------------------------------------------------

_RUNNING: dict[str, Scheduler] = {}
"""Running schedulers by resolved state directory: how a persisted job finds its scheduler."""


async def run_scheduled_job(
    instance: str,
    job_id: str,
    prompt: str,
    target: dict[str, str | None],
    conversation_key: str | None,
    **_meta: object,
) -> None:
    """What every persisted job calls (by reference): submit its prompt through its scheduler.

    ``_meta`` carries bookkeeping stored with the job (a config job's source and fingerprint).
    """
    scheduler = _RUNNING.get(instance)
    if scheduler is None and len(_RUNNING) == 1:
        scheduler = next(iter(_RUNNING.values()))  # the state directory moved since creation
    if scheduler is None:
        log.error("job %s skipped: no running scheduler for %s", job_id, instance)
        return
    await scheduler._run(job_id, prompt, _target_from(target), conversation_key)


def _target_to(target: Target) -> dict[str, str | None]:
    # Plain data, so a stored job never depends on the Target class's pickled layout.
    return {
        "channel": target.channel,
        "chat_id": target.chat_id,
        "account_id": target.account_id,
        "thread_id": target.thread_id,
        "reply_to_id": target.reply_to_id,
    }


def _target_from(data: dict[str, str | None]) -> Target:
    return Target(
        channel=str(data["channel"]),
        chat_id=str(data["chat_id"]),
        account_id=str(data.get("account_id") or "default"),
        thread_id=data.get("thread_id"),
        reply_to_id=data.get("reply_to_id"),
    )


class _RunLog:
    """The ``job_runs`` table beside APScheduler's jobs in ``schedule.sqlite3``."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("PRAGMA busy_timeout = 5000")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS job_runs ("
            " id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, at TEXT NOT NULL,"
            " outcome TEXT NOT NULL, error TEXT)"
        )
        self._conn.execute("CREATE INDEX IF NOT EXISTS job_runs_job ON job_runs (job_id, id)")

    def add(self, record: RunRecord) -> None:
        self._conn.execute(
            "INSERT INTO job_runs (job_id, at, outcome, error) VALUES (?, ?, ?, ?)",
            (record.job_id, record.at.isoformat(), record.outcome, record.error),
        )
        self._conn.execute(
            "DELETE FROM job_runs WHERE job_id = ? AND id NOT IN"
            " (SELECT id FROM job_runs WHERE job_id = ? ORDER BY id DESC LIMIT ?)",
            (record.job_id, record.job_id, RUN_LOG_KEEP),
        )

    def get(self, job_id: str) -> list[RunRecord]:
        rows = self._conn.execute(
            "SELECT at, outcome, error FROM job_runs WHERE job_id = ? ORDER BY id", (job_id,)
        ).fetchall()
        return [
            RunRecord(job_id, datetime.fromisoformat(at), outcome, error)
            for at, outcome, error in rows
        ]

    def close(self) -> None:
        self._conn.close()


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
    """botd's scheduler (see the module docstring). ``start`` inside the running loop."""

    def __init__(
        self,
        state_dir: Path,
        submit: Submit,
        *,
        timezone: str | None = "UTC",
        clock: Clock = _utc_now,
        misfire_grace_time: int = 3600,
    ) -> None:
        self.state_dir = state_dir
        self.path = state_dir / DB_NAME
        self.timezone = timezone or "UTC"
        self._tz = zone(self.timezone)
        self._submit = submit
        self._clock = clock
        self._instance = str(state_dir.resolve())
        self._aps: Any = _LoopScheduler(
            jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{self.path}")},
            job_defaults={
                "coalesce": True,
                "misfire_grace_time": misfire_grace_time,
                "max_instances": 1,
            },
            timezone=self._tz,
        )
        self._log: _RunLog | None = None
        self._config: list[JobSpec] | None = None

    # lifecycle

    def start(self) -> None:
        """Open the stores and begin running jobs (missed runs coalesce into one now)."""
        if self._instance in _RUNNING:
            raise RuntimeError(f"a scheduler is already running on {self.state_dir}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._log = _RunLog(self.path)
        _RUNNING[self._instance] = self
        self._aps.start()
        if self._config is not None:  # config handed over before start
            self.sync_config_jobs(self._config)
            self._config = None

    def shutdown(self) -> None:
        """Stop running jobs (a run in flight is cancelled) and close the stores.

        Call it on the loop's thread. AsyncIOScheduler defers its shutdown to the loop's next
        turn; this one completes on return, so a new Scheduler may open the same state
        directory at once.
        """
        if self._aps.running:
            self._aps.shutdown_now()
        _RUNNING.pop(self._instance, None)
        if self._log is not None:
            self._log.close()
            self._log = None

    # jobs

    def add_cron(
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
        tz = timezone or self.timezone
        trigger = cron_trigger(expr, tz)
        return self._add(
            job_id, trigger, f"cron {expr} ({tz})", prompt, target, conversation_key, {}
        )

    def add_every(
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
        if seconds <= 0:
            raise ValueError(f"job {job_id}: interval must be positive, got {seconds}")
        start = self._clock() + timedelta(seconds=seconds)
        trigger = IntervalTrigger(seconds=seconds, start_date=start, timezone=self._tz)
        extra = {} if first_run is None else {"next_run_time": self._aware(first_run, None)}
        return self._add(
            job_id, trigger, f"every {seconds:g}s", prompt, target, conversation_key, extra
        )

    def add_at(
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
        run_date = self._aware(when, timezone)
        trigger = DateTrigger(run_date=run_date)
        extra: dict[str, Any] = {}
        if job_id.startswith(REMINDER_PREFIX):
            extra["misfire_grace_time"] = None  # late rather than never
        return self._add(
            job_id,
            trigger,
            f"at {run_date.isoformat()}",
            prompt,
            target,
            conversation_key,
            extra,
            label,
        )

    def sync_config_jobs(self, jobs: list[JobSpec]) -> None:
        """Make the configured jobs exactly ``jobs``; jobs the agent created are kept.

        A job whose definition is unchanged is left alone, so a run missed while botd was down
        still happens (coalesced) after a restart. Called before ``start``, it applies on start.
        """
        if not self._aps.running:
            self._config = list(jobs)
            return
        wanted = {spec.id: spec for spec in jobs}
        for spec in jobs:
            if spec.id.startswith(REMINDER_PREFIX):
                raise ValueError(f"job {spec.id}: the prefix {REMINDER_PREFIX!r} is for reminders")
        for job in self._aps.get_jobs():
            if job.kwargs.get("source") == "config" and job.id not in wanted:
                self._aps.remove_job(job.id)
        for spec in jobs:
            fingerprint = repr(spec)
            existing = self._aps.get_job(spec.id)
            if existing is not None and existing.kwargs.get("fingerprint") == fingerprint:
                continue
            self._add_spec(spec)
            job = self._aps.get_job(spec.id)
            self._aps.modify_job(
                spec.id, kwargs={**job.kwargs, "source": "config", "fingerprint": fingerprint}
            )

    def _add_spec(self, spec: JobSpec) -> None:
        common: dict[str, Any] = {
            "prompt": spec.prompt,
            "target": spec.target,
            "conversation_key": spec.conversation_key,
        }
        given = [kind for kind in ("cron", "every", "at") if getattr(spec, kind) is not None]
        if len(given) != 1:
            raise ValueError(f"job {spec.id}: give exactly one of cron, every, at")
        if spec.cron is not None:
            self.add_cron(spec.id, spec.cron, timezone=spec.timezone, **common)
        elif spec.every is not None:
            self.add_every(spec.id, spec.every, **common)
        elif spec.at is not None:
            self.add_at(spec.id, spec.at, timezone=spec.timezone, **common)

    def list_jobs(self, conversation_key: str | None = None) -> list[JobInfo]:
        """All jobs, or those running in ``conversation_key``; soonest first."""
        infos = [self._info(job) for job in self._aps.get_jobs()]
        if conversation_key is not None:
            infos = [info for info in infos if info.conversation_key == conversation_key]
        far = datetime.max.replace(tzinfo=UTC)
        return sorted(infos, key=lambda info: (info.next_run_time or far, info.id))

    def get(self, job_id: str) -> JobInfo | None:
        job = self._aps.get_job(job_id)
        return None if job is None else self._info(job)

    def cancel(self, job_id: str) -> bool:
        """Remove a job; False if there was none. Its run log is kept."""
        try:
            self._aps.remove_job(job_id)
        except JobLookupError:
            return False
        return True

    def run_now(self, job_id: str) -> bool:
        """Run a job at once (its later schedule unchanged for cron and interval jobs)."""
        if self._aps.get_job(job_id) is None:
            return False
        self._aps.modify_job(job_id, next_run_time=datetime.now(UTC))
        return True

    def next_fire_time(self, job_id: str, now: datetime | None = None) -> datetime | None:
        """When the job's trigger fires next after ``now`` (default: the clock)."""
        job = self._aps.get_job(job_id)
        if job is None:
            raise KeyError(job_id)
        return cast("datetime | None", job.trigger.get_next_fire_time(None, now or self._clock()))

    def run_log(self, job_id: str) -> list[RunRecord]:
        """Each run of the job, oldest first (the last ``RUN_LOG_KEEP``)."""
        if self._log is None:
            raise RuntimeError("the scheduler is not started")
        return self._log.get(job_id)

    def now(self) -> datetime:
        return self._clock()

    # internals

    def _aware(self, when: datetime, timezone: str | None) -> datetime:
        if when.tzinfo is not None:
            return when
        tz: tzinfo = self._tz if timezone is None else zone(timezone)
        return when.replace(tzinfo=tz)

    def _add(
        self,
        job_id: str,
        trigger: Any,
        description: str,
        prompt: str,
        target: Target,
        conversation_key: str | None,
        extra: dict[str, Any],
        label: str | None = None,
    ) -> JobInfo:
        if not job_id.strip():
            raise ValueError("a job needs an id")
        kwargs = {
            "instance": self._instance,
            "job_id": job_id,
            "prompt": prompt,
            "target": _target_to(target),
            "conversation_key": conversation_key,
        }
        summary = label or prompt
        summary = summary if len(summary) <= 60 else summary[:59] + "…"
        job = self._aps.add_job(
            run_scheduled_job,
            trigger=trigger,
            id=job_id,
            name=f"{description}: {summary}",
            kwargs=kwargs,
            replace_existing=True,
            **extra,
        )
        return self._info(job)

    @staticmethod
    def _info(job: Any) -> JobInfo:
        kwargs: dict[str, Any] = job.kwargs
        key = kwargs.get("conversation_key") or f"cron:{job.id}"
        return JobInfo(
            id=str(job.id),
            next_run_time=getattr(job, "next_run_time", None),  # unset while pending
            description=str(job.name),
            conversation_key=str(key),
            target=_target_from(kwargs["target"]),
        )

    async def _run(
        self, job_id: str, prompt: str, target: Target, conversation_key: str | None
    ) -> None:
        message = InboundMessage(
            channel=target.channel,
            chat_id=target.chat_id,
            sender_id=SENDER,
            text=prompt,
            message_id=f"{SENDER}:{job_id}:{uuid.uuid4().hex}",
            conversation_key=conversation_key or f"cron:{job_id}",
            account_id=target.account_id,
            thread_id=target.thread_id,
            sender_name=SENDER,
            is_direct=True,
            target=target,
        )
        try:
            await self._submit(message)
        except Exception as exc:  # the run log and the log say why; the schedule goes on
            error = str(exc) or type(exc).__name__
            log.warning("job %s failed: %s", job_id, error)
            self._record(RunRecord(job_id, self._clock(), "failed", error))
            return
        log.info("job %s submitted to %s", job_id, message.conversation_key)
        self._record(RunRecord(job_id, self._clock(), "submitted"))

    def _record(self, record: RunRecord) -> None:
        if self._log is not None:
            self._log.add(record)
