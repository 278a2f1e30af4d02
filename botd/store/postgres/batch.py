"""One batch of the PostgreSQL store's queue in one transaction (``base`` queues the writes
and decides what to do when a batch fails).

A write is given a connection to run its statements on. A record (nobody awaits it) only
executes statements; an awaited write may read what they return, and if its whole work is
one statement whose rows give its result it is a ``Statement``, which the batch can send
without waiting for its answer.

``in_few_round_trips`` is the way a batch is first tried: ``BEGIN``, its advisory locks
(``ALL_LOCKED``), its fences (``ONE_HELD``, ``ALL_HELD``), the records, the ``Statement``
writes and ``COMMIT`` go to the server rendered here
(``Rendered``) as one query of the simple protocol, so a batch of records and statements is
one round trip, its statements' results read once the query has run; any other awaited write
sends what is kept so far with its first statement (``Leading``) and makes its later
statements as they are. A statement with parameters that a connection has rendered before is
prepared on it (``PREPARE``, once, on its own) and from then on rendered as ``EXECUTE`` with
its parameters (``Prepared``): the server then neither parses nor plans it again, which is
most of what a statement costs it (a simple-protocol query is otherwise parsed and planned
in full every time). If anything fails
(a lock held elsewhere, a lost fence, a write failing for its own reason) the server stops
at that statement, nothing of the batch commits, and the caller rolls it back and writes
the batch with care, on the same connection, with ``locked`` and ``fenced``, which sort out
what fails from what does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

import psycopg
from psycopg import AsyncClientCursor, AsyncConnection
from psycopg.rows import TupleRow

from ...cluster.fencing import Fence, LeaseLost

log = logging.getLogger(__name__)

T = TypeVar("T")

Conn = AsyncConnection[TupleRow]
Write = Callable[[Conn], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Statement(Generic[T]):
    """An awaited write that is one statement, its result read from the rows it returns
    (``result``: pure, quick, and never failing for a row the statement returns). Called
    with a connection it runs the statement there; ``in_few_round_trips`` sends it with
    the rest of its batch instead, and reads its rows once the query has run. A
    ``Statement`` should always return rows (a ``RETURNING`` clause, a ``SELECT``)."""

    query: str
    params: Mapping[str, Any] | Sequence[Any]
    result: Callable[[list[TupleRow]], T]

    async def __call__(self, conn: Conn) -> T:
        cur = await conn.execute(self.query, self.params)
        return self.result(await cur.fetchall())


@dataclass(slots=True)
class Queued:
    """One queued write: its kind (the store method, for ``health``), the write, and the
    future of its caller (None: a record nobody awaits)."""

    kind: str
    write: Write
    future: asyncio.Future[Any] | None
    locks: tuple[str, ...] = ()
    """Advisory locks (by name) the write needs, taken at the start of its batch."""
    fence: Fence | None = None
    """The lease the write was queued under (its store view's fence): it is made only if
    that lease is still held, checked in the batch's transaction."""
    waited: bool = False
    """Set aside once already (a lock held elsewhere): its batches are written with care."""


Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]
"""An awaited write's caller, and what it gets: the value, or the failure."""


@dataclass(slots=True)
class Written:
    """What a batch's transaction did: the outcome of each awaited write made or refused,
    and the awaited writes set aside for a lock another transaction held (in order)."""

    outcomes: list[Outcome] = field(default_factory=list)
    aside: list[Queued] = field(default_factory=list)


ALL_LOCKED = (
    "SELECT CASE WHEN bool_and(pg_try_advisory_xact_lock(hashtextextended(name, 0))) THEN 0"
    " ELSE ('botd: an advisory lock is held by another transaction: ' || count(*))::int END"
    " FROM unnest(%s::text[]) AS name"
)
"""Take every advisory lock named (sorted), without waiting; an error if one is held
elsewhere (the cast of the words fails: a plain statement cannot raise otherwise, and a
constant ``1/0`` would fail when planned)."""
ALL_HELD = (
    "SELECT CASE WHEN count(*) = %(count)s THEN 0"
    " ELSE ('botd: a fence no longer holds: ' || count(*))::int END"
    " FROM (SELECT 1 FROM leases l"
    " JOIN unnest(%(names)s::text[], %(holders)s::text[], %(epochs)s::bigint[])"
    " AS f(name, holder, epoch)"
    " ON l.name = f.name AND l.holder = f.holder AND l.epoch = f.epoch"
    " WHERE l.name = ANY(%(names)s::text[]) AND l.expires_at > clock_timestamp()"
    " FOR KEY SHARE OF l) AS held"
)
"""Key-share-lock the lease row of every fence named (as ``fenced``); an error unless each
is held unexpired by its holder at its epoch. The rows are found by name in the table's
key (``name = ANY``): joined with the list alone, the planner reads the whole table, one
row for every conversation there ever was."""
ONE_HELD = (
    "SELECT CASE WHEN count(*) = 1 THEN 0"
    " ELSE ('botd: a fence no longer holds: ' || count(*))::int END"
    " FROM (SELECT 1 FROM leases WHERE name = %(name)s AND holder = %(holder)s"
    " AND epoch = %(epoch)s AND expires_at > clock_timestamp() FOR KEY SHARE) AS held"
)
"""``ALL_HELD`` for a batch of one conversation's writes, the most common: one row found by
its key, which costs the server a fraction of the join over arrays."""


