"""What the store tests share: a disk that fills for real as SQLite sees it.

``PRAGMA max_page_count`` is lowered to the database's size on the live connection and the
space left inside its pages is used up, so the next write that needs room fails with
SQLITE_FULL ("database or disk is full"), the same error a full file system gives. Raising
the limit again is the operator freeing space.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from botd.store.sqlite import SqliteStore

NO_LIMIT = 1_073_741_823
"""SQLite's largest max_page_count: no limit but the disk's."""


def fill_the_disk(store: SqliteStore, session_id: str | None = None) -> Callable[[], None]:
    """Make new rows fail with SQLITE_FULL; returns the function that frees the space.

    Tiny rows go where the next real ones will: the inbound ledger (and the right edge of
    its seen_at index, where every new id goes) and, given ``session_id``, the end of that
    session's transcript. Each is filled until many tries in a row fail.
    """
    conn = store._connection()
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count={pages}")
    _fill(
        conn,
        "INSERT INTO inbound_seen (channel, message_id, seen_at) VALUES ('f', ?, ?)",
        lambda n: (format(n, "x"), time.time()),
    )
    if session_id is not None:
        _fill(
            conn,
            "INSERT INTO messages (session_id, role, body, created_at) VALUES (?, 'f', '', 0)",
            lambda n: (session_id,),
        )

    def free() -> None:
        conn.execute(f"PRAGMA max_page_count={NO_LIMIT}")
        conn.execute("DELETE FROM inbound_seen WHERE channel = 'f'")
        conn.execute("DELETE FROM messages WHERE role = 'f'")

    return free


def _fill(conn: sqlite3.Connection, sql: str, params: Callable[[int], tuple[object, ...]]) -> None:
    failures = n = 0
    while failures < 200:
        n += 1
        try:
            conn.execute(sql, params(n))
        except sqlite3.OperationalError as exc:
            assert "full" in str(exc)
            failures += 1
        else:
            failures = 0
