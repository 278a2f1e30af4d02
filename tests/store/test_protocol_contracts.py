"""What every store backend (the ``store`` fixture, one run per backend) promises through the
protocols of ``botd.store`` other than the conversation's ledger: the router's inbound ledger
and kept chatter, the channels' offsets, the scheduler's job ledger, the model choices, what
the pruner forgets and what ``/healthz`` reads. Only the protocols are used here, so a new
backend passes by behaving the same."""

from __future__ import annotations

from datetime import UTC, datetime

from botd.chat import InboundMessage, Target
from botd.store import (
    CHATTER_RETENTION_SECONDS,
    InboundLedger,
    JobLedger,
    ModelChoices,
    Offsets,
    Pruning,
    RunRecord,
    StoredJob,
    StoreStatus,
)
from botd.store.sqlite import SqliteStore

TARGET = Target("telegram", "42")


def message(n: int, key: str = "telegram:42", text: str | None = None) -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id="42",
        sender_id=f"u{n}",
        text=text or f"m{n}",
        message_id=str(n),
        conversation_key=key,
        sender_name=f"User {n}",
    )


def job(job_id: str, prompt: str = "p") -> StoredJob:
    return StoredJob(
        id=job_id,
        kind="at",
        trigger={"run_date": "2030-01-01T09:00:00+00:00"},
        name=f"at 9: {prompt}",
        prompt=prompt,
        target=TARGET,
        next_run_time=datetime(2030, 1, 1, 9, tzinfo=UTC),
    )


# --- InboundLedger ----------------------------------------------------------------------------


async def test_accept_records_all_keys_and_a_repeat_under_any_of_them_is_refused(
    store: SqliteStore,
) -> None:
    ledger: InboundLedger = store
    first = await ledger.accept_inbound("telegram", ["a", "b"], message(1))
    assert first is not None
    # A repeat under one known key: refused, and its new key is recorded all the same.
    assert await ledger.accept_inbound("telegram", ["b", "c"], message(1)) is None
    assert await ledger.seen_inbound("telegram", "c")
    assert await ledger.accept_inbound("telegram", ["c"], message(1)) is None
    # Keys are per channel.
    assert await ledger.accept_inbound("slack", ["a"], message(1)) is not None


async def test_seen_inbound_tells_a_first_sight_from_a_repeat(store: SqliteStore) -> None:
    ledger: InboundLedger = store
    assert not await ledger.seen_inbound("telegram", "x", "y")
    assert await ledger.seen_inbound("telegram", "y")
    assert not await ledger.seen_inbound("telegram", "z")


async def test_chatter_is_kept_then_consumed_by_the_accept_that_shows_it(
    store: SqliteStore,
) -> None:
    ledger: InboundLedger = store
    assert not await ledger.keep_chatter("telegram", ["k1"], message(1), limit=10)
    assert not await ledger.keep_chatter("telegram", ["k2"], message(2), limit=10)
    assert await ledger.keep_chatter("telegram", ["k2"], message(2), limit=10)  # a repeat
    kept = await ledger.kept_chatter("telegram:42")
    assert [(line.sender_id, line.text) for line in kept] == [("u1", "m1"), ("u2", "m2")]
    # Kept after the prompt read them: stays for the next one.
    assert not await ledger.keep_chatter("telegram", ["k3"], message(3), limit=10)
    accepted = await ledger.accept_inbound(
        "telegram", ["p4"], message(4), consume_chatter=("telegram:42", kept[-1].id)
    )
    assert accepted is not None
    assert [line.text for line in await ledger.kept_chatter("telegram:42")] == ["m3"]


async def test_a_refused_accept_consumes_no_chatter(store: SqliteStore) -> None:
    ledger: InboundLedger = store
    await ledger.accept_inbound("telegram", ["p1"], message(1))
    await ledger.keep_chatter("telegram", ["k2"], message(2), limit=10)
    [line] = await ledger.kept_chatter("telegram:42")
    refused = await ledger.accept_inbound(
        "telegram", ["p1"], message(1), consume_chatter=("telegram:42", line.id)
    )
    assert refused is None
    assert await ledger.kept_chatter("telegram:42") == [line]


async def test_chatter_keeps_the_newest_lines_of_each_conversation(store: SqliteStore) -> None:
    ledger: InboundLedger = store
    for n in range(5):
        await ledger.keep_chatter("telegram", [f"k{n}"], message(n), limit=3)
    await ledger.keep_chatter("telegram", ["other"], message(9, key="telegram:7"), limit=3)
    assert [line.text for line in await ledger.kept_chatter("telegram:42")] == ["m2", "m3", "m4"]
    assert [line.text for line in await ledger.kept_chatter("telegram:7")] == ["m9"]


# --- Offsets ----------------------------------------------------------------------------------