async def in_few_round_trips(conn: Conn, batch: list[Queued]) -> Written:
    """``batch`` in one transaction with as few round trips as it allows (see the module
    docstring): one for a batch of records and ``Statement`` writes; an awaited write of
    another kind sends what was kept before it with its first statement, and makes each of
    its later statements as it is (a round trip each: it may read what one returns). No
    savepoints. Whatever fails is raised as it is, the transaction left open (aborted, or
    not committed) for the caller to roll back: nothing is written unless every lock was
    taken, every fence holds and every write succeeded.

    Each of those queries is one message of the simple protocol, its statements rendered here
    (``Rendered``), so the server has all of it, up to its end, at once: a node frozen or cut
    off between two round trips leaves the server idle in a transaction, which it ends after
    ``idle_in_transaction_session_timeout`` (``session``). A pipeline would not: a server that
    got part of one (no ``Sync`` yet) waits for the rest with no timeout, its locks held."""
    names = sorted({name for queued in batch for name in queued.locks})
    fences = list({queued.fence for queued in batch if queued.fence is not None})
    outcomes: list[Outcome] = []
    render = Rendered(conn, outcomes)
    await render.execute("BEGIN")
    if names:
        await render.execute(ALL_LOCKED, (names,))
    if len(fences) == 1:
        (fence,) = fences
        await render.execute(
            ONE_HELD, {"name": fence.name, "holder": fence.holder, "epoch": fence.epoch}
        )
    elif fences:
        await render.execute(
            ALL_HELD,
            {
                "count": len(fences),
                "names": [fence.name for fence in fences],
                "holders": [fence.holder for fence in fences],
                "epochs": [fence.epoch for fence in fences],
            },
        )
    for queued in batch:
        if queued.future is None:
            await queued.write(cast(Conn, render))
        elif isinstance(queued.write, Statement):
            await render.read(queued.future, queued.write)
        else:
            value = await queued.write(cast(Conn, Leading(render)))
            outcomes.append((queued.future, value, None))
    await render.execute("COMMIT")
    await render.send()
    return Written(outcomes)


class Rendered:
    """What a record's write is given for a connection in ``in_few_round_trips``: each
    statement it executes is kept, rendered with its parameters by the connection's adapters
    (``text.ADAPTERS`` too), and ``send`` sends those kept as one query. A record only executes
    statements (``execute``, ``cursor().executemany``), never reads what they return (one that
    tried fails, and the batch is written with care). A ``Statement`` write is kept the same
    way (``read``); its rows are read, and its caller's outcome added to ``outcomes``, once
    the query that carries it has run."""

    def __init__(self, conn: Conn, outcomes: list[Outcome]) -> None:
        self.conn = conn
        self._render = AsyncClientCursor(conn)
        self._statements: list[str] = []
        self._reads: list[tuple[int, asyncio.Future[Any], Statement[Any]]] = []
        self._outcomes = outcomes
        self._sent = False
        """Whether a query went (the transaction is open on the server)."""

    @property
    def pending(self) -> bool:
        """Whether statements are kept, not sent yet."""
        return bool(self._statements)

    async def execute(self, query: Any, params: Any = None) -> Rendered:
        self._statements.append(await self._rendered(query, params))
        return self

    async def _rendered(self, query: Any, params: Any) -> str:
        """``query`` with ``params``, as ``EXECUTE`` of it prepared on this connection
        when it is (or now gets) prepared there (``Prepared``)."""
        if params is not None and isinstance(query, str):
            call = await Prepared.of(self.conn).call(self.conn, query, in_transaction=self._sent)
            if call is not None:
                return self._render.mogrify(call, params)
        return self._render.mogrify(query, params)

    async def executemany(self, query: Any, params_seq: Iterable[Any]) -> None:
        for params in params_seq:
            await self.execute(query, params)

    async def read(self, future: asyncio.Future[Any], statement: Statement[Any]) -> None:
        """Keep ``statement``, an awaited write whose caller is ``future``."""
        rendered = await self._rendered(statement.query, statement.params)
        self._reads.append((len(self._statements), future, statement))
        self._statements.append(rendered)

    def cursor(self) -> Rendered:
        return self

    async def __aenter__(self) -> Rendered:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def send(self) -> psycopg.AsyncCursor[TupleRow] | None:
        """Send the statements kept so far as one query (the simple protocol: no
        parameters, not prepared), if any, and read the rows of the ``Statement`` writes
        among them; the query's cursor, on the last of those results (or the first)."""
        if not self._statements:
            return None
        query = ";\n".join(self._statements)
        reads, self._statements, self._reads = self._reads, [], []
        self._sent = True
        cur = await self.conn.execute(query, prepare=False)
        at = 0
        for index, future, statement in reads:
            while at < index:
                cur.nextset()
                at += 1
            try:
                value = statement.result(await cur.fetchall())
            except Exception as exc:  # a bug of the reading: the write stands, its caller hears
                self._outcomes.append((future, None, exc))
            else:
                self._outcomes.append((future, value, None))
        return cur


