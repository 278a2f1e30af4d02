"""WAL checkpoints: off the committing thread, yet the WAL starts over and stays bounded, and
a failing checkpoint costs no write."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from botd.store.sqlite import DB_FILENAME, SqliteStore
from botd.store.sqlite import checkpoint as checkpoint_module
from botd.store.sqlite.checkpoint import COMMITS_PER_CHECKPOINT, SAFETY_NET_PAGES


def commit_many(store: SqliteStore, count: int, prefix: str = "k") -> None:
    for n in range(count):
        store.get_or_create_session(f"{prefix}{n}")  # one transaction each


def wal_frames(state: Path) -> int:
    """Frames in the WAL now (asked of a connection of the test's own)."""
    conn = sqlite3.connect(state / DB_FILENAME)
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        conn.close()


def test_the_committing_thread_checkpoints_only_as_a_safety_net(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path) as store:
        conn = store._connection()
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == SAFETY_NET_PAGES


def test_the_wal_starts_over_after_a_background_checkpoint(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path) as store:
        commit_many(store, COMMITS_PER_CHECKPOINT)  # the last one makes a checkpoint due
        store._checkpointer.wait()
        commit_many(store, 1, prefix="after")  # starts the WAL over
        # Each commit wrote a frame at least: only the last one's are left.
        assert wal_frames(tmp_path) < COMMITS_PER_CHECKPOINT / 4
    assert not (tmp_path / f"{DB_FILENAME}-wal").exists()  # the last close folded it in


def test_the_wal_stays_bounded_under_commits_that_never_pause(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path) as store:
        page = int(store._connection().execute("PRAGMA page_size").fetchone()[0])
        commit_many(store, 4 * SAFETY_NET_PAGES)  # far more pages than the net
        wal = tmp_path / f"{DB_FILENAME}-wal"
        assert wal.stat().st_size < 2 * SAFETY_NET_PAGES * page
        count = store._connection().execute("SELECT count(*) FROM sessions").fetchone()[0]
        assert count == 4 * SAFETY_NET_PAGES


def test_a_failing_checkpoint_is_logged_once_and_costs_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refused(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("disk I/O error")

    caplog.set_level(logging.INFO, logger=checkpoint_module.__name__)
    with SqliteStore.open(tmp_path) as store:
        with monkeypatch.context() as patched:
            patched.setattr(sqlite3, "connect", refused)  # the store is open already
            for turn in range(3):
                commit_many(store, COMMITS_PER_CHECKPOINT, prefix=f"t{turn}-")
                store._checkpointer.wait()
        failures = [r for r in caplog.records if "disk I/O error" in r.getMessage()]
        assert len(failures) == 1 and failures[0].levelno == logging.WARNING
        assert str(tmp_path / DB_FILENAME) in failures[0].getMessage()
        assert store.health.ok  # the writes themselves all went through
        commit_many(store, COMMITS_PER_CHECKPOINT, prefix="again")
        store._checkpointer.wait()
        assert any("works again" in r.getMessage() for r in caplog.records)
        count = store._connection().execute("SELECT count(*) FROM sessions").fetchone()[0]
        assert count == 4 * COMMITS_PER_CHECKPOINT


def test_a_state_dir_removed_under_the_store_is_not_recreated_by_a_checkpoint(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    with SqliteStore.open(state) as store:
        commit_many(store, COMMITS_PER_CHECKPOINT - 1)
        for file in state.iterdir():
            file.unlink()
        commit_many(store, 1, prefix="last")  # SQLite still has its files open
        store._checkpointer.wait()
    assert not (state / DB_FILENAME).exists()
