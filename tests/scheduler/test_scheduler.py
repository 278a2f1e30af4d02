"""The scheduler: standard cron, triggers under a controllable clock, runs, reminders, restarts."""

from __future__ import annotations

import asyncio
import pickle
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped]

from botd.agent.tools.base import ToolContext
from botd.agent.tools.schedule.tool import ScheduleTool
from botd.chat import InboundMessage, Target
from botd.cluster.fencing import RunScope
from botd.config.cron import cron_trigger, standard_cron_fields
from botd.scheduler import JobInfo, JobSpec, Scheduler
from botd.store import Store
from botd.store.sqlite import SqliteStore
from tests.support.waiting import HANG_GUARD, until

BERLIN = ZoneInfo("Europe/Berlin")
TARGET = Target("telegram", "100", thread_id="7")


class Clock:
    """A clock the test moves by hand; starts at the real time so APScheduler agrees."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


class Inbox:
    """``submit`` for the scheduler: collects messages and lets a test await the next one."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self._arrived = asyncio.Event()

    async def __call__(self, message: InboundMessage) -> None:
        self.messages.append(message)
        self._arrived.set()

    async def wait(self, count: int = 1) -> list[InboundMessage]:
        async with asyncio.timeout(HANG_GUARD):
            while len(self.messages) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.messages


@pytest.fixture
def inbox() -> Inbox:
    return Inbox()


@pytest.fixture
async def scheduler(store: Store, inbox: Inbox) -> AsyncIterator[Scheduler]:
    sched = Scheduler(store, inbox, timezone="Europe/Berlin")
    yield sched
    sched.shutdown()


def runs_in_flight() -> list[asyncio.Task[object]]:
    """The scheduler's runs started and not yet finished (its executor runs each in a task
    of its own, which fires the run or, missed beyond its grace, only moves the job on)."""
    return [
        task
        for task in asyncio.all_tasks()
        if not task.done() and getattr(task.get_coro(), "__qualname__", "") == "Scheduler._fire"
    ]


async def passed_over(scheduler: Scheduler, job_id: str) -> bool:
    """Whether APScheduler has handled every due time of ``job_id``: its next run is in the
    future (set once a pass over the due jobs has started their runs) and none of the runs
    it started is still going. Any further run, right or wrong, would have shown by then."""
    info = await scheduler.get(job_id)
    due = info is None or info.next_run_time is None or info.next_run_time <= datetime.now(UTC)
    return not due and not runs_in_flight()


async def fire_now(scheduler: Scheduler, job_id: str) -> None:
    """Make a running job due now (instead of waiting for its time): in the table, and
    scheduled from it again as the scheduler does after another node changed a job (its
    fire's compare-and-set expects the next run time the scheduler last read); its later
    schedule is unchanged."""
    job = await scheduler._store.get_job(job_id)
    assert job is not None
    due = replace(job, next_run_time=datetime.now(UTC))
    await scheduler._store.save_job(due)
    scheduler._schedule(due)


# --- standard cron -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("0", "sun"),
        ("7", "sun"),
        ("1", "mon"),
        ("1-5", "mon-fri"),
        ("0,6", "sat-sun"),
        ("5-7", "fri-sun"),
        ("0-6", "*"),
        ("*", "*"),
        ("*/2", "tue,thu,sat-sun"),  # standard */2 is 0,2,4,6
        ("SUN", "sun"),
        ("mon-wed,fri", "mon-wed,fri"),
        ("sat-7", "sat-sun"),
    ],
)
def test_day_of_week_is_standard(field: str, expected: str) -> None:
    assert standard_cron_fields(f"0 9 * * {field}")["day_of_week"] == expected


def test_cron_fields_and_macros() -> None:
    assert standard_cron_fields("*/15 8-18 1 jan *") == {
        "minute": "*/15",
        "hour": "8-18",
        "day": "1",
        "month": "jan",
        "day_of_week": "*",
    }
    assert standard_cron_fields("@weekly")["day_of_week"] == "sun"


