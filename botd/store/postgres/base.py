"""The pool, the group commit and the health of the PostgreSQL store.

Every write goes through one queue, drained by one background task of the store's own (the
flusher, started by ``open`` and awaited by ``aclose``), one transaction per batch:

* ``_defer`` queues a record nobody waits for (``..._soon``: a piece was sent, an entry
  answered, a channel's offset); consecutive records are sent together, without a round
  trip each.
* ``_commit`` queues a write the caller awaits (a message accepted, a piece written); it
  returns what the write returned once its transaction committed. One that fails for its
  own reason (a constraint, a bug) is undone alone and only its caller hears of it. A write
  that is one statement whose rows give its result (``Statement``: an accept, a piece
  journalled) rides in its batch's query like a record.

A batch is first written in as few round trips as it allows (``batch.in_few_round_trips``:
the transaction's start, its checks, its records, its ``Statement`` writes and the commit in
one query, one round trip; an awaited write of another kind sends what is kept before it with
its first statement and makes its others as they are), on the way that nothing goes wrong; if
anything does (a lock held elsewhere, a lost fence, a write that failed for its own reason)
that transaction is rolled back and the batch written with care (``_with_care``: each awaited
write in a savepoint, records in pipeline mode), which sorts out what fails from what does
not, as below.

Every connection adapts strings with ``text.ADAPTERS``: a NUL, which PostgreSQL refuses in
any text value, is written as U+FFFD in every column.

A write may name advisory locks it needs (``locks``: an accept its conversation's); the
batch tries them all before it writes anything, without waiting for any (``locked``), so two
nodes' batches never deadlock on them and a lock another node holds (one frozen mid-batch,
until the server ends its transaction: ``session``) holds up only the writes that need it:
those are set aside, in order, and tried again at the head of every later batch (at least
every ``LOCK_RETRY``); a write that waits past ``lock_timeout`` for a row another transaction
holds is set aside the same way. Every session carries the bounds of ``session``, derived from
the lease TTL the store is opened with, and what a connection is asked must be answered within
the statement bound. The lease table has connections of its own (``lease_table``).

A batch is written in the order queued, so an awaited
write comes after whatever was queued before it, and a read that must see the queued records
(``_read``) waits for the batch that carries them first: the same order the SQLite store
keeps. A lazy record (``lazy=True``: an offset, a run's start, counts) waits up to
``LAZY_WINDOW`` for something else to ride with; anything awaited, or ``commit_soon``, sends
the batch at once.

What fails a write, by kind:

* Its content (``content_refused``): the server refused a value it carries (SQLSTATE class
  22: a number out of range, a string too long, text it cannot encode; a value past a limit,
  such as an index row too large) or the driver could not convert one. An awaited write so
  refused is undone alone and its caller gets ``ContentRefused`` (written again, it would be
  refused again; the store stays healthy). A record (nobody awaits it) fails the batch in
  pipeline mode; the batch is then written again with each of its writes apart, each record
  in a savepoint of its own, so only the record that fails is dropped (logged) and the rest
  commit: a poison record never sinks its neighbours.
* Its own reason otherwise (a constraint, a bug in a statement): the same, the error itself
  reaching the caller.
* A fault: the server cannot be reached, the connection was cut, the database is full or read
  only. Such a failure fails the whole batch: every waiting caller gets ``StoreWriteError`` with
  the server's (or libpq's) words, and ``health`` is degraded for that kind of write until one
  commits again; the pool reconnects by itself once the server answers, so the store recovers
  without a restart. The records of the failed batch (nobody waits for them: a piece sent, an
  entry answered, a transcript's turn) are kept, in their order, ahead of whatever is queued
  after them, and written again every ``RETRY_WAIT`` until the database takes them: dropped, a
  run finished while the database was away would be resumed and posted again at the next start.
  (At the store's close they get one last try.) While the database is away (the last batch
  failed for a fault), a batch or a read waits only ``AWAY_WAIT`` for a connection, so a run
  that goes on without the database (delivery sends a piece whose journal write failed) is not
  held up ``CONNECTION_WAIT`` per write.

A deadlock or serialization failure with another node's transaction rolls the batch back and
writes it again (``RETRIES`` times). The DSN's password is never in any of these words:
the database is named by ``describe`` and the password is masked in every message.

The module is some 800 lines, a fifth of them this docstring, because the queue, the
flusher, the set-aside writes and the health are one piece of state that every path above
reads and changes; the batch's own transaction lives in ``batch.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Self, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...cluster.fencing import Fence
from ..errors import (
    Clock,
    ContentRefused,
    StoreError,
    StoreHealth,
    StoreOpenError,
    StoreWriteError,
)
from .batch import (
    Conn,
    Queued,
    Write,
    Written,
    fenced,
    in_few_round_trips,
    lease_lost,
    locked,
)
from .budget import PostgresRate
from .leases import PostgresLeases
from .pairing import PostgresPairing
from .schema import NewerSchema, migrate, schema_version
from .session import DEFAULT_LEASE_TTL, SessionBounds, answer_within, answered
from .text import ADAPTERS

log = logging.getLogger(__name__)

T = TypeVar("T")

Pool = AsyncConnectionPool[Conn]

LAZY_WINDOW = 0.5
"""Seconds a lazy record waits for another write to ride with before it commits alone."""
CONNECTION_WAIT = 5.0
"""Seconds a batch or a read waits for a connection before it counts as a failure."""
CONNECT_TIMEOUT = 5
"""libpq's ``connect_timeout``: seconds one connection attempt may take (a whole number)."""
RECONNECT_TIMEOUT = 5.0
"""Seconds the pool keeps retrying a connection before it waits for the next request."""
UNFENCED = frozenset({"outbox_sent", "decide_approval", "buttons_posted"})
"""Writes made even when their fence was lost: a piece's sent mark and the buttons under a
posted message are facts about the platform, and a decision on a request to approve a tool
call a fact about a press, whoever holds the conversation now."""
CHECK_IDLE = 1.0
"""Seconds a connection may have been back in the pool and still be handed out unchecked
(``_check``)."""
POOL_SIZE = 8
LEASE_POOL_SIZE = 4
"""Connections for claiming, giving up and listing leases (a claim may wait up to the
session's ``lock_timeout`` for another node's transaction): apart from the store's pool, so
such waits never take the connections writes and reads need."""
RETRIES = 3
"""Attempts of a batch that lost a deadlock or a serialization conflict to another node."""
RETRY_WAIT = 1.0
"""Seconds between attempts at the records kept from a batch that failed for a fault."""
AWAY_WAIT = 0.5
"""Seconds a batch or a read waits for a connection while the database is away."""
LOCK_RETRY = 0.1
"""Seconds between attempts at writes set aside because another transaction held a lock
they need (at most: they ride along with every batch written meanwhile)."""
PLACES_KEPT = 1024
"""Entries accepted here whose ``seq`` the store keeps for the dispatcher's next pull."""
KEPT_AT_MOST = 100_000
"""Records kept for a database that stays away; past it the oldest are dropped (logged)."""


