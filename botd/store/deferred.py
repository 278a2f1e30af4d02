"""Writes that record what already happened, committed with the next write that cannot wait.

Some writes must be durable before botd acts: a message is accepted before the platform is
told, a reply piece is written before it is sent. Others only record what already happened: a
run started (its user turn), a message of the run ended, a piece was sent, a message was
answered. Those are queued here (``_defer``) and committed, in order, inside the next
transaction of the store (``_transaction``), or at the end of the event-loop iteration when
no transaction comes sooner (``flush_deferred``). Under load that turns several commits per
message into one, and a crash can lose at most the records of the last loop iteration, which
the inbox and outbox treat like a crash just before them (the run resumes; a piece whose send
was not recorded is the ambiguous case, sent again).

Reads that must see these records call ``flush_deferred`` first; ``close`` flushes too.
When a transaction carrying queued writes fails, they are dropped with it (and logged by the
caller's error): kept, one bad write would fail every transaction after it.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .base import StoreBase

log = logging.getLogger(__name__)

Deferred = tuple[str, Callable[[sqlite3.Connection], object]]
"""A queued write: its kind (the store method, for ``health``) and the write itself."""


class DeferredWrites(StoreBase):
    """The queue of deferred writes (see the module docstring)."""

    _deferred: list[Deferred] | None = None
    _flush_scheduled = False

    def _defer(self, kind: str, write: Callable[[sqlite3.Connection], object]) -> None:
        """Queue ``write`` (called with the connection inside a transaction) for soon."""
        if self._deferred is None:
            self._deferred = []
        self._deferred.append((kind, write))
        if not self._flush_scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush_deferred()  # no loop to wait for: now
                return
            self._flush_scheduled = True
            loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        try:
            self.flush_deferred()
        except Exception:
            log.exception("writing queued records to the store failed")

    def flush_deferred(self) -> None:
        """Commit every queued write now (one transaction)."""
        if self._deferred and self._conn is not None:
            # Named after the first queued write, so health says what could not be written.
            with self._transaction(self._deferred[0][0]):
                pass  # the queued writes ride in it

    @contextmanager
    def _transaction(self, kind: str) -> Iterator[sqlite3.Connection]:
        queued, self._deferred = self._deferred, None
        with super()._transaction(kind) as conn:
            for _kind, write in queued or ():
                write(conn)
            yield conn

    def close(self) -> None:
        try:
            self.flush_deferred()
        except Exception:
            log.exception("writing queued records to the store failed at close")
        finally:
            super().close()


__all__ = ["DeferredWrites"]