@pytest.mark.parametrize("expr", ["0 9 * *", "0 9 * * 8", "0 9 * * 5-1", "0 9 * * */0", "x"])
def test_bad_cron_is_refused(expr: str) -> None:
    with pytest.raises(ValueError, match="cron"):
        standard_cron_fields(expr)


def test_bad_cron_field_and_zone_are_refused() -> None:
    with pytest.raises(ValueError, match="cron"):
        cron_trigger("61 9 * * *", "UTC")
    with pytest.raises(ValueError, match="time zone"):
        cron_trigger("0 9 * * *", "Mars/Olympus")


def test_sunday_zero_in_berlin_fires_sunday_nine_berlin_time() -> None:
    trigger = cron_trigger("0 9 * * 0", "Europe/Berlin")
    now = datetime(2025, 3, 26, 12, 0, tzinfo=UTC)  # a Wednesday
    fire = trigger.get_next_fire_time(None, now)
    local = fire.astimezone(BERLIN)
    assert (local.weekday(), local.hour, local.minute) == (6, 9, 0)  # Sunday 09:00
    assert local.date().isoformat() == "2025-03-30"  # the DST switch day: still 09:00 local
    assert fire.astimezone(UTC).hour == 7  # CEST, UTC+2
    following = trigger.get_next_fire_time(fire, fire + timedelta(seconds=1))
    assert following.astimezone(BERLIN).date().isoformat() == "2025-04-06"


def test_both_day_fields_restricted_fire_on_either() -> None:
    trigger = cron_trigger("0 9 1 * 1", "UTC")  # the 1st of the month or any Monday
    now = datetime(2025, 6, 28, tzinfo=UTC)  # a Saturday
    first = trigger.get_next_fire_time(None, now)
    assert first == datetime(2025, 6, 30, 9, tzinfo=UTC)  # Monday
    second = trigger.get_next_fire_time(first, first + timedelta(seconds=1))
    assert second == datetime(2025, 7, 1, 9, tzinfo=UTC)  # the 1st, a Tuesday


# --- triggers under the clock ----------------------------------------------------------------


async def next_run(scheduler: Scheduler, job_id: str) -> datetime | None:
    info = await scheduler.get(job_id)
    assert info is not None
    return info.next_run_time


async def test_jobs_next_fire_times(store: Store, inbox: Inbox) -> None:
    clock = Clock(datetime(2025, 1, 1, 12, 0, tzinfo=UTC))  # a Wednesday
    # Not started: the jobs are only in the table, their first run times computed by the clock.
    sched = Scheduler(store, inbox, timezone="Europe/Berlin", clock=clock)
    try:
        await sched.add_cron(
            "weekly", "0 9 * * 0", prompt="p", target=TARGET, timezone="Europe/Berlin"
        )
        await sched.add_every("tick", 90, prompt="p", target=TARGET)
        await sched.add_at("once", datetime(2025, 1, 2, 8, 30), prompt="p", target=TARGET)

        assert await next_run(sched, "weekly") == datetime(2025, 1, 5, 9, tzinfo=BERLIN)
        assert await next_run(sched, "tick") == clock.now + timedelta(seconds=90)
        clock.now += timedelta(seconds=100)
        # The interval counts from the job's creation: its stored start, not from now.
        tick = await store.get_job("tick")
        assert tick is not None and tick.kind == "every"
        start = datetime.fromisoformat(tick.trigger["start"])
        interval = IntervalTrigger(seconds=tick.trigger["seconds"], start_date=start)
        assert interval.get_next_fire_time(None, clock.now) == clock.now + timedelta(seconds=80)
        # A naive one-shot time is read in the scheduler's zone.
        assert await next_run(sched, "once") == datetime(2025, 1, 2, 8, 30, tzinfo=BERLIN)
    finally:
        sched.shutdown()


