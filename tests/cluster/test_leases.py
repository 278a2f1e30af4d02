"""The lease contract, on PostgreSQL and on the one-process table, and the keeper over it.

Expiry on PostgreSQL is the server's clock, so the tests there use a short TTL and wait for
the condition (the lease claimable again), never for a fixed time. The one-process table
runs on a clock the test moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from botd.cluster.leases import (
    LeaseKeeper,
    LeaseLost,
    LeaseTable,
    NodeInUse,
    ProcessLeases,
    hold_node,
)
from botd.store.postgres.leases import PostgresLeases, fence
from botd.store.postgres.schema import migrate
from tests.support.pg_server import PostgresServer
from tests.support.waiting import until

pytestmark = pytest.mark.no_nodes

SHORT_TTL = 0.3


@dataclass
class ManualClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Backend:
    table: LeaseTable
    pool: AsyncConnectionPool[AsyncConnection[TupleRow]] | None
    clock: ManualClock | None

    async def outlive(self, name: str, ttl: float) -> None:
        """Let lease ``name`` of ``ttl`` run out: move the clock, or wait for the server's."""
        if self.clock is not None:
            self.clock.now += ttl
            return

        async def expired() -> bool:
            return all(r.expires_in <= 0 for r in await self.table.rows() if r.name == name)

        await until(expired, f"the server's clock to pass lease {name}'s {ttl} s", guard=30)


