"""Persistent state in one SQLite file: sessions, transcripts, inbound dedupe ids, offsets.

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

The schema is migrated on open by ``PRAGMA user_version``: ``_MIGRATIONS[n]`` takes a
database from version ``n`` to ``n + 1``, each in its own transaction. A database written by
a newer botd (a higher version than this code knows) is refused rather than guessed at.

Transcripts are append-only. Compaction does not rewrite rows: it marks the live rows as
compacted (kept for audit) and appends the compacted view as new live rows, so
``load_transcript`` (the live rows in order) returns the compacted transcript.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .events import Message

if TYPE_CHECKING:
    from .compaction import CompactionResult

DB_FILENAME = "botd.sqlite3"
DEFAULT_INBOUND_RETENTION_SECONDS = 7 * 24 * 3600.0
"""How long inbound ids are worth keeping: far beyond any platform's redelivery window."""
BUSY_TIMEOUT_MS = 2_000
"""How long to wait for another process's write lock (an operator's sqlite3 shell, say)."""

Clock = Callable[[], float]


class StoreError(Exception):
    """The store cannot be used (closed, or a database this botd does not understand)."""


class UnknownSessionError(KeyError):
    """A session id that the store has no record of."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id

    def __str__(self) -> str:
        return f"unknown session {self.session_id!r}"


class StaleCompactionError(StoreError):
    """A compaction computed from a transcript that has since changed in the store."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session: a conversation's transcript from its start (or its last ``/new``)."""

    session_id: str
    conversation_key: str
    created_at: float
    updated_at: float
    message_count: int
    """Messages in the live transcript (what ``load_transcript`` returns)."""
    summary: str | None
    """The latest compaction summary, if the transcript was ever compacted."""
    active: bool
    """Whether this is the session that its conversation key currently uses."""