# --- execution -------------------------------------------------------------------------------


async def test_due_job_submits_its_prompt(scheduler: Scheduler, store: Store, inbox: Inbox) -> None:
    await scheduler.start()
    await scheduler.add_at(
        "ping", datetime.now(UTC) - timedelta(seconds=1), prompt="hi", target=TARGET
    )
    await scheduler.add_at(
        "named",
        datetime.now(UTC) - timedelta(seconds=1),
        prompt="report",
        target=TARGET,
        conversation_key="telegram:100",
    )
    messages = await inbox.wait(2)
    by_text = {m.text: m for m in messages}
    own = by_text["hi"]
    assert own.conversation_key == "cron:ping"
    assert (own.channel, own.chat_id, own.thread_id) == ("telegram", "100", "7")
    assert own.sender_id == "scheduler" and own.is_direct
    assert own.target == TARGET and own.reply_target() == TARGET
    assert by_text["report"].conversation_key == "telegram:100"
    assert own.message_id != by_text["report"].message_id
    await until(lambda: store.job_runs("ping"), "the run of ping logged")
    assert [r.outcome for r in await store.job_runs("ping")] == ["submitted"]
    assert await scheduler.list_jobs() == []  # one-shot jobs are gone once run


async def test_failed_submit_is_logged_and_schedule_goes_on(store: Store) -> None:
    calls: list[InboundMessage] = []
    done = asyncio.Event()

    async def failing(message: InboundMessage) -> None:
        calls.append(message)
        done.set()
        raise RuntimeError("session closed")

    sched = Scheduler(store, failing)
    await sched.start()
    try:
        await sched.add_every("tick", 3600, prompt="p", target=TARGET)
        await fire_now(sched, "tick")
        async with asyncio.timeout(HANG_GUARD):
            await done.wait()
            await until(lambda: store.job_runs("tick"), "the run logged")
        record = (await store.job_runs("tick"))[0]
        assert (record.outcome, record.error) == ("failed", "session closed")
        assert [job.id for job in await sched.list_jobs()] == ["tick"]
    finally:
        sched.shutdown()


async def test_a_run_skipped_while_the_last_one_is_in_flight_does_not_stop_the_job(
    store: Store,
) -> None:
    """APScheduler skips a run while the job's last one is still in flight and moves its own
    next run time past it; the table keeps the one the last fire wrote. The next fire must
    still find it there (it did not: every later fire took the job for changed elsewhere)."""
    submitted: list[InboundMessage] = []
    held = asyncio.Event()

    async def submit(message: InboundMessage) -> None:
        submitted.append(message)
        if len(submitted) == 1:
            await held.wait()  # the first fire in flight past the next run time

    async def skipped() -> bool:
        aps = sched._aps.get_job("tick")
        row = await store.get_job("tick")
        return aps is not None and row is not None and aps.next_run_time > row.next_run_time

    sched = Scheduler(store, submit)
    await sched.start()
    try:
        await sched.add_every("tick", 0.2, prompt="p", target=TARGET)
        await until(lambda: submitted, "the first fire")
        await until(skipped, "a run skipped while the first one is in flight")
        held.set()
        await until(lambda: len(submitted) >= 3, "the job firing on")
    finally:
        sched.shutdown()
    assert len({m.message_id for m in submitted}) == len(submitted)


async def test_each_run_has_its_own_message_id(scheduler: Scheduler, inbox: Inbox) -> None:
    await scheduler.start()
    await scheduler.add_every("tick", 3600, prompt="p", target=TARGET)
    await fire_now(scheduler, "tick")
    await inbox.wait(1)
    await fire_now(scheduler, "tick")
    messages = await inbox.wait(2)
    assert messages[0].message_id != messages[1].message_id
    assert all(m.conversation_key == "cron:tick" for m in messages)


# --- reminders through the tool --------------------------------------------------------------

