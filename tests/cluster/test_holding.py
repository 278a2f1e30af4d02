"""``hold_lease``: work run only while this node holds its lease, over the one-process lease
table shared by two keepers (two nodes) on a clock the test moves. Its retries wait a real
third of a short TTL; expiry is the test clock's."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from botd.cluster.holding import first_to_hand_over, hold_lease
from botd.cluster.leases import Lease, LeaseKeeper, ProcessLeases
from tests.support.waiting import until

pytestmark = pytest.mark.no_nodes

TTL = 0.3
NAME = "thing:main"


@dataclass
class ManualClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


class CountedClaims(ProcessLeases):
    """The one-process table, counting each holder's claims."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.claims: dict[str, int] = {}

    async def claim(self, name: str, holder: str, ttl: float) -> int | None:
        self.claims[holder] = self.claims.get(holder, 0) + 1
        return await super().claim(name, holder, ttl)


class Worker:
    """The work: marks itself running until cancelled."""

    def __init__(self) -> None:
        self.running: Lease | None = None
        self.runs = 0

    async def __call__(self, lease: Lease) -> None:
        self.running, self.runs = lease, self.runs + 1
        try:
            await asyncio.Future()
        finally:
            self.running = None


async def test_one_node_works_the_other_stands_by_until_the_lease_is_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="botd.cluster.holding")
    clock = ManualClock()
    table = CountedClaims(clock)
    a, b = (LeaseKeeper(table, node, TTL, clock=clock) for node in ("node-a", "node-b"))
    work_a, work_b = Worker(), Worker()
    holding_a = asyncio.create_task(hold_lease(a, NAME, "worker", work_a))
    await until(lambda: work_a.running, "node-a working")
    holding_b = asyncio.create_task(hold_lease(b, NAME, "worker", work_b))
    try:
        await until(lambda: table.claims.get("node-b", 0) >= 4, "node-b retrying its claim")
        assert work_b.runs == 0
        standby = [r.message for r in caplog.records if "standby" in r.message]
        assert standby == [f"{NAME} worker: standby (held by node-a)"]  # once, not per retry

        clock.now += TTL  # node-a paused past its lease: its renewal finds it expired
        await a.renew_once()
        await until(lambda: work_a.running is None, "node-a's work cancelled")
        await until(lambda: work_b.running, "node-b working")
        assert work_b.running is not None and work_b.running.epoch == 2
        assert f"{NAME} worker: lost (epoch 1), stopped; standby" in caplog.messages
        await until(
            lambda: f"{NAME} worker: standby (held by node-b)" in caplog.messages,
            "node-a standing by",
        )
        assert work_a.runs == 1
    finally:
        for task in (holding_a, holding_b):
            task.cancel()
        await asyncio.wait({holding_a, holding_b})


async def test_ending_the_holding_stops_the_work_and_frees_the_lease_at_once() -> None:
    clock = ManualClock()
    table = CountedClaims(clock)
    a, b = (LeaseKeeper(table, node, TTL, clock=clock) for node in ("node-a", "node-b"))
    work = Worker()
    holding = asyncio.create_task(hold_lease(a, NAME, "worker", work))
    await until(lambda: work.running, "node-a working")
    holding.cancel()
    await asyncio.wait({holding})
    assert work.running is None and a.holding(NAME) is None
    lease = await b.try_claim(NAME)  # no waiting for the TTL (the clock did not move)
    assert lease is not None and lease.epoch == 2


INPUTS = ("input:1", "input:2")


async def _up(keeper: LeaseKeeper) -> None:
    """``keeper``'s node up: its own lease held, as ``botd run`` holds it."""
    assert await keeper.try_claim(f"node:{keeper.node_id}") is not None


def _holders(keepers: tuple[LeaseKeeper, ...]) -> dict[str, str]:
    return {name: k.node_id for k in keepers for name in k.inputs_held()}


async def test_nodes_started_together_split_the_inputs() -> None:
    clock = ManualClock()
    table = CountedClaims(clock)
    keepers = tuple(LeaseKeeper(table, node, TTL, clock=clock) for node in ("node-a", "node-b"))
    for keeper in keepers:
        await _up(keeper)
    tasks = [
        asyncio.create_task(hold_lease(keeper, name, "worker", Worker()))
        for keeper in keepers
        for name in INPUTS
    ]
    try:
        await until(lambda: len(_holders(keepers)) == 2, "both inputs held")
        assert sorted(_holders(keepers).values()) == ["node-a", "node-b"]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)


async def test_a_node_that_took_everything_hands_one_input_to_a_node_that_joins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="botd.cluster.holding")
    clock = ManualClock()
    table = CountedClaims(clock)
    a, b = (LeaseKeeper(table, node, TTL, clock=clock) for node in ("node-a", "node-b"))
    await _up(a)
    work = {name: Worker() for name in INPUTS}
    tasks = [asyncio.create_task(hold_lease(a, name, "worker", work[name])) for name in INPUTS]
    try:
        await until(lambda: list(a.inputs_held()) == list(INPUTS), "node-a alone holding both")
        await _up(b)
        tasks += [asyncio.create_task(hold_lease(b, n, "worker", Worker())) for n in INPUTS]
        await until(lambda: list(b.inputs_held()) == ["input:2"], "node-b given the last input")
        assert list(a.inputs_held()) == ["input:1"]
        assert work["input:1"].runs == 1  # the other input was never interrupted
        assert "input:2 worker: handed over to spread the inputs over 2 nodes; standby" in (
            caplog.messages
        )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)


async def test_an_input_no_other_node_takes_comes_back_and_stays() -> None:
    """node-b is up but runs no such input (another config): what node-a hands over it
    claims back, and keeps."""
    clock = ManualClock()
    table = CountedClaims(clock)
    a, b = (LeaseKeeper(table, node, TTL, clock=clock) for node in ("node-a", "node-b"))
    await _up(a)
    work = {name: Worker() for name in INPUTS}
    tasks = [asyncio.create_task(hold_lease(a, name, "worker", work[name])) for name in INPUTS]
    try:
        await until(lambda: list(a.inputs_held()) == list(INPUTS), "node-a holding both")
        await _up(b)
        await until(lambda: work["input:2"].runs == 2, "handed over, then claimed back")
        assert list(a.inputs_held()) == list(INPUTS) and not b.inputs_held()
        assert table.claims["node-b"] == 1  # its own node lease, nothing else
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)


def test_a_node_over_its_share_hands_over_from_the_kind_of_work_it_holds_most_of() -> None:
    both = {"discord:default:0": "gateway", "guild:default:0": "gateway"}
    pollers = {"support:default": "poller", "telegram:default": "poller"}
    assert first_to_hand_over({**both, **pollers}) == "telegram:default"
    assert first_to_hand_over({**both, "support:default": "poller"}) == "guild:default:0"
    assert first_to_hand_over({}) is None