_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the initial schema.
    (
        """
        CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            conversation_key TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            summary TEXT,
            meta TEXT NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE INDEX sessions_by_key ON sessions (conversation_key)",
        # The session each conversation key uses now; /new repoints it.
        """
        CREATE TABLE active_sessions (
            conversation_key TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions (session_id)
        )
        """,
        # AUTOINCREMENT: ids are never reused, so id order is append order for audit too.
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions (session_id),
            role TEXT NOT NULL,
            body TEXT NOT NULL,
            created_at REAL NOT NULL,
            compacted_at REAL
        )
        """,
        "CREATE INDEX messages_live ON messages (session_id, compacted_at, id)",
        """
        CREATE TABLE inbound_seen (
            channel TEXT NOT NULL,
            message_id TEXT NOT NULL,
            seen_at REAL NOT NULL,
            PRIMARY KEY (channel, message_id)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX inbound_seen_by_time ON inbound_seen (seen_at)",
        """
        CREATE TABLE offsets (
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (channel, account)
        ) WITHOUT ROWID
        """,
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)

_SESSION_COLUMNS = (
    "s.session_id, s.conversation_key, s.created_at, s.updated_at, s.message_count, s.summary, "
    "a.session_id IS NOT NULL"
)
_SESSION_FROM = "sessions s LEFT JOIN active_sessions a ON a.session_id = s.session_id"


def _message_json(message: Message) -> str:
    return json.dumps(message.model_dump(mode="json", exclude_none=True), ensure_ascii=False)


def _record(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        session_id=str(row[0]),
        conversation_key=str(row[1]),
        created_at=float(row[2]),
        updated_at=float(row[3]),
        message_count=int(row[4]),
        summary=None if row[5] is None else str(row[5]),
        active=bool(row[6]),
    )


class Store:
    """botd's SQLite state. Open with ``Store.open(state_dir)``; close when done."""

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
    def open(cls, state_dir: Path, *, clock: Clock = time.time) -> Store:
        """The store in ``state_dir`` (created if missing), migrated to the current schema."""
        state_dir.mkdir(parents=True, exist_ok=True)
        return cls(state_dir / DB_FILENAME, clock=clock)

    def close(self) -> None:
        """Close the connection (idempotent). SQLite checkpoints the WAL on the last close."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
                for statement in _MIGRATIONS[target - 1]:
                    conn.execute(statement)
                # user_version is in the database header and changes inside the transaction.
                conn.execute(f"PRAGMA user_version={target}")

    def schema_version(self) -> int:
        return int(self._connection().execute("PRAGMA user_version").fetchone()[0])

    def _require_session(self, conn: sqlite3.Connection, session_id: str) -> None:
        row = conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,))
        if row.fetchone() is None:
            raise UnknownSessionError(session_id)

    def _insert_messages(
        self, conn: sqlite3.Connection, session_id: str, bodies: Sequence[tuple[str, str]]
    ) -> None:
        now = self._clock()
        conn.executemany(
            "INSERT INTO messages (session_id, role, body, created_at) VALUES (?, ?, ?, ?)",
            [(session_id, role, body, now) for role, body in bodies],
        )

    # --- sessions -----------------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRecord:
        row = (
            self._connection()
            .execute(
                f"SELECT {_SESSION_COLUMNS} FROM {_SESSION_FROM} WHERE s.session_id = ?",
                (session_id,),
            )
            .fetchone()
        )
        if row is None:
            raise UnknownSessionError(session_id)
        return _record(row)

    def _create_session(self, conn: sqlite3.Connection, conversation_key: str) -> str:
        session_id = uuid.uuid4().hex
        now = self._clock()
        conn.execute(
            "INSERT INTO sessions (session_id, conversation_key, created_at, updated_at) "
            "VALUES (?, ?, ?, ?)",
            (session_id, conversation_key, now, now),
        )
        conn.execute(
            "INSERT INTO active_sessions (conversation_key, session_id) VALUES (?, ?) "
            "ON CONFLICT (conversation_key) DO UPDATE SET session_id = excluded.session_id",
            (conversation_key, session_id),
        )
        return session_id

    def get_or_create_session(self, conversation_key: str) -> SessionRecord:
        """The active session of ``conversation_key``, created on first use."""
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT session_id FROM active_sessions WHERE conversation_key = ?",
                (conversation_key,),
            ).fetchone()
            session_id = str(row[0]) if row is not None else None
            if session_id is None:
                session_id = self._create_session(conn, conversation_key)
        return self.get_session(session_id)

    def new_session(self, conversation_key: str) -> SessionRecord:
        """Start a fresh session for ``conversation_key`` (``/new``) and make it the active one.

        The previous session and its transcript stay in the database; they are just no longer
        what ``get_or_create_session`` returns.
        """
        with self._transaction() as conn:
            session_id = self._create_session(conn, conversation_key)
        return self.get_session(session_id)

    def touch_session(self, session_id: str) -> None:
        """Mark the session as used now."""
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE sessions SET updated_at = ? WHERE session_id = ?",
                (self._clock(), session_id),
            )
            if cursor.rowcount == 0:
                raise UnknownSessionError(session_id)

    def list_sessions(self, *, include_inactive: bool = False) -> list[SessionRecord]:
        """Sessions, newest activity first: the active ones, or all if ``include_inactive``."""
        where = "" if include_inactive else "WHERE a.session_id IS NOT NULL"
        rows = (
            self._connection()
            .execute(
                f"SELECT {_SESSION_COLUMNS} FROM {_SESSION_FROM} {where} "
                "ORDER BY s.updated_at DESC, s.rowid DESC"
            )
            .fetchall()
        )
        return [_record(row) for row in rows]

    def get_session_meta(self, session_id: str) -> dict[str, Any]:
        """The session's small JSON dict of settings (model override, last route, ...)."""
        row = (
            self._connection()
            .execute("SELECT meta FROM sessions WHERE session_id = ?", (session_id,))
            .fetchone()
        )
        if row is None:
            raise UnknownSessionError(session_id)
        meta: dict[str, Any] = json.loads(str(row[0]))
        return meta

    def set_session_meta(self, session_id: str, key: str, value: object) -> None:
        """Set one key of the session's meta to a JSON-serializable value; None removes it."""
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT meta FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise UnknownSessionError(session_id)
            meta: dict[str, Any] = json.loads(str(row[0]))
            if value is None:
                meta.pop(key, None)
            else:
                meta[key] = value
            conn.execute(
                "UPDATE sessions SET meta = ? WHERE session_id = ?",
                (json.dumps(meta, ensure_ascii=False), session_id),
            )

    # --- transcripts --------------------------------------------------------------------------

    def append_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages (user, assistant, tool results: everything of a run) in order."""
        bodies = [(message.role, _message_json(message)) for message in messages]
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE sessions SET updated_at = ?, message_count = message_count + ? "
                "WHERE session_id = ?",
                (self._clock(), len(bodies), session_id),
            )
            if cursor.rowcount == 0:
                raise UnknownSessionError(session_id)
            self._insert_messages(conn, session_id, bodies)

    def _live_rows(self, conn: sqlite3.Connection, session_id: str) -> list[tuple[int, str, str]]:
        rows = conn.execute(
            "SELECT id, role, body FROM messages "
            "WHERE session_id = ? AND compacted_at IS NULL ORDER BY id",
            (session_id,),
        ).fetchall()
        return [(int(row[0]), str(row[1]), str(row[2])) for row in rows]

    def load_transcript(self, session_id: str) -> list[Message]:
        """The live transcript, oldest first (after a compaction: the summary, then the rest)."""
        conn = self._connection()
        self._require_session(conn, session_id)
        return [
            Message.model_validate(json.loads(body))
            for _, _, body in self._live_rows(conn, session_id)
        ]

    def replace_transcript_prefix(
        self,
        session_id: str,
        prefix_count: int,
        replacement: Sequence[Message],
        *,
        expected_rest: Sequence[Message] | None = None,
        summary: str | None = None,
    ) -> None:
        """Replace the first ``prefix_count`` live messages by ``replacement``.

        The replaced rows are kept, marked compacted. When ``expected_rest`` is given, the
        live messages right after the prefix must equal it, or ``StaleCompactionError`` is
        raised and nothing changes: it catches a replacement computed from an outdated
        transcript. Messages appended after ``expected_rest`` are allowed and stay at the end.
        ``summary`` is recorded on the session.
        """
        if prefix_count < 0:
            raise ValueError(f"prefix_count must be >= 0, got {prefix_count}")
        with self._transaction() as conn:
            self._require_session(conn, session_id)
            live = self._live_rows(conn, session_id)
            if prefix_count > len(live):
                raise StaleCompactionError(
                    f"session {session_id}: cannot replace {prefix_count} messages, "
                    f"the transcript has {len(live)}"
                )
            rest = live[prefix_count:]
            if expected_rest is not None:
                stored = [json.loads(body) for _, _, body in rest[: len(expected_rest)]]
                expected = [json.loads(_message_json(message)) for message in expected_rest]
                if stored != expected:
                    raise StaleCompactionError(
                        f"session {session_id}: the transcript changed since it was compacted"
                    )
            now = self._clock()
            conn.execute(
                "UPDATE messages SET compacted_at = ? "
                "WHERE session_id = ? AND compacted_at IS NULL",
                (now, session_id),
            )
            # The rest is re-appended after the replacement so that id order stays the
            # transcript order; the originals remain as compacted rows.
            bodies: list[tuple[str, str]] = [
                (message.role, _message_json(message)) for message in replacement
            ]
            bodies += [(role, body) for _, role, body in rest]
            self._insert_messages(conn, session_id, bodies)
            conn.execute(
                "UPDATE sessions SET message_count = ?, updated_at = ?, "
                "summary = COALESCE(?, summary) WHERE session_id = ?",
                (len(bodies), now, summary, session_id),
            )

    def compact(self, session_id: str, result: CompactionResult) -> None:
        """Persist a compaction: its summary replaces the messages it summarized.

        Raises ``StaleCompactionError`` when the stored transcript no longer matches what
        ``result`` was computed from.
        """
        self.replace_transcript_prefix(
            session_id,
            result.compacted_count,
            result.messages[:1],
            expected_rest=result.kept,
            summary=result.summary,
        )

    # --- inbound dedupe -----------------------------------------------------------------------

    def seen_inbound(self, channel: str, message_id: str) -> bool:
        """Record an inbound platform message id; True if it had been recorded before."""
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO inbound_seen (channel, message_id, seen_at) "
                "VALUES (?, ?, ?)",
                (channel, message_id, self._clock()),
            )
            return cursor.rowcount == 0

    def prune_inbound(self, older_than_seconds: float = DEFAULT_INBOUND_RETENTION_SECONDS) -> int:
        """Forget inbound ids first seen more than ``older_than_seconds`` ago; returns how many."""
        with self._transaction() as conn:
            cursor = conn.execute(
                "DELETE FROM inbound_seen WHERE seen_at < ?",
                (self._clock() - older_than_seconds,),
            )
            return cursor.rowcount

    # --- per-channel offsets ------------------------------------------------------------------

    def get_offset(self, channel: str, account: str) -> str | None:
        """A channel account's saved position (Telegram's update offset, say), if any."""
        row = (
            self._connection()
            .execute(
                "SELECT value FROM offsets WHERE channel = ? AND account = ?", (channel, account)
            )
            .fetchone()
        )
        return None if row is None else str(row[0])

    def set_offset(self, channel: str, account: str, value: str) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO offsets (channel, account, value, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (channel, account) DO UPDATE "
                "SET value = excluded.value, updated_at = excluded.updated_at",
                (channel, account, value, self._clock()),
            )
