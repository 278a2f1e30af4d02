"""Run ids and recordings stay unique across restarts, and /status knows a stored session."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from botd.agent.providers.scripted import ScriptedProvider
from botd.cli.replay import read_events
from botd.conversation import Conversations
from botd.ops.logging import LogContext
from botd.store import StoreError
from botd.store.sqlite import DB_FILENAME, SqliteStore
from botd.store.sqlite.schema import MIGRATIONS
from tests.conversation.harness import ListSink, inbound, settings, settle


class RunIds(logging.Handler):
    """The run id of every run that starts."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "botd.conversation" and record.getMessage() == "run started":
            self.ids.append(LogContext.current()["run"])


@pytest.fixture
def run_ids() -> RunIds:
    handler = RunIds()
    logger = logging.getLogger("botd.conversation")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)  # "run started" is a DEBUG line
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def one_process(state: Path, record_dir: Path, *texts: str) -> tuple[Conversations, str]:
    """A process's life: open the store, answer ``texts``, then ``/status``; closed after."""
    with SqliteStore.open(state) as store:
        sink = ListSink()
        manager = Conversations(
            store, ScriptedProvider(), sink, settings(record_events_dir=record_dir)
        )
        for n, text in enumerate(texts):
            await manager.submit(inbound(text, n=n))
            await settle(manager)
        await manager.submit(inbound("/status", n=99))
        status = await sink.last("c1", len(texts) + 1)
        await manager.close(grace=5)
    return manager, status


async def test_run_ids_and_recordings_continue_after_a_restart(
    tmp_path: Path, run_ids: RunIds
) -> None:
    state, record_dir = tmp_path / "state", tmp_path / "runs"
    first, _ = await one_process(state, record_dir, "one", "two")
    second, status = await one_process(state, record_dir, "three")
    session_id = first.conversations["console:c1"].session_id
    assert second.conversations["console:c1"].session_id == session_id  # the same conversation
    assert run_ids.ids == [f"{session_id}:1", f"{session_id}:2", f"{session_id}:3"]
    recordings = sorted(p.name for p in record_dir.glob("*.jsonl"))
    assert recordings == [f"{session_id}-{n:04d}.jsonl" for n in (1, 2, 3)]
    for path in record_dir.glob("*.jsonl"):
        events = read_events(path.read_text(encoding="utf-8").splitlines())
        # One run per file: never two processes' events merged.
        assert [e.type for e in events].count("agent_start") == 1
    assert status.startswith(f"Session {session_id[:8]}: idle, 0 waiting, 6 messages, 3 runs")


AGENTS = "Model: scripted (agent's).\nSystem prompt: none.\nBackend: model (agent's)."
"""/status's lines on the chat's settings when every one is the agent's."""


async def test_status_after_a_restart_shows_the_stored_conversation(tmp_path: Path) -> None:
    state, record_dir = tmp_path / "state", tmp_path / "runs"
    first, _ = await one_process(state, record_dir, "hello")
    session_id = first.conversations["console:c1"].session_id
    # The restarted process has not loaded the session: /status is its first message.
    _, status = await one_process(state, record_dir)
    assert status == (
        f"Session {session_id[:8]}: idle, 0 waiting, 2 messages, 1 runs, "
        "queue mode collect (agent's).\n"
        f"{AGENTS}"
    )
    with SqliteStore.open(state) as store:
        manager = Conversations(store, ScriptedProvider(), ListSink(), settings())
        assert await manager.status("console:nobody") == (
            f"No conversation yet.\nQueue mode: collect (agent's).\n{AGENTS}"
        )


async def test_status_says_so_when_the_store_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SqliteStore.open(tmp_path / "state") as store:
        sink = ListSink()
        manager = Conversations(store, ScriptedProvider(), sink, settings())

        def failing(_key: str) -> None:
            raise StoreError("disk I/O error")

        monkeypatch.setattr(store, "active_session", failing)
        assert await manager.status("console:c1") == (
            "The conversation's state cannot be read now (storage failing).\n"
            f"Queue mode: collect (agent's).\n{AGENTS}"
        )


async def test_new_conversation_starts_counting_again(tmp_path: Path, run_ids: RunIds) -> None:
    state, record_dir = tmp_path / "state", tmp_path / "runs"
    with SqliteStore.open(state) as store:
        sink = ListSink()
        manager = Conversations(
            store, ScriptedProvider(), sink, settings(record_events_dir=record_dir)
        )
        await manager.submit(inbound("one", n=1))
        await settle(manager)
        await manager.submit(inbound("/new", n=2))
        await sink.last("c1", 2)
        await manager.submit(inbound("two", n=3))
        await settle(manager)
        await manager.close(grace=5)
    rows = [(row["session_id"], row["runs"]) for row in store_sessions(state)]
    assert [f"{session_id}:{runs}" for session_id, runs in rows] == run_ids.ids
    assert [runs for _, runs in rows] == [1, 1]


def store_sessions(state: Path) -> list[sqlite3.Row]:
    conn = sqlite3.connect(state / DB_FILENAME)
    conn.row_factory = sqlite3.Row
    try:
        return list(conn.execute("SELECT session_id, runs FROM sessions ORDER BY created_at"))
    finally:
        conn.close()


async def test_a_taken_recording_name_is_never_appended_to(tmp_path: Path) -> None:
    """A run number whose count was lost in a crash is reused; its recording stays apart."""
    state, record_dir = tmp_path / "state", tmp_path / "runs"
    first, _ = await one_process(state, record_dir, "one")
    session_id = first.conversations["console:c1"].session_id
    conn = sqlite3.connect(state / DB_FILENAME)
    conn.execute("UPDATE sessions SET runs = 0")  # as if the count never reached the disk
    conn.commit()
    conn.close()
    await one_process(state, record_dir, "two")
    names = sorted(p.name for p in record_dir.glob("*.jsonl"))
    assert names == [f"{session_id}-0001.2.jsonl", f"{session_id}-0001.jsonl"]
    texts = [p.read_text(encoding="utf-8") for p in sorted(record_dir.glob("*.jsonl"))]
    assert all(text.count('"agent_start"') == 1 for text in texts)


def test_a_version_3_database_counts_on_from_its_inbox_run_ids(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILENAME, isolation_level=None)
    for migration in MIGRATIONS[:3]:
        for statement in migration:
            conn.execute(statement)
    conn.execute("PRAGMA user_version=3")
    for session_id in ("s1", "s2"):
        conn.execute(
            "INSERT INTO sessions (session_id, conversation_key, created_at, updated_at) "
            "VALUES (?, ?, 0, 0)",
            (session_id, f"k:{session_id}"),
        )
        conn.execute("INSERT INTO active_sessions VALUES (?, ?)", (f"k:{session_id}", session_id))
    for run in ("s1:3", "s1:12", "s1:7"):
        conn.execute(
            "INSERT INTO inbox (channel, conversation_key, message, state, run_id, session_id, "
            "accepted_at, updated_at) VALUES ('t', 'k:s1', '{}', 'answered', ?, 's1', 0, 0)",
            (run,),
        )
    conn.close()
    with SqliteStore.open(tmp_path) as store:
        assert store.schema_version() == len(MIGRATIONS)
        s1, s2 = store.active_session("k:s1"), store.active_session("k:s2")
        assert s1 is not None and s1.runs == 12
        assert s2 is not None and s2.runs == 0
        assert store.active_session("k:none") is None
        store.count_run_soon("s2")
        store.flush_deferred()
        assert store.get_session("s2").runs == 1