ORIGIN = Target("slack", "C1", "acme", thread_id="171.5", reply_to_id="171.9")


def context(key: str = "slack:acme:C1:171.5", origin: Target | None = ORIGIN) -> ToolContext:
    return ToolContext(scope=RunScope(key), origin=origin, call_id="call-1")


async def test_reminder_posts_back_to_its_conversation(scheduler: Scheduler, inbox: Inbox) -> None:
    await scheduler.start()
    tool = ScheduleTool(scheduler)
    assert tool.spec.name == "schedule"
    out = await tool.run({"action": "create", "in_minutes": 30, "message": "call Bob"}, context())
    assert not out.is_error, out.text
    job_id = out.details["id"]
    assert job_id.startswith("reminder-")

    listed = await tool.run({"action": "list"}, context())
    assert job_id in listed.text
    assert [job.id for job in await scheduler.list_jobs("slack:acme:C1:171.5")] == [job_id]
    assert (await tool.run({"action": "list"}, context("other"))).details["jobs"] == []

    await fire_now(scheduler, job_id)  # drive it now instead of waiting half an hour
    (message,) = await inbox.wait(1)
    assert "call Bob" in message.text
    assert message.conversation_key == "slack:acme:C1:171.5"
    assert message.reply_target() == Target("slack", "C1", "acme", thread_id="171.5")
    assert (message.channel, message.account_id, message.chat_id) == ("slack", "acme", "C1")


async def test_reminder_create_errors_and_cancel(scheduler: Scheduler) -> None:
    await scheduler.start()
    tool = ScheduleTool(scheduler)
    bad: list[tuple[dict[str, object], str]] = [
        ({"action": "create", "message": "x"}, "exactly one"),
        ({"action": "create", "message": "x", "at": "soon"}, "ISO 8601"),
        ({"action": "create", "message": "x", "at": "2000-01-01T10:00"}, "past"),
        ({"action": "create", "message": "x", "in_minutes": -5}, "positive"),
        ({"action": "create", "message": " ", "in_minutes": 5}, "empty"),
        ({"action": "cancel"}, "'id'"),
        ({"action": "fly"}, "unknown action"),
    ]
    for args, words in bad:
        out = await tool.run(args, context())
        assert out.is_error and words in out.text, (args, out.text)
    nowhere = await tool.run(
        {"action": "create", "message": "x", "in_minutes": 5}, context(origin=None)
    )
    assert nowhere.is_error

    at = (datetime.now(BERLIN) + timedelta(days=1)).replace(tzinfo=None).isoformat()
    made = await tool.run({"action": "create", "message": "x", "at": at}, context())
    job_id = made.details["id"]
    info = await scheduler.get(job_id)
    assert info is not None and info.next_run_time is not None
    assert info.next_run_time.replace(tzinfo=None).isoformat() == at  # read in Berlin time

    other = await tool.run({"action": "cancel", "id": job_id}, context("other"))
    assert other.is_error  # another conversation's reminder is not touched
    done = await tool.run({"action": "cancel", "id": job_id}, context())
    assert not done.is_error
    assert await scheduler.list_jobs() == []
    assert not await scheduler.cancel(job_id)


# --- persistence, config, misfires -----------------------------------------------------------


async def test_reminder_survives_a_restart(tmp_path: Path) -> None:
    first_inbox = Inbox()
    with SqliteStore.open(tmp_path) as store:
        first = Scheduler(store, first_inbox)
        await first.start()
        out = await ScheduleTool(first).run(
            {"action": "create", "in_minutes": 60, "message": "stand up"}, context()
        )
        job_id = out.details["id"]
        first.shutdown()

    inbox = Inbox()
    reopened = SqliteStore.open(tmp_path)
    second = Scheduler(reopened, inbox)
    await second.start()
    try:
        (info,) = await second.list_jobs("slack:acme:C1:171.5")
        assert info.id == job_id and info.next_run_time is not None
        assert "stand up" in info.description
        await fire_now(second, job_id)
        (message,) = await inbox.wait(1)
        assert "stand up" in message.text
        assert message.conversation_key == "slack:acme:C1:171.5"
        assert first_inbox.messages == []
    finally:
        second.shutdown()
        reopened.close()


