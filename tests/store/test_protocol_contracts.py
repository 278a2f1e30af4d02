"""What every store backend (the ``store`` fixture, one run per backend) promises through the
protocols of ``botd.store`` other than the conversation's ledger: the router's inbound ledger
and kept chatter, the channels' offsets, the scheduler's job ledger, the model choices, what
the pruner forgets and what ``/healthz`` reads. Only the protocols are used here, so a new
backend passes by behaving the same."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from botd.chat import QUOTE_CUT, InboundMessage, Quote, Target
from botd.store import (
    CHATTER_RETENTION_SECONDS,
    ChatterKept,
    InboundLedger,
    JobLedger,
    ModelChoices,
    Offsets,
    Pruning,
    RunRecord,
    Store,
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
    store: Store,
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


async def test_an_accepted_message_keeps_the_message_it_quotes(store: Store) -> None:
    ledger: InboundLedger = store
    long = Quote("Bob (id 2)", "\ud800 line one\n> line two " + "x" * 2000)
    own = Quote("botd_bot", "my earlier answer", from_bot=True)
    for n, quoted in enumerate((long, own, None)):
        await ledger.accept_inbound("telegram", [f"q{n}"], replace(message(n), quoted=quoted))
    entries = await store.unfinished_entries()
    assert [entry.message.quoted for entry in entries] == [long, own, None]
    kept = entries[0].message.quoted
    assert kept is not None and kept.text.startswith("\ufffd line one\n> line two xx")
    assert kept.text.endswith(QUOTE_CUT)


async def test_seen_inbound_tells_a_first_sight_from_a_repeat(store: Store) -> None:
    ledger: InboundLedger = store
    assert not await ledger.seen_inbound("telegram", "x", "y")
    assert await ledger.seen_inbound("telegram", "y")
    assert not await ledger.seen_inbound("telegram", "z")


async def test_chatter_is_kept_then_consumed_by_the_accept_that_shows_it(
    store: Store,
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


async def test_a_refused_accept_consumes_no_chatter(store: Store) -> None:
    ledger: InboundLedger = store
    await ledger.accept_inbound("telegram", ["p1"], message(1))
    await ledger.keep_chatter("telegram", ["k2"], message(2), limit=10)
    [line] = await ledger.kept_chatter("telegram:42")
    refused = await ledger.accept_inbound(
        "telegram", ["p1"], message(1), consume_chatter=("telegram:42", line.id)
    )
    assert refused is None
    assert await ledger.kept_chatter("telegram:42") == [line]


async def test_an_accept_unless_chatter_kept_writes_nothing_where_chatter_is_kept(
    store: Store,
) -> None:
    ledger: InboundLedger = store
    # Nothing kept: accepted at once; a repeat is refused as any accept's is.
    first = await ledger.accept_inbound("telegram", ["p1"], message(1), unless_chatter_kept=True)
    assert first is not None
    assert (
        await ledger.accept_inbound("telegram", ["p1"], message(1), unless_chatter_kept=True)
        is None
    )
    # Chatter kept in another conversation does not matter.
    await ledger.keep_chatter("telegram", ["k7"], message(7, key="telegram:7"), limit=10)
    second = await ledger.accept_inbound("telegram", ["p2"], message(2), unless_chatter_kept=True)
    assert second is not None
    # Kept in this one: refused with nothing written, not even its ids (a repeat's neither).
    await ledger.keep_chatter("telegram", ["k3"], message(3), limit=10)
    for keys in (["p4"], ["p1", "p5"]):
        with pytest.raises(ChatterKept):
            await ledger.accept_inbound("telegram", keys, message(4), unless_chatter_kept=True)
    assert [entry.id for entry in await store.unfinished_entries()] == [first, second]
    [line] = await ledger.kept_chatter("telegram:42")
    # Accepted again with the lines it shows: its ids were free, and the lines go with it.
    third = await ledger.accept_inbound(
        "telegram", ["p4", "p5"], message(4), consume_chatter=("telegram:42", line.id)
    )
    assert third is not None
    assert await ledger.kept_chatter("telegram:42") == []
    assert (
        await ledger.accept_inbound("telegram", ["p6"], message(6), unless_chatter_kept=True)
        is not None
    )


async def test_chatter_keeps_the_newest_lines_of_each_conversation(store: Store) -> None:
    ledger: InboundLedger = store
    for n in range(5):
        await ledger.keep_chatter("telegram", [f"k{n}"], message(n), limit=3)
    await ledger.keep_chatter("telegram", ["other"], message(9, key="telegram:7"), limit=3)
    assert [line.text for line in await ledger.kept_chatter("telegram:42")] == ["m2", "m3", "m4"]
    assert [line.text for line in await ledger.kept_chatter("telegram:7")] == ["m9"]


# --- Offsets ----------------------------------------------------------------------------------


async def test_offsets_are_per_channel_account_and_the_last_saved_wins(
    store: Store,
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


async def test_jobs_are_saved_replaced_and_deleted_once(store: Store) -> None:
    jobs: JobLedger = store
    await jobs.save_job(job("b"))
    await jobs.save_job(job("a"))
    assert [j.id for j in await jobs.load_jobs()] == ["a", "b"]
    await jobs.save_job(job("a", prompt="changed"))
    assert (await jobs.get_job("a")) == job("a", prompt="changed")
    assert await jobs.delete_job("a")
    assert not await jobs.delete_job("a")
    assert await jobs.get_job("a") is None


def prompt(job_id: str, at: datetime, key: str = "cron:a") -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id="42",
        sender_id="scheduler",
        text="p",
        message_id=f"job:{job_id}:{at.isoformat()}",
        conversation_key=key,
    )


async def test_a_run_fires_once_and_moves_the_next_run_time(store: Store) -> None:
    jobs: JobLedger = store
    due = datetime(2030, 1, 1, 9, tzinfo=UTC)
    later = datetime(2030, 1, 2, 9, tzinfo=UTC)
    await jobs.save_job(job("a"))
    fired = await jobs.fire_job("a", due, later, prompt("a", due))
    assert fired.advanced and fired.inbox_id is not None
    stored = await jobs.get_job("a")
    assert stored is not None and stored.next_run_time == later
    (entry,) = await store.unfinished_entries()
    assert (entry.id, entry.message.message_id) == (fired.inbox_id, f"job:a:{due.isoformat()}")
    # The same run fired again (a second node that believes it runs the schedule): the
    # stored next run time is not the one it expects any more, so nothing is written.
    again = await jobs.fire_job("a", due, later, prompt("a", due))
    assert not again.advanced and again.inbox_id is None
    assert len(await store.unfinished_entries()) == 1
    # A job that is gone fires nothing either.
    assert not (await jobs.fire_job("gone", due, later, prompt("gone", due))).advanced


async def test_a_run_whose_key_was_seen_moves_the_job_on_without_a_second_prompt(
    store: Store,
) -> None:
    jobs: JobLedger = store
    due = datetime(2030, 1, 1, 9, tzinfo=UTC)
    later = datetime(2030, 1, 2, 9, tzinfo=UTC)
    await jobs.save_job(job("a"))
    assert (await jobs.fire_job("a", due, later, prompt("a", due))).inbox_id is not None
    # The job put back to the run it fired (as a config sync re-adding it would): the run's
    # dedupe key was recorded, so its prompt is not accepted a second time.
    await jobs.save_job(job("a"))
    repeat = await jobs.fire_job("a", due, later, prompt("a", due))
    assert repeat.advanced and repeat.inbox_id is None
    assert len(await store.unfinished_entries()) == 1


async def test_a_done_one_shot_is_removed_or_kept_without_a_next_run(store: Store) -> None:
    jobs: JobLedger = store
    due = datetime(2030, 1, 1, 9, tzinfo=UTC)
    await jobs.save_job(job("reminder"))
    await jobs.save_job(job("configured"))
    assert (await jobs.fire_job("reminder", due, None, prompt("reminder", due))).advanced
    fired = await jobs.fire_job("configured", due, None, prompt("configured", due), keep=True)
    assert fired.advanced
    assert await jobs.get_job("reminder") is None
    kept = await jobs.get_job("configured")
    assert kept is not None and kept.next_run_time is None
    # A missed run (no prompt) only moves the job on.
    await jobs.save_job(job("late"))
    later = datetime(2030, 1, 2, 9, tzinfo=UTC)
    missed = await jobs.fire_job("late", due, later, None)
    assert missed.advanced and missed.inbox_id is None
    assert len(await store.unfinished_entries()) == 2


async def test_an_import_happens_once(store: Store) -> None:
    jobs: JobLedger = store
    await jobs.save_job(job("kept", prompt="mine"))
    assert not await jobs.imported("legacy")
    assert await jobs.import_jobs("legacy", [job("kept", prompt="old"), job("new")], detail="x")
    assert await jobs.imported("legacy")
    assert (await jobs.get_job("kept")) == job("kept", prompt="mine")  # present: left alone
    assert not await jobs.import_jobs("legacy", [job("again")])
    assert await jobs.get_job("again") is None


async def test_the_run_log_keeps_the_last_runs_of_each_job(store: Store) -> None:
    jobs: JobLedger = store
    for day in range(1, 5):
        at = datetime(2030, 1, day, tzinfo=UTC)
        await jobs.add_job_run(RunRecord("a", at, "submitted"), keep=2)
    failed = RunRecord("b", datetime(2030, 1, 1, tzinfo=UTC), "failed", "boom")
    await jobs.add_job_run(failed, keep=2)
    assert [r.at.day for r in await jobs.job_runs("a")] == [3, 4]
    assert [(r.outcome, r.error) for r in await jobs.job_runs("b")] == [("failed", "boom")]


# --- ModelChoices -----------------------------------------------------------------------------


async def test_a_model_choice_is_kept_and_cleared(store: Store) -> None:
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


async def test_the_backlog_counts_what_waits(store: Store) -> None:
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


async def test_pruning_keeps_what_is_recent(store: Store) -> None:
    pruning: Pruning = store
    await store.seen_inbound("telegram", "recent")
    await store.keep_chatter("telegram", ["k"], message(1), limit=5)
    assert await pruning.prune_inbound(3600.0) == 0
    assert await pruning.prune_finished(3600.0) == 0
    assert await pruning.prune_chatter(CHATTER_RETENTION_SECONDS) == 0
    assert await pruning.prune_chatter(-1.0) == 1  # everything is older than the future
    assert await pruning.prune_inbound(-1.0) == 2
    assert await store.kept_chatter("telegram:42") == []


async def test_shared_chatter_is_read_past_each_readers_mark_and_stays(store: Store) -> None:
    # A user-scoped group's lines: each member's conversation reads those after its own mark.
    ledger: InboundLedger = store
    group = "telegram:42"
    alice, bob = f"{group}:user:a", f"{group}:user:b"
    await ledger.keep_chatter("telegram", ["k1"], message(1), limit=10)
    [first] = await ledger.kept_chatter(group, read_by=alice)
    accepted = await ledger.accept_inbound(
        "telegram",
        ["p2"],
        message(2, key=alice),
        consume_chatter=(group, first.id),
        chatter_read_by=alice,
    )
    assert accepted is not None
    assert await ledger.kept_chatter(group, read_by=alice) == []
    assert await ledger.kept_chatter(group, read_by=bob) == [first]  # not read by Bob yet
    assert await ledger.kept_chatter(group) == [first]  # kept, not consumed
    await ledger.keep_chatter("telegram", ["k3"], message(3), limit=10)
    assert [line.text for line in await ledger.kept_chatter(group, read_by=alice)] == ["m3"]
    assert [line.text for line in await ledger.kept_chatter(group, read_by=bob)] == ["m1", "m3"]


async def test_a_new_line_is_never_taken_for_one_a_reader_read(tmp_path: Path) -> None:
    # SQLite gives a new row the highest id + 1: once the newest lines are gone (consumed by
    # another conversation, or pruned), a new line must still come after every mark.
    now = [1000.0]
    with SqliteStore.open(tmp_path / "store", clock=lambda: now[0]) as store:
        group, other, alice = "telegram:42", "telegram:7", "telegram:42:user:a"
        await store.keep_chatter("telegram", ["k1"], message(1), limit=10)
        await store.keep_chatter("telegram", ["k2"], message(2, key=other), limit=10)
        now[0] += CHATTER_RETENTION_SECONDS - 10  # Alice reads the line late in its week
        [line] = await store.kept_chatter(group, read_by=alice)
        await store.accept_inbound(
            "telegram",
            ["p3"],
            message(3, key=alice),
            consume_chatter=(group, line.id),
            chatter_read_by=alice,
        )
        [theirs] = await store.kept_chatter(other)
        await store.accept_inbound(
            "telegram", ["p4"], message(4, key=other), consume_chatter=(other, theirs.id)
        )
        now[0] += 20
        await store.prune_chatter()  # the line is a week old; Alice's mark is not
        assert await store.kept_chatter(group) == []
        await store.keep_chatter("telegram", ["k5"], message(5), limit=10)
        assert [kept.text for kept in await store.kept_chatter(group, read_by=alice)] == ["m5"]