_RETURNED: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
"""When each pooled connection was last given back (monotonic seconds)."""


class RecentFirstPool(AsyncConnectionPool[Conn]):
    """A pool that hands out the connection given back last (psycopg_pool's hands out the
    one given back longest ago). A connection used again soon after it came back is handed
    out without a check (``_check``), so after a busy spell, with more connections open than
    the work needs, each use would otherwise pay the check's round trip; the ones left idle
    at the other end are those the pool closes once they were unused for ``max_idle``. It
    notes when each connection came back (``_check`` reads it)."""

    async def putconn(self, conn: Conn) -> None:
        # When, for ``_check``. Stamped here, not by a ``reset`` function: with one, the pool
        # hands every connection given back to a worker task of its own first.
        _RETURNED[conn] = time.monotonic()
        await super().putconn(conn)

    async def _get_ready_connection(self, timeout: float | None) -> Conn | None:
        if self._pool and (timeout is None or timeout > 0):
            # The base class takes the leftmost (unless it times out at once); connections
            # come back on the right.
            self._pool.rotate(1)
        return await super()._get_ready_connection(timeout)


def _pool(dsn: str, bounds: SessionBounds, name: str, *, min_size: int, max_size: int) -> Pool:
    """A pool (not open yet) whose sessions carry ``bounds``, checked before each use."""
    return RecentFirstPool(
        dsn,
        open=False,
        min_size=min_size,
        max_size=max_size,
        timeout=CONNECTION_WAIT,
        reconnect_timeout=RECONNECT_TIMEOUT,
        kwargs={
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT,
            "context": ADAPTERS,
            **bounds.connect_kwargs(dsn),
        },
        check=partial(_check, within=bounds.statement),
        name=name,
    )


