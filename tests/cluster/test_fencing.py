"""Fenced writes and sends (``botd.cluster.fencing``) on the PostgreSQL store: the work of a
lease this node no longer holds (its writes made through the store's view fenced by the lease,
its sends checked against its ``RunScope``) writes nothing and sends nothing, but a piece's
sent mark (a fact about the platform) is kept."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.agent.tools.base import ToolContext, ToolOutput
from botd.agent.types import ToolDefinition
from botd.chat import InboundMessage, Target
from botd.cluster.fencing import Fence, LeaseLost, RunScope
from botd.cluster.leases import LeaseKeeper
from botd.conversation import Conversations
from botd.conversation.dispatcher import Dispatcher
from botd.store.postgres import PostgresStore
from tests.conversation.harness import ListSink, inbound, settings
from tests.support.waiting import until

pytestmark = pytest.mark.no_nodes

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
    migrated_postgres_dsn: str,
) -> None:
    node_a = await PostgresStore.open(migrated_postgres_dsn)
    node_b = await PostgresStore.open(migrated_postgres_dsn)
    try:
        keeper_a = LeaseKeeper(node_a.lease_table(), "node-a", 0.5)
        keeper_b = LeaseKeeper(node_b.lease_table(), "node-b", 60)
        lease_a = await keeper_a.try_claim(NAME)
        assert lease_a is not None
        inbox_id = await node_a.accept_inbound("telegram", ["m1"], message(1))
        assert inbox_id is not None
        old = node_a.fenced(Fence(lease_a, "node-a", 0.1))
        written = await _piece(old, inbox_id, "first")
        # node-a pauses past its TTL (no renewal): node-b claims with the next epoch.
        lease_b = await until(lambda: keeper_b.try_claim(NAME), "node-b's claim", guard=30)
        assert lease_b is not None
        assert lease_b.epoch == lease_a.epoch + 1
        with pytest.raises(LeaseLost):
            await _piece(old, inbox_id, "stale")
        assert lease_a.lost.is_set()  # the work under it stops now
        old.finish_inbox([inbox_id], "answered")  # a record: dropped
        old.outbox_sent(written, ["m-1"])  # what the platform shows: kept
        await old.aclose()  # writes what is queued (the store's own queue)
        assert await node_b.inbox_state(inbox_id) == "accepted"
        assert await node_b.outbox_sent_texts([inbox_id]) == ["first"]
        assert await node_b.unconfirmed_pieces() == []
        new = node_b.fenced(Fence(lease_b, "node-b", 0.1))
        await _piece(new, inbox_id, "new owner")
        new.finish_inbox([inbox_id], "answered")
        assert [p.text for p in await node_b.unconfirmed_pieces()] == ["new owner"]
        async with await psycopg.AsyncConnection.connect(migrated_postgres_dsn) as conn:
            cur = await conn.execute("SELECT text, epoch FROM outbox ORDER BY id")
            assert await cur.fetchall() == [("first", 1), ("new owner", 2)]
        assert await node_b.inbox_state(inbox_id) == "answered"
    finally:
        await node_a.aclose()
        await node_b.aclose()


async def test_no_send_starts_past_the_lease_deadline_and_the_lease_is_given_up(
    migrated_postgres_dsn: str,
) -> None:
    store = await PostgresStore.open(migrated_postgres_dsn)
    try:
        keeper = LeaseKeeper(store.lease_table(), "node-a", 60)
        lease = await keeper.try_claim(NAME)
        assert lease is not None
        fence = Fence(lease, "node-a", 1.0)
        scope = RunScope("telegram:42", fence)
        scope.check_send()  # a minute left: sends go
        lease.deadline = time.monotonic() + 0.5  # as a pause would leave it
        with pytest.raises(LeaseLost):
            scope.check_send()
        assert scope.abandoned
        # Given up: not even queued, and the keeper renews it no more.
        with pytest.raises(LeaseLost):
            await _piece(store.fenced(fence), None, "late")
        await keeper.renew_once()
        assert keeper.holding(NAME) is None
        RunScope("telegram:42").check_send()  # unfenced work is not checked
        await _piece(store, None, "unfenced")  # nor are the store's own writes
        assert [p.text for p in await store.unconfirmed_pieces()] == ["unfenced"]
    finally:
        await store.aclose()


class ScopeSeen:
    """A tool that records the scope its run works under (its context's)."""

    def __init__(self) -> None:
        self.spec = ToolDefinition("look", "Looks.", {"type": "object", "properties": {}})
        self.timeout: float | None = None
        self.seen: list[RunScope] = []

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.seen.append(context.scope)
        return ToolOutput("looked")


async def test_a_tool_sees_its_runs_conversation_and_lease_fence(
    migrated_postgres_dsn: str,
) -> None:
    store = await PostgresStore.open(migrated_postgres_dsn)
    tool = ScopeSeen()
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[{"name": "look", "args": {}}])])
    manager = Conversations(store, provider, ListSink(), settings(), tools=lambda m: [tool])
    keeper = LeaseKeeper(store.lease_table(), "node-a", 60)  # several nodes: leases lapse
    dispatcher = Dispatcher(manager, store, keeper)
    try:
        await dispatcher.start()
        message = inbound("look", n=0)
        inbox_id = await store.accept_inbound("console", [message.message_id], message)
        await dispatcher.arrived(replace(message, inbox_id=inbox_id))
        await until(lambda: tool.seen, "the tool's call", guard=30)
        [scope] = tool.seen
        lease = keeper.holding("conversation:console:c1")
        assert lease is not None
        assert scope.conversation == "console:c1"
        assert scope.fence is not None and scope.fence.lease is lease
        assert (scope.fence.holder, scope.fence.epoch) == ("node-a", lease.epoch)
        await asyncio.wait_for(dispatcher.drain(), 30)
    finally:
        await dispatcher.close()
        await manager.close(grace=0)
        await keeper.release_all()
        await store.aclose()
