"""The connection, its transactions and the schema migrations that every part of the store shares.

The database is ``<state_dir>/botd.sqlite3`` in WAL mode. It uses the standard library
``sqlite3`` synchronously, on the event loop thread. That is deliberate: every operation is
a short indexed read or a small write to a local file (well under a millisecond in WAL mode
with ``synchronous=NORMAL``, where a commit appends to the WAL without an fsync), so a
thread hop per call would cost more than it saves, and one thread means one connection with
no locking between botd's own tasks. (WAL checkpoints, two fsyncs each, run on a thread of
their own: ``checkpoint``.) It also makes each method atomic with respect to the
other coroutines: nothing awaits in the middle of a transaction. ``check_same_thread`` stays
on, so a call from another thread fails loudly instead of racing.

``synchronous=NORMAL`` in WAL mode never corrupts the database; a power cut can lose the last
few commits, which at worst replays an inbound message or loses the last transcript lines.

The schema is migrated on open by ``PRAGMA user_version``: ``MIGRATIONS[n]`` takes a
database from version ``n`` to ``n + 1``, each in its own transaction, and the move is logged
once (``botd.store.migrations``). A database written by a newer botd (a higher version than
this code knows) is refused rather than guessed at.

Opening refuses, with one line naming the file and the fix (``StoreOpenError``), a database
botd cannot use: a directory in its place, a file botd may not write, a file that is not
SQLite, one whose pages fail SQLite's ``quick_check``, one from a newer botd. The checks read
the file and never write it; ``-wal``/``-shm`` files the attempt created are removed again.

Every write goes through ``_transaction``, the one place that sees write failures. A storage
fault there (disk full, I/O error, read-only, corruption) raises ``StoreWriteError`` with
SQLite's own words and marks ``StoreBase.health`` degraded for that kind of write; its next
commit clears it, so botd recovers by itself once the disk takes writes again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from ..errors import Clock, StoreError, StoreHealth, StoreOpenError, StoreWriteError
from ..migrations import log_migrated, newer_schema
from .checkpoint import SAFETY_NET_PAGES, WalCheckpointer
from .schema import MIGRATIONS, SCHEMA_VERSION
from .text import TextConnection

log = logging.getLogger(__name__)

DB_FILENAME = "botd.sqlite3"
BUSY_TIMEOUT_MS = 2_000
"""How long to wait for another process's write lock (an operator's sqlite3 shell, say)."""

SQLITE_MAGIC = b"SQLite format 3\x00"
SIDECARS = ("-wal", "-shm")


CORRUPT_FIX = "restore it from a backup or move it aside (botd then starts afresh)"


class StoreBase:
    """One connection to the database, migrated to the current schema on open."""

    def __init__(self, path: Path, *, clock: Clock = time.time) -> None:
        self.path = path
        self._clock = clock
        self.health = StoreHealth(clock)
        self._opened = False  # until then a failed write is an open error, not ill health
        self._conn: sqlite3.Connection | None = None
        self._checkpointer = WalCheckpointer(path)
        preflight(path)
        existing = {s for s in ("", *SIDECARS) if Path(f"{path}{s}").exists()}
        try:
            # isolation_level=None: no implicit transactions; _transaction() says where they are.
            # TextConnection: a NUL in a string parameter is written as U+FFFD (``text``).
            conn = sqlite3.connect(path, isolation_level=None, factory=TextConnection)
        except sqlite3.Error as exc:
            raise StoreOpenError(f"{path}: cannot be opened ({exc}): {_open_fix(exc)}") from None
        try:
            self._check(conn)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreOpenError(f"{path}: could not switch to WAL mode (got {mode!r})")
            conn.execute("PRAGMA synchronous=NORMAL")
            # The checkpointer's thread checkpoints; this connection only as a safety net.
            conn.execute(f"PRAGMA wal_autocheckpoint={SAFETY_NET_PAGES}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._conn = conn
            self._migrate()
            self._opened = True
        except BaseException as exc:
            self._checkpointer.close()
            conn.close()
            self._conn = None
            for suffix in ("", *SIDECARS):  # only what this attempt created
                if suffix not in existing:
                    with contextlib.suppress(OSError):
                        Path(f"{path}{suffix}").unlink()
            cause = exc.__cause__ if isinstance(exc, StoreWriteError) else exc
            if isinstance(cause, sqlite3.Error):
                raise StoreOpenError(
                    f"{path}: cannot be opened ({cause}): {_open_fix(cause)}"
                ) from None
            raise

    def _check(self, conn: sqlite3.Connection) -> None:
        """Refuse a newer schema or damaged pages before anything is written."""
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreOpenError(newer_schema(str(self.path), version, SCHEMA_VERSION, "state_dir"))
        problem = str(conn.execute("PRAGMA quick_check(1)").fetchone()[0])
        if problem != "ok":
            problem = " ".join(problem.replace("*** in database main ***", "").split())
            raise StoreOpenError(f"{self.path}: is damaged (SQLite: {problem}): {CORRUPT_FIX}")

    @classmethod
    def open(cls, state_dir: Path, *, clock: Clock = time.time) -> Self:
        """The store in ``state_dir`` (created if missing), migrated to the current schema.

        Raises ``StoreOpenError`` when the database cannot be used (see the module docstring).
        """
        state_dir.mkdir(parents=True, exist_ok=True)
        return cls(state_dir / DB_FILENAME, clock=clock)

    def close(self) -> None:
        """Close the connection (idempotent). SQLite checkpoints the WAL on the last close,
        this one: the checkpointer's connection is closed first."""
        self._checkpointer.close()
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

    @property
    def where(self) -> str:
        return str(self.path)

    async def probe(self, wait: float) -> int:
        """The schema version: a file on this machine is always there to read (a failing
        disk shows in ``health``, at the write that failed)."""
        try:
            return self.schema_version()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None

    # --- plumbing -----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self.path}: the store is closed")
        return self._conn

    @contextmanager
    def _transaction(self, kind: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; the one place where write failures are seen.

        ``kind`` names the write (the store method) in the health record: a fault is cleared
        when a write of the kind that failed commits again, so a small in-place update that
        still fits on a full disk does not hide the inserts that keep failing.

        A storage fault raises ``StoreWriteError`` and marks ``health`` degraded; a commit
        clears it. Other errors (a constraint, a bug) pass through unchanged.
        """
        # IMMEDIATE takes the write lock up front, so a read-then-write never fails halfway
        # because another process wrote in between.
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # SQLite may already have rolled back (some errors do); a failed COMMIT has not.
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error as exc:
                        log.error("rolling back a failed write failed too: %s", exc)
                raise
        except sqlite3.Error as exc:
            if not storage_fault(exc):
                raise
            if self._opened:
                self.health.failed(kind, str(exc))
            raise StoreWriteError(self.path, str(exc)) from exc
        self.health.succeeded(kind)
        if self._opened:  # not the migrations: they run before botd is under way
            self._checkpointer.committed()

    def _migrate(self) -> None:
        conn = self._connection()
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self._transaction("migrate"):
                for statement in MIGRATIONS[target - 1]:
                    conn.execute(statement)
                # user_version is in the database header and changes inside the transaction.
                conn.execute(f"PRAGMA user_version={target}")
        if version < SCHEMA_VERSION:
            log_migrated(str(self.path), version, SCHEMA_VERSION)


def _open_fix(exc: sqlite3.Error) -> str:
    """What an operator can do about an error SQLite gave while opening the database."""
    name = getattr(exc, "sqlite_errorname", "")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return CORRUPT_FIX
    if name.startswith("SQLITE_FULL"):
        return "free space on its file system"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return "another process holds it locked (an sqlite3 shell?): close that first"
    return (
        "check its file system (free space, a read-only mount) and that the file and its "
        "directory are writable for the user botd runs as"
    )


def storage_fault(exc: sqlite3.Error) -> bool:
    """A failure of the disk or the file (full, I/O, read-only, locked, corrupt), not a
    constraint violation or a misuse of the API."""
    return isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError


def preflight(path: Path) -> None:
    """Refuse what SQLite would open badly or not at all, reading only (no connection yet).

    Real open attempts, not permission bits: root passes any mode check, and a read-only
    mount shows only when a write is tried.
    """
    if path.is_dir():
        raise StoreOpenError(f"{path}: is a directory, not a database file: move it aside")
    for file in (path, *(Path(f"{path}{s}") for s in SIDECARS)):
        try:
            fd = os.open(file, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreOpenError(
                f"{file}: cannot be opened for writing ({exc.strerror}): make it and its "
                "directory writable for the user botd runs as"
            ) from None
        try:
            header = os.pread(fd, len(SQLITE_MAGIC), 0) if file == path else SQLITE_MAGIC
        finally:
            os.close(fd)
        if header and header != SQLITE_MAGIC:
            raise StoreOpenError(f"{path}: is not a SQLite database (corrupt?): {CORRUPT_FIX}")
    try:
        # SQLite creates the -wal and -shm files next to the database.
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise StoreOpenError(
            f"{path.parent}: cannot create files in the state dir ({exc.strerror}): make it "
            "writable for the user botd runs as"
        ) from None