PREPARE_AT = 2
"""A connection prepares a statement the ``PREPARE_AT``-th time it renders it."""
PREPARED_AT_MOST = 256
"""Statements prepared on one connection at most (the rest are rendered in full)."""
_PLACEHOLDER = re.compile(r"%(?:\((\w+)\))?s|%%")


class Prepared:
    """The statements prepared on one connection (``of``): each as the ``EXECUTE`` that
    calls it, in the query's own placeholders, to be rendered with the query's parameters.

    A statement is prepared on its own, outside any transaction, the ``PREPARE_AT``-th time
    the connection renders it: a statement rendered once (a rare write) costs no round trip
    more, and one that cannot be prepared (a parameter whose type the server cannot tell
    from the statement alone) is refused there and rendered in full from then on, its batch
    untouched. A prepared statement lasts as long as its session (a rollback keeps it), and
    each gets a name of its own, never used again on that connection: one prepared by a
    query whose answer never came is simply prepared again under a new name."""

    _OF: ClassVar[weakref.WeakKeyDictionary[Conn, Prepared]] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self._calls: dict[str, str] = {}
        self._seen: Counter[str] = Counter()
        self._refused: set[str] = set()
        self._named = 0

    @classmethod
    def of(cls, conn: Conn) -> Prepared:
        """The statements prepared on ``conn``."""
        prepared = cls._OF.get(conn)
        if prepared is None:
            prepared = cls._OF[conn] = cls()
        return prepared

    async def call(self, conn: Conn, query: str, *, in_transaction: bool) -> str | None:
        """The ``EXECUTE`` of ``query`` prepared on ``conn`` (prepared now if it is due);
        None: render it in full (not prepared yet, refused, or ``in_transaction``, where a
        refusal would end the transaction)."""
        call = self._calls.get(query)
        if call is not None or in_transaction or query in self._refused:
            return call
        if len(self._calls) >= PREPARED_AT_MOST:
            return None
        self._seen[query] += 1
        if self._seen[query] < PREPARE_AT:
            if len(self._seen) > 4 * PREPARED_AT_MOST:
                self._seen.clear()  # statements that vary: never prepared
            return None
        return await self._prepare(conn, query)

    async def _prepare(self, conn: Conn, query: str) -> str | None:
        """Prepare ``query`` on ``conn`` now (one round trip); its ``EXECUTE``, or None
        when the server refused it (it is not asked again)."""
        self._named += 1
        name = f"botd_{self._named}"
        numbered, call = _parametrised(query, name)
        try:
            await conn.execute(f"PREPARE {name} AS {numbered}", prepare=False)
        except psycopg.Error as exc:
            if conn.broken:
                raise
            log.debug("store: a statement is not prepared (%s): %.80s", exc, query)
            self._refused.add(query)
            return None
        self._calls[query] = call
        return call


def _parametrised(query: str, name: str) -> tuple[str, str]:
    """``query`` with its placeholders numbered (``$1``...), and the ``EXECUTE name(...)``
    that calls it with the same placeholders, in that order."""
    named: dict[str, int] = {}
    positional: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        key = match.group(1)
        if key is None:
            positional.append("%s")
            return f"${len(positional)}"
        if key not in named:
            named[key] = len(named) + 1
        return f"${named[key]}"

    numbered = _PLACEHOLDER.sub(number, query)
    arguments = positional or [f"%({key})s" for key in named]
    return numbered, f"EXECUTE {name}({', '.join(arguments)})"