async def test_offsets_are_per_channel_account_and_the_last_saved_wins(
    store: SqliteStore,
) -> None:
    offsets: Offsets = store
    assert await offsets.get_offset("telegram", "default") is None
    offsets.set_offset_soon("telegram", "default", "5")
    offsets.set_offset_soon("telegram", "default", "7")  # queued behind the first
    offsets.set_offset_soon("telegram", "second", "100")
    assert await offsets.get_offset("telegram", "default") == "7"
    assert await offsets.get_offset("telegram", "second") == "100"
    assert await offsets.get_offset("slack", "default") is None
    offsets.set_offset_soon("telegram", "default", "8")
    assert await offsets.get_offset("telegram", "default") == "8"


# --- JobLedger --------------------------------------------------------------------------------


async def test_jobs_are_saved_replaced_and_deleted_once(store: SqliteStore) -> None:
    jobs: JobLedger = store
    await jobs.save_job(job("b"))
    await jobs.save_job(job("a"))
    assert [j.id for j in await jobs.load_jobs()] == ["a", "b"]
    await jobs.save_job(job("a", prompt="changed"))
    assert (await jobs.get_job("a")) == job("a", prompt="changed")
    assert await jobs.delete_job("a")
    assert not await jobs.delete_job("a")
    assert await jobs.get_job("a") is None


async def test_the_records_apscheduler_makes_are_read_back_in_order(store: SqliteStore) -> None:
    jobs: JobLedger = store
    await jobs.save_job(job("a"))
    await jobs.save_job(job("b"))
    later = datetime(2031, 1, 1, 9, tzinfo=UTC)
    jobs.set_job_next_run_soon("a", later)
    jobs.set_job_next_run_soon("gone", later)  # an unknown id: nothing happens
    jobs.delete_job_soon("b")
    stored = await jobs.get_job("a")
    assert stored is not None and stored.next_run_time == later
    assert [j.id for j in await jobs.load_jobs()] == ["a"]


async def test_an_import_happens_once(store: SqliteStore) -> None:
    jobs: JobLedger = store
    await jobs.save_job(job("kept", prompt="mine"))
    assert not await jobs.imported("legacy")
    assert await jobs.import_jobs("legacy", [job("kept", prompt="old"), job("new")], detail="x")
    assert await jobs.imported("legacy")
    assert (await jobs.get_job("kept")) == job("kept", prompt="mine")  # present: left alone
    assert not await jobs.import_jobs("legacy", [job("again")])
    assert await jobs.get_job("again") is None


async def test_the_run_log_keeps_the_last_runs_of_each_job(store: SqliteStore) -> None:
    jobs: JobLedger = store
    for day in range(1, 5):
        at = datetime(2030, 1, day, tzinfo=UTC)
        await jobs.add_job_run(RunRecord("a", at, "submitted"), keep=2)
    failed = RunRecord("b", datetime(2030, 1, 1, tzinfo=UTC), "failed", "boom")
    await jobs.add_job_run(failed, keep=2)
    assert [r.at.day for r in await jobs.job_runs("a")] == [3, 4]
    assert [(r.outcome, r.error) for r in await jobs.job_runs("b")] == [("failed", "boom")]


# --- ModelChoices -----------------------------------------------------------------------------


async def test_a_model_choice_is_kept_and_cleared(store: SqliteStore) -> None:
    choices: ModelChoices = store
    assert await choices.model_choice("c") is None
    await choices.set_model_choice("c", "big")
    await choices.set_model_choice("d", "small")
    assert await choices.model_choice("c") == "big"
    await choices.set_model_choice("c", None)
    assert await choices.model_choice("c") is None
    assert await choices.model_choice("d") == "small"
    assert await choices.last_model("c") is None
    assert (await choices.usage_totals(conversation_key="c")).runs == 0


# --- Pruning and StoreStatus ------------------------------------------------------------------


async def test_the_backlog_counts_what_waits(store: SqliteStore) -> None:
    status: StoreStatus = store
    assert (await status.inbox_backlog()).count == 0
    assert await status.outbox_pending_count() == 0
    first = await store.accept_inbound("telegram", ["1"], message(1))
    await store.accept_inbound("telegram", ["2"], message(2))
    assert first is not None
    await store.outbox_add(first, 0, "final", TARGET, "hi")
    backlog = await status.inbox_backlog()
    assert backlog.count == 2 and backlog.oldest_age is not None
    assert await status.outbox_pending_count() == 1
    store.finish_inbox([first], "answered")
    store.commit_soon()
    assert await store.unfinished_entries() != []
    assert status.health.ok


async def test_pruning_keeps_what_is_recent(store: SqliteStore) -> None:
    pruning: Pruning = store
    await store.seen_inbound("telegram", "recent")
    await store.keep_chatter("telegram", ["k"], message(1), limit=5)
    assert await pruning.prune_inbound(3600.0) == 0
    assert await pruning.prune_finished(3600.0) == 0
    assert await pruning.prune_chatter(CHATTER_RETENTION_SECONDS) == 0
    assert await pruning.prune_chatter(-1.0) == 1  # everything is older than the future
    assert await pruning.prune_inbound(-1.0) == 2
    assert await store.kept_chatter("telegram:42") == []