async def test_missed_runs_coalesce_into_one(store: Store, inbox: Inbox) -> None:
    sched = Scheduler(store, inbox, misfire_grace_time=3600)
    # Ten one-minute runs fall between the first run time and the start: as after downtime.
    await sched.add_every(
        "tick",
        60,
        prompt="p",
        target=TARGET,
        first_run=datetime.now(UTC) - timedelta(minutes=10),
    )
    await sched.start()
    try:
        await inbox.wait(1)
        await until(lambda: passed_over(sched, "tick"), "the missed runs handled")
        assert len(inbox.messages) == 1
        assert len(await store.job_runs("tick")) == 1
        (info,) = await sched.list_jobs()
        assert info.next_run_time is not None and info.next_run_time > datetime.now(UTC)
    finally:
        sched.shutdown()


async def test_run_missed_beyond_grace_is_skipped(store: Store, inbox: Inbox) -> None:
    sched = Scheduler(store, inbox, misfire_grace_time=60)
    await sched.add_every(
        "hourly",
        3600,
        prompt="p",
        target=TARGET,
        first_run=datetime.now(UTC) - timedelta(minutes=30),
    )
    await sched.start()
    try:
        await until(lambda: passed_over(sched, "hourly"), "the missed run handled")
        assert inbox.messages == []
        (info,) = await sched.list_jobs()
        assert info.next_run_time is not None and info.next_run_time > datetime.now(UTC)
    finally:
        sched.shutdown()


async def test_sync_config_jobs_replaces_config_and_keeps_reminders(
    store: Store, inbox: Inbox
) -> None:
    sched = Scheduler(store, inbox)
    daily = JobSpec("daily", "digest", TARGET, cron="0 8 * * 1-5", timezone="Europe/Berlin")
    old = JobSpec("old", "gone soon", TARGET, every=600)
    await sched.sync_config_jobs([daily, old])  # before start: applied on start
    await sched.start()
    try:
        await sched.add_at(
            "reminder-abc", datetime.now(UTC) + timedelta(hours=1), prompt="r", target=TARGET
        )
        assert {job.id for job in await sched.list_jobs()} == {"daily", "old", "reminder-abc"}
        before = await sched.get("daily")

        await sched.sync_config_jobs(
            [daily, JobSpec("new", "hello", TARGET, at=datetime.now(UTC) + timedelta(days=1))]
        )
        assert {job.id for job in await sched.list_jobs()} == {"daily", "new", "reminder-abc"}
        assert await sched.get("daily") == before  # unchanged definition: left alone

        changed = JobSpec("daily", "digest", TARGET, cron="0 9 * * 0", timezone="UTC")
        await sched.sync_config_jobs([changed])
        info = await sched.get("daily")
        assert info is not None and info.next_run_time is not None
        assert (info.next_run_time.weekday(), info.next_run_time.hour) == (6, 9)
        assert {job.id for job in await sched.list_jobs()} == {"daily", "reminder-abc"}

        with pytest.raises(ValueError, match="reminder"):
            await sched.sync_config_jobs([JobSpec("reminder-x", "p", TARGET, every=5)])
        with pytest.raises(ValueError, match="exactly one"):
            await sched.sync_config_jobs([JobSpec("both", "p", TARGET, every=5, cron="* * * * *")])
    finally:
        sched.shutdown()


