"""The one door on a node alone: every message accepted into the real SQLite inbox reaches its
conversation through the dispatcher, over the in-process lease table (``LeaseKeeper.alone``).

The algorithm is the cluster's (``tests/cluster`` runs it across nodes on PostgreSQL); what a
node alone adds is checked here: what an earlier process left goes before what arrives now
whatever the timing, an arrival the dispatcher did not hear is found by a poll, and its leases
neither lapse nor fence nor let an idle conversation go.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.agent.tools.base import ToolContext, ToolOutput
from botd.agent.types import ToolDefinition
from botd.chat import InboundMessage
from botd.cluster.fencing import RunScope
from botd.cluster.leases import LeaseKeeper
from botd.conversation import Conversations
from botd.conversation.dispatcher import Dispatcher
from botd.ops.node import NodeHealth
from botd.store.sqlite import SqliteStore
from tests.conversation.harness import (
    ListSink,
    RecordingProvider,
    dispatching,
    inbound,
    settings,
)

GUARD = 30.0


@pytest.fixture
def state(tmp_path: Path) -> Iterator[SqliteStore]:
    with SqliteStore.open(tmp_path / "state") as store:
        yield store


async def accept(store: SqliteStore, text: str, n: int) -> InboundMessage:
    message = inbound(text, n=n)
    inbox_id = await store.accept_inbound("console", [message.message_id], message)
    assert inbox_id is not None
    return replace(message, inbox_id=inbox_id)


def states(store: SqliteStore) -> list[str]:
    return [e.state for e in store.unfinished_inbox()]


async def test_what_an_earlier_process_left_goes_before_what_arrives_at_start(
    state: SqliteStore,
) -> None:
    # Left by the last process, then two messages that arrive while this one starts: before
    # its dispatcher listens (nobody hears of it) and right as it starts.
    await accept(state, "left over", 0)
    recording = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    manager = Conversations(state, recording, sink, settings(queue_mode="followup"))
    dispatcher = Dispatcher(manager, state, LeaseKeeper.alone("node"))
    await dispatcher.arrived(await accept(state, "while starting", 1))
    try:
        await dispatcher.start()
        await dispatcher.arrived(await accept(state, "just now", 2))
        await asyncio.wait_for(dispatcher.drain(), GUARD)
    finally:
        await dispatcher.close()
        await manager.close(grace=0)
    assert sink.texts("c1") == [
        "You said: left over",
        "You said: while starting",
        "You said: just now",
    ]
    assert states(state) == []


async def test_messages_of_a_conversation_reach_it_in_accept_order(state: SqliteStore) -> None:
    sink = ListSink()
    manager = Conversations(state, ScriptedProvider(delay=0.001), sink, settings())
    async with dispatching(manager, state) as dispatcher:
        # Accepted one after the other, told all at once: the first claims the conversation
        # while the others arrive.
        accepted = [await accept(state, f"m{n}", n) for n in range(5)]
        await asyncio.gather(*(dispatcher.arrived(m) for m in reversed(accepted)))
        await asyncio.wait_for(dispatcher.drain(), GUARD)
        assert dispatcher.held() == ["console:c1"]
    await manager.close(grace=0)
    said = " ".join(sink.texts("c1"))
    assert [said.index(f"m{n}") for n in range(5)] == sorted(said.index(f"m{n}") for n in range(5))
    assert states(state) == []


async def test_an_arrival_told_before_an_earlier_ones_is_handed_after_it(
    state: SqliteStore,
) -> None:
    sink = ListSink()
    manager = Conversations(state, ScriptedProvider(), sink, settings(queue_mode="followup"))
    async with dispatching(manager, state) as dispatcher:
        await dispatcher.arrived(await accept(state, "first", 0))
        await asyncio.wait_for(dispatcher.drain(), GUARD)
        # Two more accepted, the later one told first: its pull finds the earlier one
        # waiting too, and hands both over in accept order.
        second, third = await accept(state, "second", 1), await accept(state, "third", 2)
        await dispatcher.arrived(third)
        await dispatcher.arrived(second)
        await asyncio.wait_for(dispatcher.drain(), GUARD)
    await manager.close(grace=0)
    assert sink.texts("c1") == ["You said: first", "You said: second", "You said: third"]


async def test_an_arrival_nobody_heard_is_found_by_the_poll(state: SqliteStore) -> None:
    sink = ListSink()
    manager = Conversations(state, ScriptedProvider(), sink, settings())
    async with dispatching(manager, state) as dispatcher:
        await asyncio.wait_for(dispatcher.drain(), GUARD)  # claims nothing: nothing waits
        await accept(state, "never told", 0)  # accepted, its arrival lost
        await dispatcher.poll_once()
        await asyncio.wait_for(dispatcher.drain(), GUARD)
    await manager.close(grace=0)
    assert sink.texts("c1") == ["You said: never told"]


class ScopeSeen:
    """A tool that records the scope its run works under (its context's)."""

    def __init__(self) -> None:
        self.spec = ToolDefinition("look", "Looks.", {"type": "object", "properties": {}})
        self.timeout: float | None = None
        self.seen: list[RunScope] = []

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.seen.append(context.scope)
        return ToolOutput("looked")


async def test_a_node_alone_holds_its_conversations_unfenced_for_good(state: SqliteStore) -> None:
    tool = ScopeSeen()
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[{"name": "look", "args": {}}])])
    manager = Conversations(state, provider, ListSink(), settings(), tools=lambda m: [tool])
    leases = LeaseKeeper.alone("node")
    dispatcher = Dispatcher(manager, state, leases)
    try:
        await dispatcher.start()
        await dispatcher.arrived(await accept(state, "look", 0))
        await asyncio.wait_for(dispatcher.drain(), GUARD)
        # Nothing to fence against: no other node.
        assert tool.seen == [RunScope("console:c1", None)]
        lease = leases.holding("conversation:console:c1")
        assert lease is not None and lease.valid_for(time.monotonic() + 1e9) == math.inf  # ever
        await asyncio.wait_for(leases.run(), GUARD)  # nothing to renew: returns at once
        for _ in range(3):
            await dispatcher.poll_once()
        # Idle, yet held and in memory: no other node could take it.
        assert dispatcher.held() == ["console:c1"]
        assert "console:c1" in manager.conversations
        # Nor does /healthz list such leases: they say nothing of the node's health.
        assert NodeHealth("node", "sqlite", state, leases).view()["leases"] == []
    finally:
        await dispatcher.close()
        await manager.close(grace=0)
