"""The scheduler on several nodes sharing one PostgreSQL: the holder of the lease ``scheduler``
runs the schedule, another takes over when it dies, and a run fires once even when two nodes
both believe they run it.

Each node is a ``PostgresStore`` of its own (its own pool) with its own ``LeaseKeeper``
renewing in the background, as ``botd run`` wires them; the jobs' prompts are collected where
the sessions would take them. Which runs fired is read from the runs' dedupe keys
(``job:<id>:<run time>``) and from the inbox the fires accepted into.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from botd.chat import InboundMessage, Target
from botd.cluster.leases import LeaseKeeper, LeaseTable, ProcessLeases
from botd.scheduler import LEASE, Scheduler
from botd.store.postgres import PostgresStore
from tests.support.waiting import until

TARGET = Target("telegram", "100")
TTL = 2.0
EVERY = 2.0
"""Seconds between two runs of the test's job: long enough that a busy machine does not
wake up past two of them at once (which coalesces them, by design)."""


@dataclass(eq=False)
class Node:
    name: str
    store: PostgresStore
    keeper: LeaseKeeper
    scheduler: Scheduler
    renewals: asyncio.Task[None]
    prompts: list[InboundMessage] = field(default_factory=list)
    dead: bool = False

    async def dies(self) -> None:
        """Stop as a killed process does: nothing released, its lease runs out by itself."""
        self.dead = True
        await self.scheduler.close()
        self.renewals.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.renewals
        await self.store.aclose()

    def fired(self) -> list[str]:
        return [m.message_id for m in self.prompts]


class Cluster:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.nodes: list[Node] = []

    async def node(self, name: str, table: LeaseTable | None = None) -> Node:
        """A node running the scheduler on the shared database; ``table``: the lease table
        it claims from (default: the database's)."""
        store = await PostgresStore.open(self.dsn)
        keeper = LeaseKeeper(store.lease_table() if table is None else table, name, TTL)
        prompts: list[InboundMessage] = []

        async def submit(message: InboundMessage) -> None:
            prompts.append(message)

        scheduler = Scheduler(store, submit, leases=keeper)
        renewals = asyncio.create_task(keeper.run())
        node = Node(name, store, keeper, scheduler, renewals, prompts)
        self.nodes.append(node)
        await scheduler.start()
        return node

    def fired(self) -> list[str]:
        return [key for node in self.nodes for key in node.fired()]

    async def accepted(self) -> list[str]:
        """The message ids of the prompts in the inbox (no session answers them here)."""
        store = await PostgresStore.open(self.dsn)
        try:
            return [entry.message.message_id for entry in await store.unfinished_entries()]
        finally:
            await store.aclose()


@pytest.fixture
async def cluster(migrated_postgres_dsn: str) -> AsyncIterator[Cluster]:
    nodes = Cluster(migrated_postgres_dsn)
    try:
        yield nodes
    finally:
        for node in nodes.nodes:
            if not node.dead:
                await node.dies()


def run_times(keys: list[str]) -> list[datetime]:
    """The run times named by ``job:tick:<time>`` keys, in order."""
    return sorted(datetime.fromisoformat(key.removeprefix("job:tick:")) for key in keys)


def consecutive(times: list[datetime]) -> bool:
    return all(b - a == timedelta(seconds=EVERY) for a, b in pairwise(times))


async def add_tick(node: Node) -> None:
    await node.scheduler.add_every(
        "tick",
        EVERY,
        prompt="tick",
        target=TARGET,
        first_run=datetime.now(UTC) + timedelta(seconds=1),
    )


async def test_two_nodes_fire_each_run_once_none_missed(cluster: Cluster) -> None:
    first = await cluster.node("a")
    await until(lambda: first.scheduler.leading, "node a to run the schedule")
    second = await cluster.node("b")
    await add_tick(second)  # added on the standby: the leader takes it from the table
    await until(lambda: len(cluster.fired()) >= 4, "four runs of the job")

    assert not second.scheduler.leading and second.prompts == []
    keys = cluster.fired()
    assert len(set(keys)) == len(keys)  # none twice
    assert consecutive(run_times(keys))  # none missed
    assert set(await cluster.accepted()) >= set(keys)
    assert len(await cluster.accepted()) == len(set(await cluster.accepted()))


async def test_when_the_leader_dies_another_node_takes_over_and_fires_the_next_runs(
    cluster: Cluster,
) -> None:
    first = await cluster.node("a")
    await until(lambda: first.scheduler.leading, "node a to run the schedule")
    second = await cluster.node("b")
    await add_tick(first)
    await until(lambda: len(first.prompts) >= 2, "two runs on node a")
    await first.dies()
    last_on_first = run_times(first.fired())[-1]

    await until(lambda: second.scheduler.leading, "node b to claim the lease")
    assert second.keeper.holding(LEASE) is not None
    await until(lambda: len(second.prompts) >= 2, "two runs on node b")

    keys = cluster.fired()
    assert len(set(keys)) == len(keys)  # no run fired by both
    taken_over = run_times(second.fired())
    assert taken_over[0] > last_on_first  # b goes on after a's last run, repeating none
    # The runs missed while nobody held the lease became one run (coalesced), then b keeps
    # the schedule: every run after that one fires.
    assert consecutive(taken_over)
    assert sorted(await cluster.accepted()) == sorted(keys)


async def test_two_nodes_that_both_believe_they_lead_still_fire_each_run_once(
    cluster: Cluster,
) -> None:
    first = await cluster.node("a")
    # b claims from a table of its own: it holds "scheduler" too, as a node cut off from
    # the others (or paused past its lease) may still believe it does.
    second = await cluster.node("b", ProcessLeases())
    await until(lambda: first.scheduler.leading and second.scheduler.leading, "both leading")
    await add_tick(first)
    await until(lambda: len(cluster.fired()) >= 4, "four runs of the job")

    keys = cluster.fired()
    assert len(set(keys)) == len(keys)  # each run fired by one of them
    accepted = await cluster.accepted()
    assert sorted(accepted) == sorted(keys)  # one inbox entry per run
    assert consecutive(run_times(keys))


async def test_a_node_whose_lease_lapsed_stops_running_the_schedule(cluster: Cluster) -> None:
    first = await cluster.node("a")
    await until(lambda: first.scheduler.leading, "node a to run the schedule")
    second = await cluster.node("b")
    await add_tick(first)
    await until(lambda: len(first.prompts) >= 1, "a run on node a")
    # a stops renewing (as a paused process does) past its TTL: b claims the lease.
    first.renewals.cancel()
    await until(lambda: second.scheduler.leading, "node b to claim the lease")
    # a wakes up: its renewal finds the lease gone, and its schedule stops at once.
    await first.keeper.renew_once()
    await until(lambda: not first.scheduler.leading, "node a's schedule paused")
    await until(lambda: len(second.prompts) >= 2, "two runs on node b")
    keys = cluster.fired()
    assert len(set(keys)) == len(keys)
    assert sorted(await cluster.accepted()) == sorted(keys)


async def test_a_job_cancelled_on_a_standby_is_dropped_by_the_leader(cluster: Cluster) -> None:
    first = await cluster.node("a")
    await until(lambda: first.scheduler.leading, "node a to run the schedule")
    second = await cluster.node("b")
    await add_tick(first)
    await until(lambda: len(first.prompts) >= 1, "a run on node a")
    assert await second.scheduler.cancel("tick")
    # The leader's next reload of the table (or its next run's fire, finding the job gone)
    # takes it off the schedule.
    await until(lambda: first.scheduler._aps.get_job("tick") is None, "the leader to drop it")
    assert await first.scheduler.list_jobs() == []
    keys = cluster.fired()
    assert sorted(await cluster.accepted()) == sorted(keys)