async def test_a_restart_runs_what_was_missed_while_down_once(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path) as store:
        first = Scheduler(store, Inbox())
        await first.start()
        try:
            await first.add_every(
                "tick", 60, prompt="p", target=TARGET, first_run=datetime.now(UTC)
            )
            await until(lambda: store.job_runs("tick"), "the run logged")
        finally:
            first.shutdown()
        # The run wrote the job's next run time back to the table.
        stored = await store.get_job("tick")
        assert stored is not None and stored.next_run_time is not None
        assert stored.next_run_time > datetime.now(UTC)
        # botd stays down past that time: eleven one-minute runs are missed (the table as
        # it would be had the run before the restart come half a minute earlier).
        earlier = stored.next_run_time - timedelta(minutes=11, seconds=30)
        await store.save_job(replace(stored, next_run_time=earlier))

    inbox = Inbox()
    with SqliteStore.open(tmp_path) as store:
        second = Scheduler(store, inbox)
        await second.start()
        try:
            await inbox.wait(1)
            await until(lambda: passed_over(second, "tick"), "the missed runs handled")
            assert len(inbox.messages) == 1
            assert len(await store.job_runs("tick")) == 2  # one before the restart, one after
            info = await second.get("tick")
            assert info is not None and info.next_run_time is not None
            assert info.next_run_time > datetime.now(UTC)
        finally:
            second.shutdown()


async def test_a_configured_one_shot_that_ran_does_not_run_again_after_a_restart(
    tmp_path: Path,
) -> None:
    once = JobSpec("once", "p", TARGET, at=datetime.now(UTC) - timedelta(seconds=1))
    first_inbox = Inbox()
    with SqliteStore.open(tmp_path) as store:
        first = Scheduler(store, first_inbox)
        await first.sync_config_jobs([once])
        await first.start()
        try:
            await first_inbox.wait(1)
            await until(lambda: store.job_runs("once"), "the run logged")
        finally:
            first.shutdown()

    inbox = Inbox()
    with SqliteStore.open(tmp_path) as store:
        second = Scheduler(store, inbox)
        # The same config, still within the grace of the run time: the job is known to
        # have run, so the sync leaves it alone and it is not scheduled again.
        await second.sync_config_jobs([once])
        await second.start()
        try:
            info = await second.get("once")
            assert info is not None and info.next_run_time is None  # listed, done
            assert second._aps.get_job("once") is None
            assert not runs_in_flight() and inbox.messages == []
            # Changed in the config, it is a new job and runs at its new time.
            again = replace(once, at=datetime.now(UTC) - timedelta(seconds=1))
            await second.sync_config_jobs([again])
            (message,) = await inbox.wait(1)
            assert message.conversation_key == "cron:once"
        finally:
            second.shutdown()
    assert len(first_inbox.messages) == 1


# --- the old schedule.sqlite3 ----------------------------------------------------------------


def legacy_state(
    job_id: str,
    trigger: object,
    name: str,
    next_run_time: datetime,
    prompt: str,
    *,
    target: Target = TARGET,
    conversation_key: str | None = None,
    config: JobSpec | None = None,
) -> dict[str, object]:
    """A job as earlier botd versions pickled it through APScheduler's SQLAlchemy job store."""
    kwargs: dict[str, object] = {
        "instance": "/var/lib/botd",
        "job_id": job_id,
        "prompt": prompt,
        "target": {
            "channel": target.channel,
            "chat_id": target.chat_id,
            "account_id": target.account_id,
            "thread_id": target.thread_id,
            "reply_to_id": target.reply_to_id,
        },
        "conversation_key": conversation_key,
    }
    if config is not None:
        kwargs.update(source="config", fingerprint=repr(config))
    return {
        "version": 1,
        "id": job_id,
        "func": "botd.scheduler:run_scheduled_job",
        "trigger": trigger,
        "executor": "default",
        "args": (),
        "kwargs": kwargs,
        "name": name,
        "misfire_grace_time": None if job_id.startswith("reminder-") else 3600,
        "coalesce": True,
        "max_instances": 1,
        "next_run_time": next_run_time,
    }


