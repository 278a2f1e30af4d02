"""The SQLite store on real files: transcripts, sessions, dedupe and offsets across restarts."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from botd.agent.compaction import compact_transcript
from botd.chat import Target
from botd.events import (
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)
from botd.store import (
    InboundPruner,
    RunRecord,
    StaleCompactionError,
    StoredJob,
    StoreError,
    UnknownSessionError,
)
from botd.store.sqlite import DB_FILENAME, SCHEMA_VERSION, SqliteStore
from botd.store.sqlite.schema import MIGRATIONS


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SqliteStore]:
    with SqliteStore.open(tmp_path / "state", clock=clock) as opened:
        yield opened


def reopen(tmp_path: Path, clock: FakeClock) -> SqliteStore:
    return SqliteStore.open(tmp_path / "state", clock=clock)


def every_block_type() -> list[Message]:
    return [
        Message(role="user", content="what is in this picture?", timestamp=1_700_000_000),
        Message(
            role="user",
            content=[
                TextContent(text="and this one"),
                ImageContent(mime_type="image/png", data="iVBORw0KGgo="),
            ],
        ),
        Message(
            role="assistant",
            content=[
                ThinkingContent(thinking="look at it first", signature="sig-abc=="),
                TextContent(text="Let me check — ünïcode ok."),
                ToolCallContent(
                    id="call_1", name="describe", arguments={"detail": "high", "n": [1, 2.5]}
                ),
            ],
            stop_reason="tool_use",
            usage={"input_tokens": 12, "output_tokens": 34},
            model="claude-x",
            provider="anthropic",
        ),
        Message(
            role="tool_result",
            tool_call_id="call_1",
            tool_name="describe",
            is_error=False,
            content=[
                TextContent(text="a cat"),
                ImageContent(mime_type="image/jpeg", data="/9j/4AAQ"),
            ],
        ),
        Message(
            role="assistant",
            content=[TextContent(text="It is a cat.")],
            stop_reason="end_turn",
            timestamp="2024-01-01T00:00:00Z",
        ),
    ]


# --- opening ----------------------------------------------------------------------------------


def test_open_creates_directory_and_uses_wal(tmp_path: Path) -> None:
    state_dir = tmp_path / "deep" / "state"
    with SqliteStore.open(state_dir) as store:
        assert store.path == state_dir / DB_FILENAME
        assert store.schema_version() == SCHEMA_VERSION
    # WAL is a property of the database file: a plain connection sees it too.
    conn = sqlite3.connect(state_dir / DB_FILENAME)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


def test_reopening_does_not_migrate_twice(tmp_path: Path, clock: FakeClock) -> None:
    with reopen(tmp_path, clock) as store:
        session = store.get_or_create_session("k")
    with reopen(tmp_path, clock) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.get_or_create_session("k").session_id == session.session_id


def test_newer_schema_is_refused_naming_both_versions_and_what_to_do(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError) as refused:
        SqliteStore.open(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path / DB_FILENAME}: schema version {SCHEMA_VERSION + 1} is newer than this botd "
        f"understands ({SCHEMA_VERSION}), a newer botd migrated it: upgrade botd to that "
        "release (or later), or point state_dir elsewhere; going back to an older botd is not "
        "supported (restore the backup taken before the upgrade)"
    )


def test_a_migration_is_logged_once_from_the_version_it_found(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / DB_FILENAME
    with caplog.at_level("INFO", logger="botd.store.migrations"):
        SqliteStore.open(tmp_path).close()
        assert caplog.messages == [f"{path}: schema created (version {SCHEMA_VERSION})"]
        caplog.clear()
        SqliteStore.open(tmp_path).close()  # nothing to migrate: nothing said
        assert caplog.messages == []
        conn = sqlite3.connect(tmp_path / "older.sqlite3", isolation_level=None)
        for steps in MIGRATIONS[:-1]:
            for statement in steps:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION - 1}")
        conn.close()
        path.unlink()
        (tmp_path / "older.sqlite3").rename(path)
        SqliteStore.open(tmp_path).close()
    assert caplog.messages == [
        f"{path}: schema migrated from version {SCHEMA_VERSION - 1} to {SCHEMA_VERSION}"
    ]


def test_closed_store_refuses_calls(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.get_or_create_session("k")


# --- transcripts ------------------------------------------------------------------------------


def test_transcript_round_trips_every_block_type(store: SqliteStore) -> None:
    session = store.get_or_create_session("telegram:1:chat:42")
    messages = every_block_type()
    store.append_messages(session.session_id, messages[:2])
    store.append_messages(session.session_id, messages[2:])
    loaded = store.load_transcript(session.session_id)
    assert loaded == messages
    assert isinstance(loaded[2].content, list)
    thinking = loaded[2].content[0]
    assert isinstance(thinking, ThinkingContent)
    assert thinking.signature == "sig-abc=="
    assert store.get_session(session.session_id).message_count == len(messages)


def test_transcript_survives_restart(tmp_path: Path, clock: FakeClock) -> None:
    messages = every_block_type()
    with reopen(tmp_path, clock) as store:
        session = store.get_or_create_session("slack:T1:C1")
        store.append_messages(session.session_id, messages)
    with reopen(tmp_path, clock) as fresh:
        again = fresh.get_or_create_session("slack:T1:C1")
        assert again.session_id == session.session_id
        assert again.message_count == len(messages)
        assert fresh.load_transcript(again.session_id) == messages


def test_transcripts_are_per_session(store: SqliteStore) -> None:
    first = store.get_or_create_session("a")
    second = store.get_or_create_session("b")
    store.append_messages(first.session_id, [Message(role="user", content="to a")])
    store.append_messages(second.session_id, [Message(role="user", content="to b")])
    assert [m.content for m in store.load_transcript(first.session_id)] == ["to a"]
    assert [m.content for m in store.load_transcript(second.session_id)] == ["to b"]


def test_unknown_session_is_an_error(store: SqliteStore) -> None:
    with pytest.raises(UnknownSessionError):
        store.append_messages("nope", [Message(role="user", content="x")])
    with pytest.raises(UnknownSessionError):
        store.load_transcript("nope")


async def test_rewriting_messages_changes_them_in_place_queued_ones_too(
    store: SqliteStore, clock: FakeClock
) -> None:
    session = store.get_or_create_session("k").session_id
    image = ImageContent(mime_type="image/png", data="QkFE")
    first = Message(role="user", content=[TextContent(text="old"), image])
    store.append_messages(session, [first, Message(role="assistant", content="Seen.")])
    # The compacted view replaces the first message; its row stays, marked compacted.
    store.replace_transcript_prefix(session, 1, [first])
    queued = Message(role="tool_result", tool_call_id="t", content=[image])
    store.append_messages_soon(session, [queued])  # not committed yet
    clock.advance(5)

    def without(message: Message) -> Message | None:
        blocks = message.blocks()
        if image not in blocks:
            return None
        kept = [TextContent(text="[gone]") if b == image else b for b in blocks]
        return message.model_copy(update={"content": kept})

    assert await store.rewrite_messages(session, without) == 2

    texts = [m.blocks() for m in store.load_transcript(session)]
    assert texts == [
        [TextContent(text="old"), TextContent(text="[gone]")],
        [TextContent(text="Seen.")],
        [TextContent(text="[gone]")],
    ]
    record = store.get_session(session)
    assert record.message_count == 3 and record.updated_at == clock.now
    conn = sqlite3.connect(store.path)
    try:
        compacted = conn.execute(
            "SELECT body FROM messages WHERE compacted_at IS NOT NULL ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    assert [image.data in body for (body,) in compacted] == [True, False]
    assert await store.rewrite_messages(session, without) == 0


# --- sessions ---------------------------------------------------------------------------------


def test_get_or_create_is_stable_per_key(store: SqliteStore, clock: FakeClock) -> None:
    created = store.get_or_create_session("discord:g:c")
    assert len(created.session_id) == 32
    int(created.session_id, 16)  # uuid4 hex
    assert created.conversation_key == "discord:g:c"
    assert created.created_at == created.updated_at == clock.now
    assert created.message_count == 0
    assert created.summary is None
    assert created.active
    assert store.get_or_create_session("discord:g:c").session_id == created.session_id
    assert store.get_or_create_session("discord:g:other").session_id != created.session_id


def test_new_session_starts_fresh_and_keeps_the_old_transcript(
    tmp_path: Path, clock: FakeClock
) -> None:
    with reopen(tmp_path, clock) as store:
        old = store.get_or_create_session("k")
        store.append_messages(old.session_id, [Message(role="user", content="before /new")])
        fresh = store.new_session("k")
        assert fresh.session_id != old.session_id
        assert fresh.active and fresh.message_count == 0
        assert store.load_transcript(fresh.session_id) == []
    with reopen(tmp_path, clock) as store:
        # After a restart the key still resolves to the new session...
        assert store.get_or_create_session("k").session_id == fresh.session_id
        # ...and the old transcript is still there for audit, no longer active.
        old_record = store.get_session(old.session_id)
        assert not old_record.active
        assert [m.content for m in store.load_transcript(old.session_id)] == ["before /new"]


def test_new_session_for_an_unseen_key(store: SqliteStore) -> None:
    fresh = store.new_session("never-seen")
    assert store.get_or_create_session("never-seen").session_id == fresh.session_id


def test_append_updates_count_and_time(store: SqliteStore, clock: FakeClock) -> None:
    session = store.get_or_create_session("k")
    clock.advance(5)
    store.append_messages(session.session_id, [Message(role="user", content="hi")] * 3)
    record = store.get_session(session.session_id)
    assert record.message_count == 3
    assert record.updated_at == clock.now
    assert record.created_at == clock.now - 5


# --- inbound dedupe ---------------------------------------------------------------------------


async def test_seen_inbound_records_once(store: SqliteStore) -> None:
    assert await store.seen_inbound("telegram", "100") is False
    assert await store.seen_inbound("telegram", "100") is True
    # Ids are per channel: the same platform id on another channel is a different message.
    assert await store.seen_inbound("slack", "100") is False


async def test_seen_inbound_survives_restart(tmp_path: Path, clock: FakeClock) -> None:
    with reopen(tmp_path, clock) as store:
        assert await store.seen_inbound("slack", "1712345678.000100") is False
    with reopen(tmp_path, clock) as store:
        assert await store.seen_inbound("slack", "1712345678.000100") is True
        assert await store.seen_inbound("slack", "1712345678.000200") is False


async def test_prune_inbound_uses_the_clock(store: SqliteStore, clock: FakeClock) -> None:
    await store.seen_inbound("telegram", "old")
    clock.advance(3 * 86_400)
    await store.seen_inbound("telegram", "recent")
    clock.advance(86_400)
    assert await store.prune_inbound(older_than_seconds=2 * 86_400) == 1
    # The pruned id is forgotten (it would be accepted again); the recent one is remembered.
    assert await store.seen_inbound("telegram", "recent") is True
    assert await store.seen_inbound("telegram", "old") is False
    assert await store.prune_inbound(older_than_seconds=2 * 86_400) == 0


async def test_a_message_with_several_keys_is_recorded_at_once(store: SqliteStore) -> None:
    assert await store.seen_inbound("slack", "EvA", "C1:1.0") is False
    # A twin shares one key: a repeat, and its own new key is recorded too.
    assert await store.seen_inbound("slack", "EvB", "C1:1.0") is True
    assert await store.seen_inbound("slack", "EvB") is True
    assert await store.seen_inbound("slack", "EvC", "C1:2.0") is False
    with pytest.raises(ValueError, match="at least one key"):
        await store.seen_inbound("slack")


async def test_the_pruner_prunes_at_start_and_then_every_interval(
    store: SqliteStore, clock: FakeClock
) -> None:
    ticks: asyncio.Queue[float] = asyncio.Queue()
    go_on = asyncio.Event()

    async def sleep(seconds: float) -> None:  # the test decides when an interval has passed
        await ticks.put(seconds)
        await go_on.wait()
        go_on.clear()

    await store.seen_inbound("telegram", "ancient")
    clock.advance(8 * 86_400)
    await store.seen_inbound("telegram", "old")
    pruner = InboundPruner(store, interval=60.0, sleep=sleep)
    with pytest.raises(ValueError, match="at least"):
        InboundPruner(store, retention=86_400)
    pruner.start()
    try:
        async with asyncio.timeout(10):
            assert await ticks.get() == 60.0  # pruned at start, then waits one interval
        assert await store.seen_inbound("telegram", "ancient") is False  # forgotten
        assert await store.seen_inbound("telegram", "old") is True
        clock.advance(8 * 86_400)
        go_on.set()
        async with asyncio.timeout(10):
            assert await ticks.get() == 60.0
        assert await store.seen_inbound("telegram", "old") is False
    finally:
        await pruner.stop()
        await pruner.stop()  # idempotent
    assert ticks.empty()


# --- offsets ----------------------------------------------------------------------------------


async def test_offsets_survive_restart(tmp_path: Path, clock: FakeClock) -> None:
    with reopen(tmp_path, clock) as store:
        assert await store.get_offset("telegram", "bot1") is None
        store.set_offset_soon("telegram", "bot1", "100")
        store.set_offset_soon("telegram", "bot1", "101")
        store.set_offset_soon("telegram", "bot2", "7")
    with reopen(tmp_path, clock) as store:
        assert await store.get_offset("telegram", "bot1") == "101"
        assert await store.get_offset("telegram", "bot2") == "7"
        assert await store.get_offset("slack", "bot1") is None


# --- compaction persistence -------------------------------------------------------------------


def tool_exchange(n: int, size: int) -> list[Message]:
    return [
        Message(role="user", content=f"question {n} " + "q" * size),
        Message(
            role="assistant",
            content=[
                TextContent(text="checking"),
                ToolCallContent(id=f"c{n}a", name="search", arguments={"q": str(n)}),
                ToolCallContent(id=f"c{n}b", name="fetch", arguments={"n": n}),
            ],
            stop_reason="tool_use",
        ),
        Message(
            role="tool_result",
            tool_call_id=f"c{n}a",
            tool_name="search",
            content=[TextContent(text="r" * size)],
        ),
        Message(
            role="tool_result",
            tool_call_id=f"c{n}b",
            tool_name="fetch",
            content=[TextContent(text="f" * size)],
        ),
        Message(role="assistant", content=[TextContent(text=f"answer {n}")]),
    ]


def assert_tool_pairs_intact(messages: list[Message]) -> None:
    calls: set[str] = set()
    results: set[str] = set()
    for message in messages:
        if message.role == "tool_result":
            assert message.tool_call_id in calls, f"result {message.tool_call_id} before call"
            results.add(message.tool_call_id or "")
        for block in message.blocks():
            if isinstance(block, ToolCallContent):
                calls.add(block.id)
    assert calls == results


async def test_compacted_transcript_persists_across_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    original = [m for n in range(8) for m in tool_exchange(n, 400)]

    async def summarize(older: list[Message]) -> str:
        return f"talked about {len(older)} things"

    with reopen(tmp_path, clock) as store:
        session = store.get_or_create_session("k")
        store.append_messages(session.session_id, original)
        result = await compact_transcript(
            store.load_transcript(session.session_id),
            budget_tokens=1_000,
            keep_recent_tokens=500,
            summarize=summarize,
        )
        assert result is not None
        clock.advance(1)
        await store.compact(session.session_id, result)
        # Appending after compaction continues the compacted transcript.
        store.append_messages(session.session_id, [Message(role="user", content="next")])

    with reopen(tmp_path, clock) as store:
        loaded = store.load_transcript(session.session_id)
        assert loaded == [*result.messages, Message(role="user", content="next")]
        assert loaded[0].role == "user"
        assert loaded[0].blocks()[0] == TextContent(
            text=f"[Summary of earlier conversation]\ntalked about {result.compacted_count} things"
        )
        assert loaded[1:-1] == original[result.compacted_count :]
        assert_tool_pairs_intact(loaded)
        record = store.get_session(session.session_id)
        assert record.summary == result.summary
        assert record.message_count == len(loaded)

    # The original rows stay in the file for audit, marked compacted.
    conn = sqlite3.connect(tmp_path / "state" / DB_FILENAME)
    try:
        compacted = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id = ? AND compacted_at IS NOT NULL",
            (session.session_id,),
        ).fetchone()[0]
    finally:
        conn.close()
    assert compacted == len(original)


async def test_stale_compaction_is_refused(store: SqliteStore) -> None:
    session = store.get_or_create_session("k")
    store.append_messages(session.session_id, [m for n in range(4) for m in tool_exchange(n, 400)])
    snapshot = store.load_transcript(session.session_id)
    result = await compact_transcript(
        snapshot, budget_tokens=500, keep_recent_tokens=300, summarize=None
    )
    assert result is not None
    await store.compact(session.session_id, result)
    after_first = store.load_transcript(session.session_id)
    # Applying the same (now outdated) result again must not mangle the transcript.
    with pytest.raises(StaleCompactionError):
        await store.compact(session.session_id, result)
    assert store.load_transcript(session.session_id) == after_first


async def test_compaction_keeps_messages_appended_meanwhile(store: SqliteStore) -> None:
    session = store.get_or_create_session("k")
    store.append_messages(session.session_id, [m for n in range(4) for m in tool_exchange(n, 400)])
    snapshot = store.load_transcript(session.session_id)
    result = await compact_transcript(
        snapshot, budget_tokens=500, keep_recent_tokens=300, summarize=None
    )
    assert result is not None
    late = Message(role="user", content="arrived while summarizing")
    store.append_messages(session.session_id, [late])
    await store.compact(session.session_id, result)
    assert store.load_transcript(session.session_id) == [*result.messages, late]


# --- the scheduler's tables -------------------------------------------------------------------


async def test_a_version_1_database_gains_the_scheduler_tables(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILENAME, isolation_level=None)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version=1")
    conn.execute("INSERT INTO offsets VALUES ('telegram', 'default', '42', 0)")
    conn.close()
    with SqliteStore.open(tmp_path) as store:
        assert store.schema_version() == SCHEMA_VERSION == len(MIGRATIONS)
        assert await store.get_offset("telegram", "default") == "42"
        assert await store.load_jobs() == []


async def test_jobs_round_trip_and_the_run_log_keeps_the_last_runs(
    tmp_path: Path, clock: FakeClock
) -> None:
    target = Target("slack", "C1", "acme", thread_id="171.5")
    when = datetime(2025, 3, 30, 9, tzinfo=ZoneInfo("Europe/Berlin"))
    job = StoredJob(
        id="daily",
        kind="cron",
        trigger={"expr": "0 9 * * 0", "timezone": "Europe/Berlin"},
        name="cron 0 9 * * 0 (Europe/Berlin): digest",
        prompt="digest",
        target=target,
        source="config",
        fingerprint="f1",
        next_run_time=when,
    )
    with reopen(tmp_path, clock) as store:
        await store.save_job(job)
        for n in range(5):
            await store.add_job_run(
                RunRecord("daily", when + timedelta(days=n), "submitted"), keep=3
            )
        await store.add_job_run(RunRecord("other", when, "failed", "boom"), keep=3)
    with reopen(tmp_path, clock) as store:
        assert await store.load_jobs() == [job]
        stored = await store.get_job("daily")
        assert stored is not None and stored.next_run_time is not None
        assert stored.next_run_time.utcoffset() == timedelta(hours=2)  # its zone's offset kept
        assert (await store.fire_job("daily", when, None, None, keep=True)).advanced
        assert await store.get_job("daily") == replace(job, next_run_time=None)
        assert [r.at for r in await store.job_runs("daily")] == [
            when + timedelta(days=n) for n in (2, 3, 4)
        ]
        assert await store.job_runs("other") == [RunRecord("other", when, "failed", "boom")]
        assert await store.delete_job("daily") and not await store.delete_job("daily")
        assert await store.job_runs("daily") != []  # the run log outlives the job
        # An import is done once: a second one changes nothing.
        assert await store.import_jobs("old-file", [job]) is True
        assert await store.imported("old-file")
        assert await store.import_jobs("old-file", [replace(job, id="again")]) is False
        assert [j.id for j in await store.load_jobs()] == ["daily"]
