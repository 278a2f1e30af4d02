"""No node waits on another through the PostgreSQL store (issue 35): a conversation whose
lock another transaction holds holds up only its own writes, and a node cut off from the
server inside a transaction (``SilentProxy``: its packets acknowledged, none carried on) has
its transaction, and so its locks, ended by the server within the bounds derived from the
lease TTL (``botd.store.postgres.session``); its own waits are bounded too, and it goes on
once the network forwards again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import psycopg
import pytest

from botd.chat import InboundMessage, Target
from botd.cluster.fencing import Fence
from botd.cluster.leases import LeaseKeeper
from botd.store.errors import StoreError, StoreWriteError
from botd.store.postgres import PostgresStore
from botd.store.postgres.session import SessionBounds
from tests.fakes.tcp_proxy import SilentProxy
from tests.support.waiting import until

TTL = 1.5
"""A short lease TTL: the server ends a silent client's transaction after a TTL."""


def message(n: int, key: str) -> InboundMessage:
    chat = key.split(":")[1]
    return InboundMessage(
        channel="telegram",
        chat_id=chat,
        sender_id=f"u{n}",
        text=f"m{n}",
        message_id=f"{chat}-{n}",
        conversation_key=key,
    )


async def seqs(dsn: str, key: str) -> list[tuple[str, int]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute(
            "SELECT message::json->>'text', seq FROM inbox WHERE conversation_key = %s"
            " ORDER BY seq",
            (key,),
        )
        return [(str(text), int(seq)) for text, seq in await cur.fetchall()]


@pytest.fixture
async def store(migrated_postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(migrated_postgres_dsn, lease_ttl=TTL)
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_a_conversation_locked_elsewhere_holds_up_only_its_own_accepts(
    migrated_postgres_dsn: str, store: PostgresStore
) -> None:
    keeper = LeaseKeeper(store.lease_table(), "node-a", TTL)
    async with await psycopg.AsyncConnection.connect(migrated_postgres_dsn) as other:
        # Another node's transaction holds conversation telegram:1's lock (as an accept
        # of it does until it commits).
        async with other.transaction():
            await other.execute("SELECT pg_advisory_xact_lock(hashtextextended('telegram:1', 0))")
            first = asyncio.ensure_future(
                store.accept_inbound("telegram", ["a"], message(1, "telegram:1"))
            )
            second = asyncio.ensure_future(
                store.accept_inbound("telegram", ["b"], message(2, "telegram:1"))
            )
            # Everything else goes on meanwhile: other conversations' accepts, claims and
            # renewals, reads.
            for n in range(3):
                assert await store.accept_inbound("telegram", [f"c{n}"], message(n, "telegram:2"))
            lease = await keeper.try_claim("conversation:telegram:2")
            assert lease is not None
            await keeper.renew_once()
            assert not lease.lost.is_set()
            assert await store.accepted_after("telegram:2", 0)
            assert not first.done() and not second.done()
        # The lock released: both written, in the order they were queued.
        assert await first is not None
        assert await second is not None
    assert await seqs(migrated_postgres_dsn, "telegram:1") == [("m1", 1), ("m2", 2)]
    assert [seq for _, seq in await seqs(migrated_postgres_dsn, "telegram:2")] == [1, 2, 3]


async def test_a_node_cut_off_after_taking_a_conversations_lock_holds_it_only_briefly(
    migrated_postgres_dsn: str, store: PostgresStore
) -> None:
    async with SilentProxy.to_database(migrated_postgres_dsn) as proxy:
        cut_off = await PostgresStore.open(proxy.dsn(migrated_postgres_dsn), lease_ttl=TTL)
        try:
            proxy.cut_after(b"pg_try_advisory_xact_lock")
            # A message of a readable history (as Slack's): its chat mark moves in the
            # accept's transaction, a second round trip, so the node is cut off inside the
            # transaction, the lock held. (An accept of one statement goes with its
            # transaction's start and commit in one query: the server has all of it.)
            stuck = asyncio.ensure_future(
                cut_off.accept_inbound(
                    "telegram", ["x1"], replace(message(1, "telegram:7"), in_history=True)
                )
            )
            await until(lambda: proxy.silent, "the cut right after the accept's lock")
            # The live node's accept of that conversation waits only until the server ends
            # the silent client's transaction (a TTL after its last statement).
            assert await store.accept_inbound("telegram", ["y1"], message(2, "telegram:7"))
            # The cut-off node's own wait is bounded on its side too.
            with pytest.raises(StoreWriteError):
                await stuck
            proxy.mend()
            # Forwarding again, it writes again (its pool replaces the cut connections).
            await until(
                lambda: _accepts(cut_off, "x2", message(3, "telegram:7")),
                "the node back writing",
            )
        finally:
            proxy.mend()
            await cut_off.aclose()
    assert await seqs(migrated_postgres_dsn, "telegram:7") == [("m2", 1), ("m3", 2)]


async def _accepts(store: PostgresStore, key: str, inbound: InboundMessage) -> bool:
    try:
        return await store.accept_inbound("telegram", [key], inbound) is not None
    except StoreWriteError:
        return False


async def test_a_lease_fenced_by_a_cut_off_node_is_claimed_once_the_server_ends_its_transaction(
    migrated_postgres_dsn: str, store: PostgresStore
) -> None:
    name = "conversation:telegram:9"
    async with SilentProxy.to_database(migrated_postgres_dsn) as proxy:
        cut_off = await PostgresStore.open(proxy.dsn(migrated_postgres_dsn), lease_ttl=TTL)
        try:
            keeper_a = LeaseKeeper(cut_off.lease_table(), "node-a", TTL)
            keeper_b = LeaseKeeper(store.lease_table(), "node-b", TTL)
            lease_a = await keeper_a.try_claim(name)
            assert lease_a is not None
            inbox_id = await cut_off.accept_inbound("telegram", ["f1"], message(1, "telegram:9"))
            proxy.cut_after(b"FOR KEY SHARE")
            fenced = cut_off.fenced(Fence(lease_a, "node-a", 0.1))
            stuck = asyncio.ensure_future(
                fenced.outbox_add(inbox_id, 1, "block", Target("telegram", "9"), "held")
            )
            await until(lambda: proxy.silent, "the cut right after the fence's FOR KEY SHARE")
            # Node b claims the lease once it expired and the server ended node a's
            # transaction; meanwhile its claims give up at once (``lock_timeout``) and
            # its own renewals and writes go on.
            other = await keeper_b.try_claim("conversation:telegram:10")
            assert other is not None
            renewing = asyncio.ensure_future(keeper_b.run())  # as a node renews, meanwhile
            try:
                lease_b = await until(lambda: keeper_b.try_claim(name), "node b's claim")
                assert lease_b is not None
                assert lease_b.epoch == lease_a.epoch + 1
                await keeper_b.renew_once()
                assert not other.lost.is_set() and not lease_b.lost.is_set()
            finally:
                renewing.cancel()
            with pytest.raises(StoreWriteError):
                await stuck
        finally:
            proxy.mend()
            await cut_off.aclose()


async def test_a_claim_cut_off_on_its_way_holds_up_neither_renewals_nor_writes(
    migrated_postgres_dsn: str, store: PostgresStore
) -> None:
    """Another node's claim of a lease this node holds, cut off right after it was sent,
    leaves no lock behind: the holder renews it and writes under it at once."""
    name = "conversation:telegram:11"
    holder = LeaseKeeper(store.lease_table(), "node-a", TTL)
    lease = await holder.try_claim(name)
    assert lease is not None
    inbox_id = await store.accept_inbound("telegram", ["g1"], message(1, "telegram:11"))
    async with SilentProxy.to_database(migrated_postgres_dsn) as proxy:
        cut_off = await PostgresStore.open(proxy.dsn(migrated_postgres_dsn), lease_ttl=TTL)
        try:
            claimer = LeaseKeeper(cut_off.lease_table(), "node-b", TTL)
            proxy.cut_after(b"FOR UPDATE")
            stuck = asyncio.ensure_future(claimer.try_claim(name))
            await until(lambda: proxy.silent, "the cut right after the claim")
            renewed = await store.lease_table().renew("node-a", {name: lease.epoch}, TTL)
            assert renewed == {name}
            fenced = store.fenced(Fence(lease, "node-a", 0.1))
            await fenced.outbox_add(inbox_id, 1, "block", Target("telegram", "11"), "free")
            with pytest.raises(StoreError):
                await stuck
        finally:
            proxy.mend()
            await cut_off.aclose()


def test_the_bounds_derive_from_the_lease_ttl() -> None:
    bounds = SessionBounds(15.0)
    options = bounds.server_options()
    assert "idle_in_transaction_session_timeout=15000" in options
    assert "lock_timeout=1500" in options
    assert "statement_timeout=15000" in options
    assert "tcp_user_timeout=15000" in options
    kwargs = bounds.connect_kwargs("postgresql://u@h/db?options=-c%20search_path%3Dbotd")
    assert kwargs["keepalives"] == 1
    assert kwargs["keepalives_idle"] == 5
    assert str(kwargs["options"]).startswith("-c search_path=botd ")
