"""Group commit: many coroutines' writes in one transaction per event-loop iteration.

A commit costs far more than the small insert or update inside it (the WAL append and its
bookkeeping), and under load dozens of conversations write in the same loop iteration. So
writes are queued and committed together:

* ``_commit(kind, write)`` is for writes that must be durable before botd acts on them: a
  message is accepted before the platform is told, a reply piece is written before it is
  sent. The caller awaits it; it returns what ``write`` returned once the transaction that
  carried it has committed, or raises what failed it.
* ``_defer(kind, write)`` is for records of what already happened: a run started (its user
  turn), a message of the run ended, a piece was sent, a message was answered. Nobody waits
  for them; a crash can lose at most the records of the last loop iteration, which the
  inbox and outbox treat like a crash just before them (the run resumes; a piece whose send
  was not recorded is the ambiguous case, sent again).

Everything queued is committed, in order, at the end of the loop iteration
(``flush_deferred``) or inside the store's next direct transaction (``_transaction``),
whichever comes first. Reads that must see the queued records call ``flush_deferred``
first; ``close`` flushes too.

``_defer(kind, write, lazy=True)`` is for the records whose loss in a crash changes nothing
a user sees: a channel's offset (the platform sends the messages again and the inbound
ledger drops them), a run's start (the message stays accepted and its run starts over, as
after a crash a moment earlier) and counts. They wait for the next write that commits
anyway (a run's reply piece, usually, a few milliseconds later) and ride in it, or commit
alone after ``LAZY_WINDOW``: one transaction fewer per message or more. Being in the same
queue, they are still committed before anything queued after them. ``_commit_later`` is
the same for a write whose outcome someone reads later: a run's last transcript messages,
whose loss in a crash only means the run starts over from its last finished step, as it
would anyway (see ``append_messages_later``).

Each awaited write runs inside its own savepoint, so one that fails for its own reason (a
constraint, a bug) is undone alone and only its caller sees the error; one refused for its
content (``content_refused``: an integer past 64 bits, text ``sqlite3`` cannot encode, a
string too big) fails with ``ContentRefused``. The queued records run in one savepoint: when
one fails for its own reason, they are written again each in a savepoint of its own, so only
that record is dropped (logged) and the others commit. A storage fault (disk full, I/O error)
fails the whole transaction: every waiting caller gets the ``StoreWriteError`` and the queued
records are dropped with it (kept, one bad record would fail every transaction after it).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import ContentRefused, StoreWriteError
from .base import StoreBase, storage_fault

log = logging.getLogger(__name__)

T = TypeVar("T")

LAZY_WINDOW = 0.5
"""Seconds a lazy record waits for another write to ride with before it commits alone."""

Write = Callable[[sqlite3.Connection], Any]
Deferred = tuple[str, Write]
"""A queued record: its kind (the store method, for ``health``) and the write itself."""
Waiting = tuple[str, Write, "asyncio.Future[Any]"]
"""A queued write someone awaits: its kind, the write and the future of its result."""


class DeferredWrites(StoreBase):
    """The queues of group-committed writes (see the module docstring)."""

    _deferred: list[Deferred] | None = None
    _waiting: list[Waiting] | None = None
    _flush_scheduled = False
    _lazy_flush: asyncio.TimerHandle | None = None

    def _defer(self, kind: str, write: Write, *, lazy: bool = False) -> None:
        """Queue the record ``write`` (called with the connection inside a transaction);
        ``lazy``: it may wait for the next commit (see the module docstring)."""
        if self._deferred is None:
            self._deferred = []
        self._deferred.append((kind, write))
        self._schedule_flush(lazy=lazy)

    def _scheduled_lazy_flush(self) -> None:
        self._lazy_flush = None
        self._flush_logging_errors()

    async def _commit(self, kind: str, write: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``write`` in the next group transaction; its result once that committed."""
        return await self._commit_later(kind, write, lazy=False)

    def _commit_later(
        self, kind: str, write: Callable[[sqlite3.Connection], T], *, lazy: bool = True
    ) -> asyncio.Future[T]:
        """Queue ``write`` as ``_commit`` does, without waiting; ``lazy``: it may wait for the
        next commit as a lazy record does. The future gets what ``write`` returned (or what
        failed it) once the transaction that carried it committed."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if self._waiting is None:
            self._waiting = []
        self._waiting.append((kind, write, future))
        self._schedule_flush(lazy=lazy)
        return future

    def commit_soon(self) -> None:
        """Commit what is queued at the end of this loop iteration, lazy records included."""
        if self._waiting or self._deferred:
            self._schedule_flush()

    def _schedule_flush(self, *, lazy: bool = False) -> None:
        """A flush at the end of this loop iteration, or (``lazy``) within ``LAZY_WINDOW``,
        unless one already comes as soon."""
        if self._flush_scheduled or (lazy and self._lazy_flush is not None):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush_deferred()  # no loop to wait for: now
            return
        if lazy:
            self._lazy_flush = loop.call_later(LAZY_WINDOW, self._scheduled_lazy_flush)
        else:
            self._flush_scheduled = True
            loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self._flush_logging_errors()

    def _flush_logging_errors(self) -> None:
        try:
            self.flush_deferred()
        except StoreWriteError as exc:
            log.error("writing queued records to the store failed: %s", exc)
        except Exception:
            log.exception("writing queued records to the store failed")

    def flush_deferred(self) -> None:
        """Commit everything queued now (one transaction)."""
        if self._conn is None:
            return
        first = self._waiting or self._deferred
        if first:
            # Named after the first queued write, so health says what could not be written.
            with self._transaction(first[0][0]):
                pass  # the queued writes ride in it

    @contextmanager
    def _transaction(self, kind: str) -> Iterator[sqlite3.Connection]:
        records, self._deferred = self._deferred or (), None
        waiting, self._waiting = self._waiting or (), None
        if self._lazy_flush is not None:  # the lazy records queued ride in this one
            self._lazy_flush.cancel()
            self._lazy_flush = None
        outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        try:
            with super()._transaction(kind) as conn:
                if records:
                    self._write_records(conn, records)
                for awaited_kind, write, future in waiting:
                    if not future.cancelled():  # its caller gave up before it was written
                        outcomes.append(self._in_savepoint(conn, awaited_kind, write, future))
                yield conn
        except BaseException as exc:
            for _kind, _write, future in waiting:
                if not future.done():
                    future.set_exception(exc)
            raise
        for kind_done in {k for k, _ in records} | {k for k, _w, _f in waiting}:
            self.health.succeeded(kind_done)
        for future, value, error in outcomes:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

    def _write_records(self, conn: sqlite3.Connection, records: Sequence[Deferred]) -> None:
        """Write the queued ``records`` in one savepoint; when one fails for its own reason
        (its content, a bug), they are written again each in a savepoint of its own, and
        only the one that fails is dropped (logged)."""
        conn.execute("SAVEPOINT records")
        try:
            for _kind, write in records:
                write(conn)
        except Exception as exc:
            if isinstance(exc, sqlite3.Error) and storage_fault(exc):
                raise  # the transaction as a whole failed
            _undo(conn, "records")
            log.warning("store: queued records failed (%s); writing each apart", exc)
            for kind, write in records:
                self._record_apart(conn, kind, write)
            return
        conn.execute("RELEASE records")

    def _record_apart(self, conn: sqlite3.Connection, kind: str, write: Write) -> None:
        """Write one record in a savepoint of its own: one that fails for its own reason is
        undone and dropped (logged)."""
        conn.execute("SAVEPOINT record")
        try:
            write(conn)
        except Exception as exc:
            if isinstance(exc, sqlite3.Error) and storage_fault(exc):
                raise
            _undo(conn, "record")
            why = "refused for its content" if content_refused(exc) else "it failed"
            log.error("store: a %s record is dropped (%s): %s", kind, why, exc)
            return
        conn.execute("RELEASE record")

    def _in_savepoint(
        self, conn: sqlite3.Connection, kind: str, write: Write, future: asyncio.Future[Any]
    ) -> tuple[asyncio.Future[Any], Any, BaseException | None]:
        """Run one awaited write so that a failure of its own undoes only it; a write refused
        for its content fails with ``ContentRefused``."""
        conn.execute("SAVEPOINT awaited")
        try:
            value = write(conn)
        except Exception as exc:
            if isinstance(exc, sqlite3.Error) and storage_fault(exc):
                raise  # the transaction as a whole failed
            _undo(conn, "awaited")
            if content_refused(exc):
                return future, None, ContentRefused(self.path, kind, str(exc))
            return future, None, exc
        conn.execute("RELEASE awaited")
        return future, value, None

    def close(self) -> None:
        try:
            self.flush_deferred()
        except Exception:
            log.exception("writing queued records to the store failed at close")
        finally:
            super().close()


def content_refused(exc: BaseException) -> bool:
    """A write refused for a value it carries: SQLite's ``DataError`` (a string or blob too
    big), or a value ``sqlite3`` could not bind (an integer past 64 bits, text it cannot
    encode)."""
    return isinstance(exc, sqlite3.DataError | OverflowError | ValueError)


def _undo(conn: sqlite3.Connection, savepoint: str) -> None:
    conn.execute(f"ROLLBACK TO {savepoint}")
    conn.execute(f"RELEASE {savepoint}")


__all__ = ["DeferredWrites"]