class Leading:
    """What an awaited write that is not a ``Statement`` is given for a connection in
    ``in_few_round_trips``: its first statement goes in one query with what ``render`` kept
    before it (the transaction's start, its checks, the records and statements queued
    ahead), rendered the same way, and the write reads that statement's result (the last of
    the query's); its later statements, and any made once nothing is kept, go to the
    connection as they are. A check that fails stops the query before the write's statement
    runs (the server skips the rest of a query after an error), so nothing it would write is
    written."""

    def __init__(self, render: Rendered) -> None:
        self._render = render
        self._conn = render.conn

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if not self._render.pending:
            return await self._conn.execute(query, params, **kwargs)
        await self._render.execute(query, params)
        cur = await self._render.send()
        assert cur is not None  # something was kept
        while cur.nextset():
            pass  # to the write's own result, the query's last
        return cur

    def cursor(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """A cursor of the connection, entered once what is kept was sent (``async with``)."""
        return self._cursor()

    @contextlib.asynccontextmanager
    async def _cursor(self) -> AsyncIterator[Any]:
        await self._render.send()
        async with self._conn.cursor() as cur:
            yield cur

    def __getattr__(self, name: str) -> Any:
        if self._render.pending:
            # Nothing the write would do may come before the transaction's start.
            raise RuntimeError(f"an awaited write used the connection's {name} first")
        return getattr(self._conn, name)


async def locked(conn: Conn, batch: list[Queued]) -> tuple[list[Queued], list[Queued]]:
    """Take every advisory lock ``batch`` names, without waiting for any: the writes whose
    locks were all taken, and those set aside (one of their locks is held by another
    transaction, or an earlier write set aside names one of them: the order per lock holds).
    Nothing waits here, so two nodes' batches cannot deadlock on these locks and a lock held
    by a frozen node holds up only the writes that need it."""
    names = sorted({name for queued in batch for name in queued.locks})
    if not names:
        return batch, []
    cur = await conn.execute(
        "SELECT name FROM unnest(%s::text[]) AS name"
        " WHERE NOT pg_try_advisory_xact_lock(hashtextextended(name, 0))",
        (names,),
    )
    busy = {str(row[0]) for row in await cur.fetchall()}
    if not busy:
        return batch, []
    kept: list[Queued] = []
    aside: list[Queued] = []
    for queued in batch:
        if busy.intersection(queued.locks):
            busy.update(queued.locks)
            aside.append(queued)
        else:
            kept.append(queued)
    return kept, aside


async def fenced(conn: Conn, batch: list[Queued]) -> tuple[list[Queued], list[Outcome]]:
    """The writes of ``batch`` whose fences still hold, each fence's lease row key-share-locked
    until the transaction ends (one statement for the batch; see ``leases.fence``), and the
    outcomes of the awaited writes left out (``LeaseLost``); the records left out are dropped
    with a warning."""
    fences = {queued.fence for queued in batch if queued.fence is not None}
    if not fences:
        return batch, []
    listed = list(fences)
    cur = await conn.execute(
        "SELECT l.name, l.epoch FROM leases l"
        " JOIN unnest(%(names)s::text[], %(holders)s::text[], %(epochs)s::bigint[])"
        " AS f(name, holder, epoch)"
        " ON l.name = f.name AND l.holder = f.holder AND l.epoch = f.epoch"
        " WHERE l.name = ANY(%(names)s::text[]) AND l.expires_at > clock_timestamp()"
        " FOR KEY SHARE OF l",  # by the key, as ``ALL_HELD``
        {
            "names": [fence.name for fence in listed],
            "holders": [fence.holder for fence in listed],
            "epochs": [fence.epoch for fence in listed],
        },
    )
    held = {(str(name), int(epoch)) for name, epoch in await cur.fetchall()}
    lost = {fence for fence in listed if (fence.name, fence.epoch) not in held}
    if not lost:
        return batch, []
    for gone in lost:
        # The database says so: the work under it stops now (its owner watches the event),
        # not only when the next renewal fails.
        gone.lease.lose("the database says it is no longer held")
    kept: list[Queued] = []
    outcomes: list[Outcome] = []
    for queued in batch:
        fence = queued.fence
        if fence is None or fence not in lost:
            kept.append(queued)
        elif queued.future is not None:
            outcomes.append((queued.future, None, lease_lost(fence)))
        else:
            log.debug(
                "store: a %s record of %s (epoch %d) is dropped: the lease is lost",
                queued.kind,
                fence.name,
                fence.epoch,
            )
    return kept, outcomes


def lease_lost(fence: Fence) -> LeaseLost:
    return LeaseLost(
        f"lease {fence.name} (epoch {fence.epoch}) is no longer held by {fence.holder}"
    )


__all__ = [
    "ALL_HELD",
    "ALL_LOCKED",
    "ONE_HELD",
    "Conn",
    "Leading",
    "Outcome",
    "Prepared",
    "Queued",
    "Rendered",
    "Statement",
    "Write",
    "Written",
    "fenced",
    "in_few_round_trips",
    "lease_lost",
    "locked",
]
