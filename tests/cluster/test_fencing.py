"""Fenced writes and sends (``botd.cluster.fencing``) on the PostgreSQL store: the work of a
lease this node no longer holds writes nothing and sends nothing, but a piece's sent mark
(a fact about the platform) is kept."""

from __future__ import annotations

import time

import psycopg
import pytest

from botd.chat import InboundMessage, Target
from botd.cluster import fencing
from botd.cluster.fencing import Fence, LeaseLost
from botd.cluster.leases import LeaseKeeper
from botd.store.postgres import PostgresStore
from tests.waiting import until

NAME = "conversation:telegram:42"
TARGET = Target("telegram", "42")


def message(n: int) -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id="42",
        sender_id="u1",
        text=f"m{n}",
        message_id=str(n),
        conversation_key="telegram:42",
    )


async def _piece(store: PostgresStore, anchor: int | None, text: str) -> int:
    return await store.outbox_add(anchor, 1, "block", TARGET, text)


async def test_a_stale_epochs_writes_are_refused_and_its_sent_marks_kept(
    postgres_dsn: str,
) -> None:
    node_a = await PostgresStore.open(postgres_dsn)
    node_b = await PostgresStore.open(postgres_dsn)
    try:
        keeper_a = LeaseKeeper(node_a.lease_table(), "node-a", 0.5)
        keeper_b = LeaseKeeper(node_b.lease_table(), "node-b", 60)
        lease_a = await keeper_a.try_claim(NAME)
        assert lease_a is not None
        inbox_id = await node_a.accept_inbound("telegram", ["m1"], message(1))
        assert inbox_id is not None
        old = Fence(lease_a, "node-a", 0.1)
        with fencing.fenced(old):
            written = await _piece(node_a, inbox_id, "first")
        # node-a pauses past its TTL (no renewal): node-b claims with the next epoch.
        lease_b = await until(lambda: keeper_b.try_claim(NAME), "node-b's claim", guard=30)
        assert lease_b is not None
        assert lease_b.epoch == lease_a.epoch + 1
        with fencing.fenced(old):
            with pytest.raises(LeaseLost):
                await _piece(node_a, inbox_id, "stale")
            assert lease_a.lost.is_set()  # the work under it stops now
            node_a.finish_inbox([inbox_id], "answered")  # a record: dropped
            node_a.outbox_sent(written, ["m-1"])  # what the platform shows: kept
            await node_a.aclose()  # writes what is queued
        assert await node_b.inbox_state(inbox_id) == "accepted"
        assert await node_b.outbox_sent_texts([inbox_id]) == ["first"]
        assert await node_b.unconfirmed_pieces() == []
        with fencing.fenced(Fence(lease_b, "node-b", 0.1)):
            await _piece(node_b, inbox_id, "new owner")
            node_b.finish_inbox([inbox_id], "answered")
        assert [p.text for p in await node_b.unconfirmed_pieces()] == ["new owner"]
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            cur = await conn.execute("SELECT text, epoch FROM outbox ORDER BY id")
            assert await cur.fetchall() == [("first", 1), ("new owner", 2)]
        assert await node_b.inbox_state(inbox_id) == "answered"
    finally:
        await node_a.aclose()
        await node_b.aclose()


async def test_no_send_starts_past_the_lease_deadline_and_the_lease_is_given_up(
    postgres_dsn: str,
) -> None:
    store = await PostgresStore.open(postgres_dsn)
    try:
        keeper = LeaseKeeper(store.lease_table(), "node-a", 60)
        lease = await keeper.try_claim(NAME)
        assert lease is not None
        fence = Fence(lease, "node-a", 1.0)
        with fencing.fenced(fence):
            fencing.check_send()  # a minute left: sends go
            lease.deadline = time.monotonic() + 0.5  # as a pause would leave it
            with pytest.raises(LeaseLost):
                fencing.check_send()
            assert fencing.abandoned()
            # Given up: not even queued, and the keeper renews it no more.
            with pytest.raises(LeaseLost):
                await _piece(store, None, "late")
        await keeper.renew_once()
        assert keeper.holding(NAME) is None
        fencing.check_send()  # unfenced work is not checked
        assert await store.unconfirmed_pieces() == []
    finally:
        await store.aclose()