async def _pool(dsn: str) -> AsyncConnectionPool[AsyncConnection[TupleRow]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await migrate(conn, "the test database")
    pool: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
        dsn, min_size=1, max_size=12, timeout=2, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    return pool


@pytest.fixture(params=["postgres", "process"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "process":
        clock = ManualClock()
        yield Backend(ProcessLeases(clock=clock), None, clock)
        return
    dsn: str = request.getfixturevalue("postgres_dsn")
    pool = await _pool(dsn)
    try:
        yield Backend(PostgresLeases(pool), pool, None)
    finally:
        await pool.close()


def ttl_for(backend: Backend) -> float:
    return 10.0 if backend.clock is not None else SHORT_TTL


async def test_a_held_lease_cannot_be_claimed_until_it_expires(backend: Backend) -> None:
    table, ttl = backend.table, ttl_for(backend)
    assert await table.claim("scheduler", "node-a", 60) == 1
    assert await table.claim("scheduler", "node-b", 60) is None
    assert await table.claim("scheduler", "node-a", 60) is None  # renewing is not claiming
    assert await table.claim("telegram:main", "node-b", ttl) == 1  # names are independent

    await backend.outlive("telegram:main", ttl)
    assert await table.claim("telegram:main", "node-a", ttl) == 2


async def test_each_claim_takes_the_next_epoch_and_release_keeps_the_row(
    backend: Backend,
) -> None:
    table = backend.table
    epoch = await table.claim("conversation:t:1", "node-a", 60)
    assert epoch == 1
    await table.expire("conversation:t:1", "node-a", epoch)
    assert await table.claim("conversation:t:1", "node-b", 60) == 2
    rows = await table.rows()
    assert [(r.name, r.holder, r.epoch) for r in rows] == [("conversation:t:1", "node-b", 2)]
    assert rows[0].expires_in > 0


async def test_a_stale_holder_neither_renews_nor_releases_the_new_holders_lease(
    backend: Backend,
) -> None:
    table, ttl = backend.table, ttl_for(backend)
    assert await table.claim("telegram:main", "node-a", ttl) == 1
    await backend.outlive("telegram:main", ttl)  # node-a was paused past its expiry
    assert await table.renew("node-a", {"telegram:main": 1}, ttl) == set()
    assert await table.claim("telegram:main", "node-b", 60) == 2
    await table.expire("telegram:main", "node-a", 1)  # node-a wakes and tries to give it up
    assert await table.claim("telegram:main", "node-c", 60) is None
    assert await table.renew("node-b", {"telegram:main": 2}, 60) == {"telegram:main"}


async def test_a_lease_that_expired_unclaimed_is_not_renewed_back(backend: Backend) -> None:
    table, ttl = backend.table, ttl_for(backend)
    assert await table.claim("scheduler", "node-a", ttl) == 1
    await backend.outlive("scheduler", ttl)
    assert await table.renew("node-a", {"scheduler": 1}, 60) == set()


async def test_concurrent_claims_of_an_expired_lease_give_one_epoch(backend: Backend) -> None:
    table, ttl = backend.table, ttl_for(backend)
    assert await table.claim("scheduler", "node-0", ttl) == 1
    await backend.outlive("scheduler", ttl)
    got = await asyncio.gather(*(table.claim("scheduler", f"node-{i}", 60) for i in range(1, 11)))
    assert sorted(e for e in got if e is not None) == [2]


async def test_a_fenced_write_of_a_stale_epoch_fails_and_writes_nothing(
    postgres_dsn: str,
) -> None:
    pool = await _pool(postgres_dsn)
    try:
        table = PostgresLeases(pool)
        async with pool.connection() as conn:
            await conn.execute("CREATE TABLE pieces (text text)")
        assert await table.claim("conversation:k", "node-a", SHORT_TTL) == 1

        async def write_as(holder: str, epoch: int) -> None:
            async with pool.connection() as conn, conn.transaction():
                await fence(conn, "conversation:k", holder, epoch)
                await conn.execute("INSERT INTO pieces VALUES (%s)", (f"{holder}/{epoch}",))

        await write_as("node-a", 1)
        await until(lambda: table.claim("conversation:k", "node-b", 60), "node-b's claim")
        with pytest.raises(LeaseLost):
            await write_as("node-a", 1)
        await write_as("node-b", 2)
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT text FROM pieces ORDER BY text")
            assert [r[0] for r in await cur.fetchall()] == ["node-a/1", "node-b/2"]
    finally:
        await pool.close()


async def test_a_claim_waits_for_a_fenced_write_in_flight(postgres_dsn: str) -> None:
    """The fence holds the row: a claim that comes while a fenced transaction is open is
    decided after it ends, so the write and the takeover never overlap. The holder's own
    renewal is not held up by its fenced write."""
    pool = await _pool(postgres_dsn)
    # Claims as botd's sessions make them: a lock waited for at most ``lock_timeout``.
    claims: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
        postgres_dsn,
        min_size=1,
        max_size=2,
        timeout=2,
        open=False,
        kwargs={"autocommit": True, "options": "-c lock_timeout=200"},
    )
    await claims.open(wait=True)
    try:
        table, other = PostgresLeases(pool), PostgresLeases(claims)
        assert await table.claim("conversation:k", "node-a", SHORT_TTL) == 1
        async with pool.connection() as conn, conn.transaction():
            await fence(conn, "conversation:k", "node-a", 1)
            renewed = await table.renew("node-a", {"conversation:k": 1}, SHORT_TTL)
            assert renewed == {"conversation:k"}
            await Backend(table, pool, None).outlive("conversation:k", SHORT_TTL)
            # Expired, but the fenced write is still open: not claimable yet.
            assert await other.claim("conversation:k", "node-b", 60) is None
        assert await other.claim("conversation:k", "node-b", 60) == 2
    finally:
        await claims.close()
        await pool.close()


# -- the keeper ----------------------------------------------------------------------------


async def test_the_keeper_renews_what_it_holds_and_releases_it_for_the_next_node() -> None:
    clock = ManualClock()
    table = ProcessLeases(clock=clock)
    a = LeaseKeeper(table, "node-a", 15, clock=clock)
    b = LeaseKeeper(table, "node-b", 15, clock=clock)
    lease = await a.try_claim("scheduler")
    assert lease is not None and lease.epoch == 1 and lease.deadline == clock.now + 15
    assert await a.try_claim("scheduler") is None

    for _ in range(10):  # a minute and more, renewed every 5 s
        clock.now += a.renew_every
        await a.renew_once()
    assert not lease.lost.is_set()
    assert lease.valid_for(clock.now) == pytest.approx(15)
    assert await b.try_claim("scheduler") is None

    await a.release(lease)
    taken = await b.try_claim("scheduler")
    assert taken is not None and taken.epoch == 2
    assert not lease.lost.is_set()  # given up, not lost


async def test_a_paused_keeper_finds_its_lease_lost_when_it_wakes() -> None:
    clock = ManualClock()
    table = ProcessLeases(clock=clock)
    a = LeaseKeeper(table, "node-a", 15, clock=clock)
    b = LeaseKeeper(table, "node-b", 15, clock=clock)
    lease = await a.try_claim("telegram:main")
    assert lease is not None
    clock.now += 20  # node-a stopped (SIGSTOP) past the TTL
    assert lease.valid_for(clock.now) == 0
    taken = await b.try_claim("telegram:main")
    assert taken is not None and taken.epoch == 2

    await a.renew_once()  # node-a wakes
    assert lease.lost.is_set() and a.held() == []
    assert b.holding("telegram:main") is taken


async def test_a_failed_renewal_is_tried_again_soon_enough_to_keep_the_lease() -> None:
    """One renewal that got no answer in its time must not use the margin up: the next try
    comes a twelfth of the TTL later, not a third, and the lease holds."""
    clock = ManualClock()
    table = ProcessLeases(clock=clock)
    pauses: list[float] = []
    answers = ["ok", "slow", "ok", "ok"]

    class Flaky:
        async def renew(self, holder: str, held: Mapping[str, int], ttl: float) -> set[str]:
            if answers.pop(0) == "slow":
                clock.now += keeper.renew_every  # no answer before the keeper's timeout
                raise TimeoutError
            return await table.renew(holder, held, ttl)

        def __getattr__(self, name: str) -> Any:
            return getattr(table, name)

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        clock.now += seconds
        if not answers:
            raise asyncio.CancelledError

    keeper = LeaseKeeper(cast(LeaseTable, Flaky()), "node-a", 15, clock=clock, sleep=sleep)
    lease = await keeper.try_claim("scheduler")
    assert lease is not None
    with pytest.raises(asyncio.CancelledError):
        await keeper.run()
    assert pauses == [5, 5, 1.25, 5, 5]
    assert not lease.lost.is_set() and keeper.holding("scheduler") is lease


async def test_a_database_away_loses_the_leases_only_at_their_deadline(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    pool = await _pool(postgres_dsn)
    clock = ManualClock()
    try:
        keeper = LeaseKeeper(PostgresLeases(pool), "node-a", 15, clock=clock)
        lease = await keeper.try_claim("scheduler")
        assert lease is not None
        postgres_server.stop("immediate")
        try:
            clock.now += 5
            await keeper.renew_once()  # fails: still within the deadline
            assert not lease.lost.is_set()
            clock.now += 11
            await keeper.renew_once()  # fails past the deadline
            assert lease.lost.is_set() and keeper.held() == []
        finally:
            postgres_server.start()
    finally:
        await pool.close()


async def test_a_second_process_as_the_same_node_is_refused_and_a_restart_waits_for_its_lease() -> (
    None
):
    """``node:<node_id>`` is the shared database's state-dir lock: a second keeper with the
    same name gets ``NodeInUse`` once one TTL has passed, and a node whose old process was
    killed (its lease not renewed) gets the lease back when that runs out."""
    table = ProcessLeases()
    running = LeaseKeeper(table, "n1", 0.3)
    first = await hold_node(running)
    assert first.name == "node:n1"
    renewing = asyncio.create_task(running.run())
    try:
        with pytest.raises(NodeInUse, match=r"store\.node_id 'n1' is in use"):
            await hold_node(LeaseKeeper(table, "n1", 0.3))
    finally:
        renewing.cancel()
    # The first process is gone now (nothing renews its lease): the next one waits it out.
    restarted = await hold_node(LeaseKeeper(table, "n1", 0.3))
    assert restarted.epoch == first.epoch + 1
    assert await hold_node(LeaseKeeper(table, "n2", 0.3)) is not None


async def test_a_late_renewal_is_told(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    keeper = LeaseKeeper(ProcessLeases(clock=clock), "node-a", 15, clock=clock)
    assert await keeper.try_claim("scheduler") is not None
    for step in (5, 5, 8):  # the third came more than half the TTL after the second
        clock.now += step
        assert await keeper.renew_once()
    late = [r.getMessage() for r in caplog.records if "after the previous renewal" in r.message]
    assert late == [
        "leases renewed 8.0 s after the previous renewal (they last 15 s): this node's event "
        "loop or the database is slow"
    ]


async def test_a_lease_released_while_a_renewal_is_out_is_given_up_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node stopping releases its leases while the renewal loop may have a request out:
    that request, answered after the release, finds those rows expired. They were given
    up, not lost: no "lost" line, and the lease still held is renewed."""
    table = ProcessLeases()
    asked, answer = asyncio.Event(), asyncio.Event()

    class Slow:
        async def renew(self, holder: str, held: Mapping[str, int], ttl: float) -> set[str]:
            asked.set()
            await answer.wait()
            return await table.renew(holder, held, ttl)

        def __getattr__(self, name: str) -> Any:
            return getattr(table, name)

    keeper = LeaseKeeper(cast(LeaseTable, Slow()), "n1", 15)
    node = await keeper.try_claim("node:n1")
    scheduler = await keeper.try_claim("scheduler")
    assert node is not None and scheduler is not None
    renewing = asyncio.create_task(keeper.renew_once())
    await asked.wait()
    await keeper.release(node)
    answer.set()
    assert await renewing
    assert not node.lost.is_set() and not scheduler.lost.is_set()
    assert keeper.held() == [scheduler]
    assert [r.getMessage() for r in caplog.records if " lost" in r.getMessage()] == []


async def test_a_renewal_request_once_sent_is_never_cancelled_and_the_next_waits_for_it() -> None:
    """The renewal loop cancelled (the node stopping), or a renewal past its timeout, stops
    waiting, but the request it sent runs to its end; the next renewal sends its own only
    after that one ended (one request at a time, none cut off mid-query)."""
    table = ProcessLeases()
    answer = asyncio.Event()
    sent: list[str] = []
    ended: list[str] = []

    class Slow:
        async def renew(self, holder: str, held: Mapping[str, int], ttl: float) -> set[str]:
            sent.append(f"request {len(sent) + 1}")
            try:
                await answer.wait()
            except asyncio.CancelledError:
                ended.append("cancelled")
                raise
            ended.append("answered")
            return await table.renew(holder, held, ttl)

        def __getattr__(self, name: str) -> Any:
            return getattr(table, name)

    keeper = LeaseKeeper(cast(LeaseTable, Slow()), "n1", 15)
    lease = await keeper.try_claim("scheduler")
    assert lease is not None
    stopping = asyncio.create_task(keeper.renew_once())
    await until(lambda: sent, "the first request sent")
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    next_one = asyncio.create_task(keeper.renew_once())
    await asyncio.sleep(0.05)
    assert sent == ["request 1"] and ended == []  # still running; the next one waits
    answer.set()
    assert await next_one
    assert sent == ["request 1", "request 2"] and ended == ["answered", "answered"]
    assert not lease.lost.is_set()