async def _check(conn: Conn, *, within: float) -> None:
    """The pool's check of a connection before it is handed out, answered within ``within``
    seconds (a server gone silent fails it, and the pool tries another connection).

    A connection given back less than ``CHECK_IDLE`` ago with nothing to read is handed out
    as it is: a server that ended it (a restart, a terminated backend) has said so on its
    socket, and the round trip of a check would cost as much as the work itself; a server
    gone silent since is met by the work's own ``answer_within``."""
    given_back = _RETURNED.get(conn)
    recent = given_back is not None and time.monotonic() - given_back < CHECK_IDLE
    if recent and not answered(conn):
        return
    async with answer_within(conn, within):
        await AsyncConnectionPool.check_connection(conn)


def describe(dsn: str) -> str:
    """The database ``dsn`` names, without its password: ``postgresql://user@host:port/db``."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "postgresql (store.dsn, which libpq cannot read)"
    user = parts.get("user")
    host = str(parts.get("host") or "localhost")
    port = str(parts.get("port") or "5432")
    database = parts.get("dbname") or user or ""
    who = f"{user}@" if user else ""
    return f"postgresql://{who}{host}:{port}/{database}"


def password_of(dsn: str) -> str | None:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return None
    return str(password) if password else None


def storage_fault(exc: BaseException) -> bool:
    """A failure of the database or the way to it (unreachable, cut, full, read only), not
    a constraint violation, a bug in a statement or a value refused (``content_refused``:
    psycopg counts a value past a limit as an ``OperationalError``)."""
    return not content_refused(exc) and isinstance(
        exc,
        psycopg.OperationalError
        | psycopg.InterfaceError
        | psycopg.errors.ReadOnlySqlTransaction
        | psycopg.errors.IdleInTransactionSessionTimeout,
    )


def content_refused(exc: BaseException) -> bool:
    """A write refused for a value it carries: the server's data exceptions (SQLSTATE class
    22: a number out of range, a string too long, text it cannot encode), a value past one
    of its limits (an index row too large), or a value the driver could not convert."""
    return isinstance(
        exc,
        psycopg.DataError | psycopg.errors.ProgramLimitExceeded | ValueError | OverflowError,
    )


@dataclass(eq=False, slots=True)
class _Writes:
    """The write queue and its flusher's state: one per store, shared by its fenced views."""

    queued: asyncio.Event
    urgent: asyncio.Event
    closed: asyncio.Event
    stopping: asyncio.Event
    queue: list[Queued] = field(default_factory=list)
    aside: list[Queued] = field(default_factory=list)
    """Awaited writes set aside because another transaction held a lock they need, in the
    order queued: at the head of every batch until they are written."""
    queued_done: asyncio.Future[None] | None = None
    """Set once the batch being queued now is written."""
    writing_done: asyncio.Future[None] | None = None
    """Set once the batch being written now is written."""
    closing: bool = False
    flusher: asyncio.Task[None] | None = None
    away: bool = False
    """The last batch failed for a fault: connections are waited for ``AWAY_WAIT`` only."""
    kept: bool = False
    """Records of a failed batch wait in the queue to be written again."""


