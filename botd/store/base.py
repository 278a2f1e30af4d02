"""The connection, its transactions and the schema migrations that every part of the store shares.

The database is ``<state_dir>/botd.sqlite3`` in WAL mode. It uses the standard library
``sqlite3`` synchronously, on the event loop thread. That is deliberate: every operation is
a short indexed read or a small write to a local file (well under a millisecond in WAL mode
with ``synchronous=NORMAL``, where a commit appends to the WAL without an fsync), so a
thread hop per call would cost more than it saves, and one thread means one connection with
no locking between botd's own tasks. It also makes each method atomic with respect to the
other coroutines: nothing awaits in the middle of a transaction. ``check_same_thread`` stays
on, so a call from another thread fails loudly instead of racing.

``synchronous=NORMAL`` in WAL mode never corrupts the database; a power cut can lose the last
few commits, which at worst replays an inbound message or loses the last transcript lines.

The schema is migrated on open by ``PRAGMA user_version``: ``MIGRATIONS[n]`` takes a
database from version ``n`` to ``n + 1``, each in its own transaction. A database written by
a newer botd (a higher version than this code knows) is refused rather than guessed at.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from .schema import MIGRATIONS, SCHEMA_VERSION

DB_FILENAME = "botd.sqlite3"
BUSY_TIMEOUT_MS = 2_000
"""How long to wait for another process's write lock (an operator's sqlite3 shell, say)."""

Clock = Callable[[], float]


class StoreError(Exception):
    """The store cannot be used (closed, or a database this botd does not understand)."""


class StoreBase:
    """One connection to the database, migrated to the current schema on open."""

    def __init__(self, path: Path, *, clock: Clock = time.time) -> None:
        self.path = path
        self._clock = clock
        # isolation_level=None: no implicit transactions; _transaction() says where they are.
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{path}: could not switch to WAL mode (got {mode!r})")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._conn: sqlite3.Connection | None = conn
            self._migrate()
        except BaseException:
            conn.close()
            self._conn = None
            raise

    @classmethod
    def open(cls, state_dir: Path, *, clock: Clock = time.time) -> Self:
        """The store in ``state_dir`` (created if missing), migrated to the current schema."""
        state_dir.mkdir(parents=True, exist_ok=True)
        return cls(state_dir / DB_FILENAME, clock=clock)

    def close(self) -> None:
        """Close the connection (idempotent). SQLite checkpoints the WAL on the last close."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def schema_version(self) -> int:
        return int(self._connection().execute("PRAGMA user_version").fetchone()[0])

    # --- plumbing -----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self.path}: the store is closed")
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so a read-then-write never fails halfway
        # because another process wrote in between.
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # SQLite may already have rolled back (some errors do); a failed COMMIT has not.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _migrate(self) -> None:
        conn = self._connection()
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this botd understands "
                f"({SCHEMA_VERSION}); upgrade botd or point state_dir elsewhere"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self._transaction():
                for statement in MIGRATIONS[target - 1]:
                    conn.execute(statement)
                # user_version is in the database header and changes inside the transaction.
                conn.execute(f"PRAGMA user_version={target}")
