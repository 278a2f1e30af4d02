"""Group commit: the writes botd waits for share one transaction per event-loop iteration, and
one that fails alone fails only its own caller."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from botd.chat import Target
from botd.events import Message, TextContent
from botd.store import ContentRefused, StoreWriteError, UnknownSessionError
from botd.store.sqlite import SqliteStore, deferred
from tests.conversation.harness import inbound
from tests.store.harness import fill_the_disk
from tests.support.waiting import until

TARGET = Target("console", "c1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore.open(tmp_path / "state")
    yield opened
    opened.close()


def count_commits(store: SqliteStore) -> list[str]:
    statements: list[str] = []
    store._connection().set_trace_callback(statements.append)
    return statements


def _commits(statements: list[str]) -> int:
    return sum(1 for s in statements if s.strip().upper() == "COMMIT")


async def test_writes_awaited_together_commit_in_one_transaction(store: SqliteStore) -> None:
    statements = count_commits(store)
    messages = [inbound(f"m{n}", n=n) for n in range(20)]
    ids = await asyncio.gather(
        *(store.accept_inbound("console", (m.message_id,), m) for m in messages),
        *(store.outbox_add(None, n, "block", TARGET, f"piece {n}") for n in range(20)),
    )
    assert _commits(statements) == 1
    assert all(isinstance(i, int) for i in ids)
    assert [e.message.text for e in store.unfinished_inbox()] == [m.text for m in messages]
    assert [p.text for p in store.outbox_pending()] == [f"piece {n}" for n in range(20)]


async def test_a_write_failing_for_its_own_reason_fails_only_its_caller(store: SqliteStore) -> None:
    # SQLite cannot store a lone surrogate (an inbound message has none, its text fields are
    # made storable; a raw key is written as given): that write is refused for its content,
    # its neighbours commit.
    bad = inbound("bad", n=1)
    good = [inbound("before", n=0), inbound("after", n=2)]
    results = await asyncio.gather(
        store.accept_inbound("console", ("0",), good[0]),
        store.accept_inbound("console", ("1", "1\ud800"), bad),
        store.accept_inbound("console", ("2",), good[1]),
        return_exceptions=True,
    )
    assert isinstance(results[0], int) and isinstance(results[2], int)
    assert isinstance(results[1], ContentRefused)
    assert "surrogates not allowed" in results[1].reason
    assert [e.message.text for e in store.unfinished_inbox()] == ["before", "after"]
    # Nothing of the failed write stayed behind, its key included: it can be accepted later.
    assert not await store.seen_inbound("console", "1")
    assert store.health.ok


async def test_a_storage_fault_fails_every_waiting_write_and_recovery_follows(
    store: SqliteStore,
) -> None:
    free = fill_the_disk(store)
    results = await asyncio.gather(
        *(store.accept_inbound("console", (str(n),), inbound(f"m{n}", n=n)) for n in range(3)),
        store.outbox_add(None, 1, "block", TARGET, "a piece"),
        return_exceptions=True,
    )
    assert all(isinstance(r, StoreWriteError) for r in results), results
    assert not store.health.ok
    assert store.unfinished_inbox() == [] and store.outbox_pending() == []
    free()
    assert await store.accept_inbound("console", ("0",), inbound("m0", n=0)) is not None
    assert store.health.ok


async def test_a_caller_that_gave_up_before_the_commit_writes_nothing(store: SqliteStore) -> None:
    waiting = asyncio.ensure_future(store.outbox_add(None, 1, "block", TARGET, "never"))
    await asyncio.sleep(0)  # queued, not yet committed
    waiting.cancel()
    kept = await store.outbox_add(None, 2, "block", TARGET, "kept")
    assert waiting.cancelled()
    assert [(p.id, p.text) for p in store.outbox_pending()] == [(kept, "kept")]


async def test_records_queued_before_an_awaited_write_commit_with_it(store: SqliteStore) -> None:
    session = store.get_or_create_session("console:c1")
    message = inbound("hi")
    inbox_id = await store.accept_inbound("console", ("k",), message)
    assert inbox_id is not None
    statements = count_commits(store)
    store.finish_inbox([inbox_id], "answered")  # a record: nobody waits for it
    await store.outbox_add(None, 1, "block", TARGET, "an awaited write")
    assert _commits(statements) == 1
    store._connection().set_trace_callback(None)
    assert store.inbox_state(inbox_id) == "answered"
    assert store.get_or_create_session("console:c1").session_id == session.session_id


async def test_an_offset_rides_in_the_group_commit_of_the_accepted_message(
    store: SqliteStore,
) -> None:
    statements = count_commits(store)
    message = inbound("m", n=1)
    store.set_offset_soon("telegram", "default", "2")
    assert await store.accept_inbound("console", ("1",), message) is not None
    assert _commits(statements) == 1
    assert await store.get_offset("telegram", "default") == "2"


async def test_an_offset_read_sees_the_queued_write(store: SqliteStore) -> None:
    store.set_offset_soon("telegram", "default", "7")
    assert await store.get_offset("telegram", "default") == "7"


def test_an_existing_session_is_found_without_a_write_transaction(store: SqliteStore) -> None:
    created = store.get_or_create_session("console:c1")
    statements = count_commits(store)
    found = store.get_or_create_session("console:c1")
    assert found == created
    assert not [s for s in statements if s.strip().upper().startswith(("BEGIN", "COMMIT"))]


def _seen_by_another_connection(store: SqliteStore, sql: str) -> list[tuple[object, ...]]:
    """What a second connection (another process, after a crash) reads from the database."""
    other = sqlite3.connect(store.path)
    try:
        return list(other.execute(sql).fetchall())
    finally:
        other.close()


async def _iterations(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_a_run_start_waits_for_the_reply_piece_and_rides_in_its_commit(
    store: SqliteStore,
) -> None:
    session = store.get_or_create_session("console:c1")
    inbox_id = await store.accept_inbound("console", ("k",), inbound("hi"))
    assert inbox_id is not None
    statements = count_commits(store)
    store.start_inbox_run([inbox_id], session_id=session.session_id, run_id="r:1")
    store.count_run_soon(session.session_id)
    await _iterations(5)  # the loop goes on: the lazy records do not commit on their own yet
    assert _commits(statements) == 0
    states = "SELECT state FROM inbox"
    assert _seen_by_another_connection(store, states) == [("accepted",)]
    await store.outbox_add(inbox_id, 1, "block", TARGET, "the reply")
    assert _commits(statements) == 1  # one transaction: the start, the count and the piece
    assert _seen_by_another_connection(store, states) == [("running",)]
    runs = f"SELECT runs FROM sessions WHERE session_id = '{session.session_id}'"
    assert _seen_by_another_connection(store, runs) == [(1,)]


async def test_a_lazy_record_alone_commits_after_the_window(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deferred, "LAZY_WINDOW", 0.05)
    store.set_offset_soon("telegram", "default", "9")
    offsets = "SELECT value FROM offsets"
    assert _seen_by_another_connection(store, offsets) == []
    await until(lambda: _seen_by_another_connection(store, offsets), "the lazy record committed")
    assert _seen_by_another_connection(store, offsets) == [("9",)]


async def test_a_prompt_record_carries_the_lazy_ones_queued_before_it(store: SqliteStore) -> None:
    inbox_id = await store.accept_inbound("console", ("k",), inbound("hi"))
    assert inbox_id is not None
    statements = count_commits(store)
    store.set_offset_soon("telegram", "default", "3")  # lazy
    store.finish_inbox([inbox_id], "answered")  # prompt: the end of this iteration
    await _iterations(3)
    assert _commits(statements) == 1
    assert _seen_by_another_connection(store, "SELECT value FROM offsets") == [("3",)]
    assert _seen_by_another_connection(store, "SELECT state FROM inbox") == [("answered",)]


def test_a_lazy_record_queued_at_close_is_committed(tmp_path: Path) -> None:
    opened = SqliteStore.open(tmp_path / "state")

    async def queue() -> None:
        opened.set_offset_soon("telegram", "default", "11")

    asyncio.run(queue())
    opened.close()
    reopened = SqliteStore.open(tmp_path / "state")
    try:
        assert asyncio.run(reopened.get_offset("telegram", "default")) == "11"
    finally:
        reopened.close()


async def test_a_run_closing_transcript_write_rides_with_the_sent_mark_and_the_answer(
    store: SqliteStore,
) -> None:
    session = store.get_or_create_session("console:c1")
    inbox_id = await store.accept_inbound("console", ("k",), inbound("hi"))
    assert inbox_id is not None
    piece = await store.outbox_add(inbox_id, 1, "block", TARGET, "the reply")
    statements = count_commits(store)
    closing = [Message(role="assistant", content=[TextContent(text="the reply")])]
    saved = store.append_messages_later(session.session_id, closing)
    await _iterations(5)  # lazy: it waits for the next commit
    assert _commits(statements) == 0 and not saved.done()
    store.outbox_sent(piece, ["m1"])
    store.finish_inbox([inbox_id], "answered")
    await saved
    assert _commits(statements) == 1  # the message, the sent mark and the answer together
    assert [m.role for m in store.load_transcript(session.session_id)] == ["assistant"]


async def test_a_closing_transcript_write_that_fails_alone_lets_the_rest_commit(
    store: SqliteStore,
) -> None:
    inbox_id = await store.accept_inbound("console", ("k",), inbound("hi"))
    assert inbox_id is not None
    # An unknown session: this write fails for its own reason when its transaction runs.
    saved = store.append_messages_later("no-such-session", [Message(role="assistant")])
    store.finish_inbox([inbox_id], "answered")
    with pytest.raises(UnknownSessionError):
        await saved
    assert _seen_by_another_connection(store, "SELECT state FROM inbox") == [("answered",)]


async def test_commit_soon_commits_a_lazy_write_without_its_window(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deferred, "LAZY_WINDOW", 3600.0)  # only commit_soon can commit it
    session = store.get_or_create_session("console:c1")
    saved = store.append_messages_later(session.session_id, [Message(role="assistant")])
    store.commit_soon()
    await asyncio.wait_for(saved, 30)  # a hang guard
    assert len(store.load_transcript(session.session_id)) == 1