def write_legacy_file(path: Path, states: list[dict[str, object]]) -> None:
    """A ``schedule.sqlite3`` with the tables earlier versions wrote."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE apscheduler_jobs (id VARCHAR(191) NOT NULL PRIMARY KEY,"
        " next_run_time FLOAT, job_state BLOB NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE job_runs (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, at TEXT NOT NULL,"
        " outcome TEXT NOT NULL, error TEXT)"
    )
    for state in states:
        when = state["next_run_time"]
        assert isinstance(when, datetime)
        conn.execute(
            "INSERT INTO apscheduler_jobs VALUES (?, ?, ?)",
            (state["id"], when.timestamp(), pickle.dumps(state, pickle.HIGHEST_PROTOCOL)),
        )
    conn.commit()
    conn.close()


async def test_an_old_schedule_file_is_imported_once_and_left_alone(
    tmp_path: Path, inbox: Inbox
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    legacy = state_dir / "schedule.sqlite3"
    now = datetime.now(UTC)
    daily = JobSpec("daily", "digest", TARGET, cron="0 8 * * 1-5", timezone="Europe/Berlin")
    daily_trigger = cron_trigger("0 8 * * 1-5", "Europe/Berlin")
    daily_next = daily_trigger.get_next_fire_time(None, now)
    remind_at = (now + timedelta(hours=2)).astimezone(BERLIN)
    write_legacy_file(
        legacy,
        [
            legacy_state(
                "daily",
                daily_trigger,
                "cron 0 8 * * 1-5 (Europe/Berlin): digest",
                daily_next,
                "digest",
                config=daily,
            ),
            legacy_state(
                "reminder-abc",
                DateTrigger(run_date=remind_at),
                f"at {remind_at.isoformat()}: call Bob",
                remind_at,
                "Reminder: call Bob",
                target=ORIGIN,
                conversation_key="slack:acme:C1:171.5",
            ),
            legacy_state(
                "tick",
                IntervalTrigger(seconds=60, start_date=now - timedelta(minutes=30)),
                "every 60s: p",
                now - timedelta(minutes=10),  # missed while botd was being upgraded
                "p",
            ),
        ],
    )
    damaged = sqlite3.connect(legacy)  # one job's state unreadable: that job alone is skipped
    damaged.execute("INSERT INTO apscheduler_jobs VALUES ('broken', NULL, x'00ff')")
    damaged.commit()
    damaged.close()
    before = legacy.read_bytes()

    with SqliteStore.open(state_dir) as store:
        sched = Scheduler(store, inbox, legacy_db=legacy)
        await sched.sync_config_jobs([daily])
        await sched.start()
        try:
            assert await store.imported("schedule.sqlite3")
            assert {job.id for job in await sched.list_jobs()} == {"daily", "reminder-abc", "tick"}
            # The configured job is unchanged, so it kept its next run time.
            assert await sched.get("daily") == JobInfo(
                "daily",
                daily_next,
                "cron 0 8 * * 1-5 (Europe/Berlin): digest",
                "cron:daily",
                TARGET,
            )
            reminder = await sched.get("reminder-abc")
            assert reminder is not None and reminder.next_run_time == remind_at
            assert (reminder.conversation_key, reminder.target) == ("slack:acme:C1:171.5", ORIGIN)
            # The run missed while down happens once, now.
            (message,) = await inbox.wait(1)
            assert (message.text, message.conversation_key) == ("p", "cron:tick")
        finally:
            sched.shutdown()
        assert await sched.cancel("reminder-abc")

    assert legacy.read_bytes() == before  # left alone
    with SqliteStore.open(state_dir) as store:
        again = Scheduler(store, Inbox(), legacy_db=legacy)
        await again.start()
        try:  # not imported a second time: the cancelled reminder stays gone
            assert {job.id for job in await again.list_jobs()} == {"daily", "tick"}
        finally:
            again.shutdown()
