"""WAL checkpoints on a worker thread, so the event loop does not wait for them.

In WAL mode a commit only appends to the ``-wal`` file; a checkpoint later copies those
pages into the database and fsyncs both files. SQLite's automatic checkpoint runs inside the
commit that crosses 1,000 pages, on the thread that committed: for botd, the event loop,
which then stalls every conversation for two fsyncs (milliseconds on a quiet disk, far more
on a busy one). So ``WalCheckpointer`` runs a ``PASSIVE`` checkpoint on a thread of its own
every ``COMMITS_PER_CHECKPOINT`` commits. A passive checkpoint takes no lock a writer needs:
the loop's commits go on while it copies. When it copied everything, the next commit starts
the WAL over from its beginning; when commits came in meanwhile, it goes again for those
(a few more rounds at most).

Under a load that never pauses, each round can find new commits, and the WAL would never
start over. The store's connection therefore keeps SQLite's automatic checkpoint, only at
``SAFETY_NET_PAGES``: should the WAL reach that size, the loop's next commit checkpoints
(by then mostly copied already) and the WAL starts over, as without this module.

What a checkpoint guarantees does not change: a commit is in the WAL before the caller hears
of it, and a crash at any point of a checkpoint leaves a database SQLite recovers on the
next open. A checkpoint that fails (a full disk, an I/O error) is logged once in SQLite's
words and tried again at the next turn; the WAL only grows meanwhile. ``close`` waits for a
running checkpoint and closes the thread's connection, so the store's own connection is the
last one and its close folds the WAL in and removes it, as before.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

COMMITS_PER_CHECKPOINT = 100
"""Commits between checkpoints: at a few pages each, a WAL of a few hundred pages."""

SAFETY_NET_PAGES = 4_000
"""The WAL size (pages) at which the committing thread checkpoints after all."""

ROUNDS = 4
"""Checkpoints in a row at most, while commits keep coming in during each."""


class WalCheckpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` on one worker thread, every so many commits."""

    def __init__(self, path: Path, *, every: int = COMMITS_PER_CHECKPOINT) -> None:
        self._path = path
        self._every = every
        self._commits = 0
        self._executor: ThreadPoolExecutor | None = None
        self._running: Future[None] | None = None
        self._conn: sqlite3.Connection | None = None  # used by the worker thread only
        self._failing: str | None = None
        self._closed = False
        self._lock = threading.Lock()  # close against a checkpoint being submitted

    def committed(self) -> None:
        """Count one commit of the store's connection; start a checkpoint when one is due."""
        self._commits += 1
        if self._commits < self._every or (self._running and not self._running.done()):
            return
        self._commits = 0
        with self._lock:
            if self._closed:
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="botd-checkpoint")
            self._running = self._executor.submit(self._checkpoint)

    def wait(self) -> None:
        """Return once no checkpoint is running."""
        running = self._running
        if running is not None:
            running.result()

    def _checkpoint(self) -> None:
        try:
            if self._conn is None:
                # mode=rw: a state dir removed under botd is not recreated empty here.
                uri = f"{self._path.absolute().as_uri()}?mode=rw"
                self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            for _ in range(ROUNDS):
                # fetchall: a statement left unfinished would hold a read lock on the WAL,
                # which keeps the next commit from starting it over.
                [(_busy, frames, copied)] = self._conn.execute(
                    "PRAGMA wal_checkpoint(PASSIVE)"
                ).fetchall()
                if frames == copied:
                    break
        except sqlite3.Error as exc:
            if self._failing != str(exc):
                log.warning("store: checkpointing %s-wal failed: %s", self._path, exc)
            self._failing = str(exc)
            return
        if self._failing is not None:
            log.info("store: checkpointing %s-wal works again", self._path)
            self._failing = None

    def close(self) -> None:
        """Wait for a running checkpoint, then close the thread and its connection."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        if self._conn is not None:
            self._conn.close()
            self._conn = None


__all__ = ["COMMITS_PER_CHECKPOINT", "SAFETY_NET_PAGES", "WalCheckpointer"]