class PostgresBase:
    """The pool, the queue and its flusher (see the module docstring).

    ``fenced(fence)`` is the same store for the work of a conversation held by lease: every
    write made through it (but ``UNFENCED``'s) is made only while that lease holds. A view
    shares everything with its store (the pool, the queue, the health); only the fence is
    its own.
    """

    _fence: Fence | None = None
    """The lease the writes made through this view are fenced by (None: unfenced)."""

    def __init__(
        self,
        pool: Pool,
        dsn: str,
        *,
        clock: Clock = time.time,
        bounds: SessionBounds | None = None,
        lease_pools: tuple[Pool, Pool] | None = None,
    ) -> None:
        self.where = describe(dsn)
        """The database, named without its password."""
        self._dsn = dsn
        self._password = password_of(dsn)
        self._pool = pool
        self.bounds = bounds or SessionBounds(DEFAULT_LEASE_TTL)
        """How long a session of this store may keep others waiting (``session``)."""
        self._lease_pools = lease_pools
        """(claims, renewals): the lease table's own connections (``lease_table``)."""
        self._clock = clock
        self.health = StoreHealth(clock)
        self._loop = asyncio.get_running_loop()
        self._w = _Writes(asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event())
        self._places: dict[int, int] = {}
        """inbox id -> seq of the entries this store accepted lately, not asked for yet
        (``next_place``; at most ``PLACES_KEPT``, the oldest forgotten first)."""
        """The queue and the flusher's state, shared by every fenced view of the store."""

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        clock: Clock = time.time,
        pool_size: int = POOL_SIZE,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        migrating: bool = True,
    ) -> Self:
        """The store on the database ``dsn`` names, migrated to the current schema, its
        flusher running; every session bounded from ``lease_ttl`` (``session``).
        ``StoreOpenError`` (one line, no password) when it cannot be used. Not ``migrating``
        (an operator's command beside the nodes), the schema is left as it is, and a database
        without one is refused."""
        where = describe(dsn)
        bounds = SessionBounds(lease_ttl)
        try:
            # One connection of its own first, so a refusal comes in libpq's words.
            async with await AsyncConnection.connect(
                dsn,
                connect_timeout=CONNECT_TIMEOUT,
                context=ADAPTERS,
                **bounds.connect_kwargs(dsn, migrating=True),
            ) as conn:
                if migrating:
                    await migrate(conn, where)
                elif await schema_version(conn) == 0:
                    raise StoreOpenError(
                        f"{where}: no botd has started on it yet (it has no schema): start a "
                        "node on it first"
                    )
        except NewerSchema as exc:
            raise StoreOpenError(str(exc)) from None
        except psycopg.Error as exc:
            raise StoreOpenError(
                f"{where}: cannot be opened ({words(exc, password_of(dsn))}): check store.dsn "
                "and that the server runs and takes connections from this host"
            ) from None
        pool = _pool(dsn, bounds, "botd-store", min_size=1, max_size=pool_size)
        # The leases' own connections: renewals on one that nothing else uses, so they never
        # queue behind writes, reads or a claim that waits on another node's lock.
        claims = _pool(dsn, bounds, "botd-lease-claims", min_size=1, max_size=LEASE_POOL_SIZE)
        renewals = _pool(dsn, bounds, "botd-lease-renewals", min_size=1, max_size=1)
        for each in (pool, claims, renewals):
            await each.open()
        store = cls(pool, dsn, clock=clock, bounds=bounds, lease_pools=(claims, renewals))
        store._w.flusher = asyncio.create_task(store._flush_loop(), name="botd-store-flusher")
        return store

    @classmethod
    async def open_reader(cls, dsn: str, *, clock: Clock = time.time) -> Self:
        """The store on ``dsn`` for reading only (``botd status``): not migrated, no flusher,
        a pool of one connection. ``StoreOpenError`` (one line, no password) when the
        database cannot be reached."""
        where = describe(dsn)
        try:
            async with await AsyncConnection.connect(
                dsn, connect_timeout=CONNECT_TIMEOUT, context=ADAPTERS
            ):
                pass
        except psycopg.Error as exc:
            raise StoreOpenError(
                f"{where}: cannot be reached ({words(exc, password_of(dsn))}): check store.dsn "
                "and that the server runs and takes connections from this host"
            ) from None
        pool = _pool(dsn, SessionBounds(DEFAULT_LEASE_TTL), "botd-status", min_size=1, max_size=1)
        await pool.open()
        store = cls(pool, dsn, clock=clock)
        return store

    async def aclose(self) -> None:
        """Write what is queued, stop the flusher and close the pool (idempotent)."""
        if self._w.closing:
            await self._w.closed.wait()
            return
        self._w.closing = True
        self._w.stopping.set()
        self._w.queued.set()
        self._w.urgent.set()
        try:
            if self._w.flusher is not None:
                with contextlib.suppress(Exception):
                    await self._w.flusher
        finally:
            for pool in (self._pool, *(self._lease_pools or ())):
                await pool.close()
            self._w.closed.set()

    async def schema_version(self) -> int:
        return await self._read(schema_version, after_queued=False)

    async def probe(self, wait: float) -> int:
        """The schema version, on a connection of the pool, within about ``wait`` seconds
        (a server that went away, or stopped answering, must not hold up ``/healthz``);
        ``StoreError`` in the database's (or libpq's) words when it cannot be read."""
        if self._w.closing:
            raise StoreError(f"{self.where}: the store is closed")
        try:
            async with asyncio.timeout(2 * wait):  # the reason's own attempt included
                try:
                    async with self._pool.connection(timeout=wait) as conn:
                        return await schema_version(conn)
                except psycopg.Error as exc:
                    if not storage_fault(exc):
                        raise
                    reason = await self._reason(exc)
        except TimeoutError:
            raise StoreError(f"{self.where}: no answer within {2 * wait:g} s") from None
        raise StoreError(f"{self.where}: {reason}")

    def fenced(self, fence: Fence | None) -> Self:
        """This store for the work of a conversation held by ``fence`` (None: this store)."""
        if fence is None:
            return self
        view = copy.copy(self)
        view._fence = fence
        return view

    def pairing(self) -> PostgresPairing:
        """DM pairing in this database, on the store's pool."""
        return PostgresPairing(self._pool, clock=self._clock)

    def shared_rate(self) -> PostgresRate:
        """The nodes' shared platform rates (``botd.cluster.budget``)."""
        return PostgresRate(self._pool)

    def lease_table(self) -> PostgresLeases:
        """The lease table every node sharing this database claims from, on the lease
        table's own connections (on the store's pool for a store opened to read)."""
        claims, renewals = self._lease_pools or (self._pool, self._pool)
        return PostgresLeases(claims, renewals=renewals, bounds=self.bounds)

    # --- the queue --------------------------------------------------------------------------

    def _enqueue(
        self,
        kind: str,
        write: Write,
        future: asyncio.Future[Any] | None,
        lazy: bool,
        locks: tuple[str, ...] = (),
    ) -> None:
        fence = None if kind in UNFENCED else self._fence
        if fence is not None and fence.lost:
            # Known lost already: not even queued.
            if future is not None:
                future.set_exception(lease_lost(fence))
            else:
                # Expected once the lease is lost: the dispatcher tells the loss, once.
                log.debug(
                    "store: a %s record of %s is dropped: the lease is lost", kind, fence.name
                )
            return
        self._w.queue.append(Queued(kind, write, future, locks, fence))
        if self._w.queued_done is None:
            self._w.queued_done = self._loop.create_future()
        self._w.queued.set()
        if not lazy:
            self._w.urgent.set()

    def _defer(self, kind: str, write: Write, *, lazy: bool = False) -> None:
        """Queue the record ``write`` (see the module docstring)."""
        if self._w.closing:
            log.debug("store closed: a %s record is dropped", kind)
            return
        self._enqueue(kind, write, None, lazy)

    async def _commit(
        self, kind: str, write: Callable[[Conn], Awaitable[T]], *, locks: tuple[str, ...] = ()
    ) -> T:
        """Run ``write`` in the next batch's transaction; its result once that committed.
        ``locks``: advisory locks (by name) the batch takes before it writes anything."""
        return await self._commit_later(kind, write, lazy=False, locks=locks)

    def _commit_later(
        self,
        kind: str,
        write: Callable[[Conn], Awaitable[T]],
        *,
        lazy: bool = True,
        locks: tuple[str, ...] = (),
    ) -> asyncio.Future[T]:
        """``_commit`` without waiting (``lazy``: it may wait for the next batch as a lazy
        record does); the future gets the result or what failed it."""
        if self._w.closing:
            raise StoreError(f"{self.where}: the store is closed")
        future: asyncio.Future[T] = self._loop.create_future()
        self._enqueue(kind, write, future, lazy, locks)
        return future

    def _remember_place(self, inbox_id: int, seq: int) -> None:
        """An entry accepted here (committed): its ``seq``, for ``next_place``."""
        self._places[inbox_id] = seq
        if len(self._places) > PLACES_KEPT:
            del self._places[next(iter(self._places))]

    def commit_soon(self) -> None:
        """Write what is queued now, lazy records included; nobody waits for it."""
        if self._w.queue:
            self._w.urgent.set()

    async def _flushed(self) -> None:
        """Return once what was queued before now is written (or failed)."""
        if self._w.queue:
            self._w.urgent.set()
            waiter = self._w.queued_done
        else:
            waiter = self._w.writing_done
        if waiter is not None:
            await asyncio.shield(waiter)

    async def _read(self, read: Callable[[Conn], Awaitable[T]], *, after_queued: bool = True) -> T:
        """``read`` on a connection of the pool (after what is queued, unless told not to);
        a fault is ``StoreError`` in the database's words."""
        if self._w.closing:
            raise StoreError(f"{self.where}: the store is closed")
        if after_queued:
            await self._flushed()
        try:
            async with self._connection() as conn:
                return await read(conn)
        except psycopg.Error as exc:
            if not storage_fault(exc):
                raise
            raise StoreError(f"{self.where}: {await self._reason(exc)}") from None

    # --- the flusher ------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            if self._w.aside and not self._w.queue:
                # Writes set aside for a lock held elsewhere: tried again after a while,
                # or with the next batch, whichever comes first.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._w.queued.wait(), LOCK_RETRY)
            else:
                await self._w.queued.wait()
            if not self._w.urgent.is_set() and self._w.queue:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._w.urgent.wait(), LAZY_WINDOW)
            await asyncio.sleep(0)  # what this loop iteration queues rides along
            # The writes set aside go first: they were queued before anything queued now
            # that needs the same lock, and stay before it.
            batch, self._w.aside, self._w.queue = [*self._w.aside, *self._w.queue], [], []
            done, self._w.queued_done = self._w.queued_done, None
            self._w.queued.clear()
            self._w.urgent.clear()
            self._w.writing_done = done
            try:
                await self._write(batch)
            except Exception:  # a bug here must not stop every later write
                log.exception("writing a batch to the store failed")
            finally:
                self._w.writing_done = None
                if done is not None and not done.done():
                    done.set_result(None)
            if self._w.kept and not self._w.closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._w.stopping.wait(), RETRY_WAIT)
            if self._w.closing and not self._w.queue:
                self._give_up_aside()
                return

    def _give_up_aside(self) -> None:
        """At close: the writes still waiting for a lock fail (their callers hear why)."""
        aside, self._w.aside = self._w.aside, []
        for queued in aside:
            if queued.future is not None and not queued.future.done():
                queued.future.set_exception(
                    StoreError(f"{self.where}: the store closed while another node held the lock")
                )

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        """A connection of the pool, waited for ``AWAY_WAIT`` only while the database is away;
        what the block does on it must be answered within the statement bound (a server
        gone silent: the connection is cut and the block fails as a fault)."""
        async with (
            self._pool.connection(timeout=AWAY_WAIT if self._w.away else None) as conn,
            answer_within(conn, self.bounds.statement),
        ):
            yield conn

    def _keep(self, records: list[Queued]) -> None:
        """Put ``records`` back at the head of the queue, to be written again."""
        self._w.queue[:0] = records
        dropped = len(self._w.queue) - KEPT_AT_MOST
        if dropped > 0:
            kinds = ", ".join(sorted({q.kind for q in self._w.queue[:dropped]}))
            del self._w.queue[:dropped]
            log.error("store: %d record(s) (%s) dropped: the database is away", dropped, kinds)
        if self._w.queued_done is None:
            self._w.queued_done = self._loop.create_future()
        self._w.kept = True
        self._w.queued.set()
        self._w.urgent.set()

    async def _write(self, batch: list[Queued]) -> None:
        batch = [q for q in batch if q.future is None or not q.future.cancelled()]
        if not batch:
            return
        written: Written = Written()
        try:
            attempt, apart = 1, False
            while True:
                try:
                    written = await self._transaction(batch, apart=apart)
                    break
                except (
                    psycopg.errors.TransactionRollback,
                    psycopg.errors.LockNotAvailable,
                ) as exc:
                    # A deadlock, a serialization conflict, or a lock another transaction
                    # held past ``lock_timeout`` (a frozen node's, until the server ends it).
                    if attempt == RETRIES:
                        raise
                    attempt += 1
                    log.info("store: writing again after %s", words(exc, self._password))
                except Exception as exc:
                    if apart or storage_fault(exc):
                        raise
                    # A record of the batch failed for its own reason (its content, a bug):
                    # the batch is written again with each write apart, so only it fails.
                    apart = True
                    log.warning(
                        "store: a batch failed (%s); writing each of its writes apart",
                        words(exc, self._password),
                    )
        except BaseException as exc:
            error = await self._failure(batch[0].kind, exc)
            for queued in batch:
                if queued.future is not None and not queued.future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        queued.future.cancel()
                    else:
                        queued.future.set_exception(error)
            records = [q for q in batch if q.future is None]
            kinds = ", ".join(sorted({q.kind for q in records}))
            if records and isinstance(error, StoreWriteError) and not self._w.closing:
                self._keep(records)
                log.warning(
                    "store: %d record(s) (%s) kept to be written again: %s",
                    len(records),
                    kinds,
                    error,
                )
            elif records:
                log.error(
                    "store: %d queued record(s) (%s) not written: %s", len(records), kinds, error
                )
            if not isinstance(exc, Exception):
                raise
            return
        self._w.away = self._w.kept = False
        for queued in written.aside:
            queued.waited = True
        self._w.aside[:0] = written.aside
        for kind in {q.kind for q in batch if q not in written.aside}:
            self.health.succeeded(kind)
        for future, value, failure in written.outcomes:
            if future.done():
                continue
            if failure is not None:
                future.set_exception(failure)
            else:
                future.set_result(value)

    async def _transaction(self, batch: list[Queued], *, apart: bool = False) -> Written:
        """One transaction for ``batch``, in its order: first in as few round trips as it
        allows (``in_few_round_trips``); if that could not write it all, rolled back and
        written with care: records in pipeline mode (``apart``: each in a savepoint of its
        own, one that fails dropped with an error logged), awaited writes each in a
        savepoint; writes of a lost fence left out (``fenced``); awaited writes whose lock
        another transaction holds set aside (``locked``). The outcome of each awaited write
        made or refused, and the writes set aside."""
        async with self._connection() as conn:
            if not apart and not any(queued.waited for queued in batch):
                try:
                    return await in_few_round_trips(conn, batch)
                except Exception as exc:
                    careful = isinstance(
                        exc, psycopg.errors.LockNotAvailable | psycopg.errors.TransactionRollback
                    )
                    if not careful and (conn.broken or storage_fault(exc)):
                        raise
                    log.debug(
                        "store: a batch is written again with care after %s", type(exc).__name__
                    )
                    await conn.execute("ROLLBACK")
            return await self._with_care(conn, batch, apart=apart)

    async def _with_care(self, conn: Conn, batch: list[Queued], *, apart: bool) -> Written:
        """``_transaction``'s careful way: each lock, fence and awaited write looked at on
        its own (see there)."""
        async with conn.transaction():
            batch, aside = await locked(conn, batch)
            batch, outcomes = await fenced(conn, batch)
            index = 0
            while index < len(batch):
                records = []
                while index < len(batch) and batch[index].future is None:
                    records.append(batch[index])
                    index += 1
                if records and apart:
                    for record in records:
                        await self._record_apart(conn, record)
                elif records:
                    async with conn.pipeline():
                        for record in records:
                            await record.write(conn)
                if index < len(batch):
                    outcome = await self._in_savepoint(conn, batch[index])
                    if outcome is None:
                        aside.append(batch[index])
                    else:
                        outcomes.append(outcome)
                    index += 1
        return Written(outcomes, aside)

    async def _in_savepoint(
        self, conn: Conn, queued: Queued
    ) -> tuple[asyncio.Future[Any], Any, BaseException | None] | None:
        """Run one awaited write so that a failure of its own undoes only it; a write refused
        for its content fails with ``ContentRefused``. None: it waited for a row another
        transaction holds past ``lock_timeout``; undone, to be written again later."""
        assert queued.future is not None
        try:
            async with conn.transaction():
                value = await queued.write(conn)
        except psycopg.errors.LockNotAvailable:
            return None
        except Exception as exc:
            if storage_fault(exc):
                raise  # the transaction as a whole failed (or lost a deadlock: written again)
            return queued.future, None, self._refusal(queued.kind, exc)
        return queued.future, value, None

    async def _record_apart(self, conn: Conn, record: Queued) -> None:
        """Write one record in a savepoint of its own: one that fails for its own reason is
        undone and dropped (logged), the batch goes on."""
        try:
            async with conn.transaction():
                await record.write(conn)
        except Exception as exc:
            if storage_fault(exc) or isinstance(exc, psycopg.errors.TransactionRollback):
                raise  # the batch as a whole failed (or lost a deadlock: written again)
            why = "refused for its content" if content_refused(exc) else "it failed"
            log.error(
                "store: a %s record is dropped (%s): %s",
                record.kind,
                why,
                words(exc, self._password),
            )

    def _refusal(self, kind: str, exc: Exception) -> Exception:
        """What the caller of a write that failed for its own reason gets: ``ContentRefused``
        when the database refused a value it carries, else the error itself (a constraint,
        a bug)."""
        if content_refused(exc):
            return ContentRefused(self.where, kind, words(exc, self._password))
        return exc

    async def _failure(self, kind: str, exc: BaseException) -> BaseException:
        """What the callers of a failed batch get: ``StoreWriteError`` for a fault (and the
        store degraded), else the error itself."""
        if not storage_fault(exc):
            return exc
        self._w.away = True
        reason = await self._reason(exc)
        self.health.failed(kind, reason)
        return StoreWriteError(self.where, reason)

    async def _reason(self, exc: BaseException) -> str:
        """A fault in the database's (or libpq's) words, without the password. The pool's
        timeout says only that no connection came: one attempt of its own tells why."""
        if isinstance(exc, PoolTimeout):
            try:
                conn = await AsyncConnection.connect(
                    self._dsn, connect_timeout=CONNECT_TIMEOUT, context=ADAPTERS
                )
            except psycopg.Error as cause:
                return words(cause, self._password)
            await conn.close()
            return f"no connection came within {CONNECTION_WAIT:g} s"
        return words(exc, self._password)


def words(exc: BaseException, password: str | None) -> str:
    """``exc``'s message on one line, the password masked wherever it appears."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if password:
        text = text.replace(password, "***")
    return text


__all__ = [
    "CONNECTION_WAIT",
    "LAZY_WINDOW",
    "PLACES_KEPT",
    "RETRY_WAIT",
    "Conn",
    "PostgresBase",
    "describe",
    "password_of",
    "storage_fault",
    "words",
]
