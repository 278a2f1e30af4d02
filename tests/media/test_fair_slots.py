"""``FairSlots``: freed slots go to the waiting conversations in turn (one not served yet
first), one conversation never holds the last slot, and a waiter that gives up passes its
turn on, also when it was given a slot it never used (no workers: the order is the
slots' alone)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from botd.media.slots import FairSlots
from tests.support.waiting import HANG_GUARD, until


@asynccontextmanager
async def holding(slots: FairSlots, owner: str) -> AsyncIterator[None]:
    """Holds a slot for ``owner`` until the block ends (a worker that does not finish)."""
    release = asyncio.Event()
    granted = asyncio.Event()

    async def hold() -> None:
        async with slots.slot(owner):
            granted.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.wait_for(granted.wait(), HANG_GUARD)
    try:
        yield
    finally:
        release.set()
        await holder


async def served_in(slots: FairSlots, owner: str, served: list[str]) -> None:
    """A job of ``owner`` that notes, once it has its slot, that it was served."""
    async with slots.slot(owner):
        served.append(owner)


async def test_freed_slots_go_to_the_waiting_conversations_in_turn() -> None:
    slots = FairSlots(1)
    served: list[str] = []

    async with holding(slots, "held"):
        # Queued in this order: three of A's, two of B's, then C's one.
        jobs = [asyncio.create_task(served_in(slots, owner, served)) for owner in "AAABBC"]
        await until(lambda: slots.waiting() == 6, "every job to queue")
    await asyncio.wait_for(asyncio.gather(*jobs), HANG_GUARD)
    assert served == ["A", "B", "C", "A", "B", "A"]


async def test_a_conversation_being_served_waits_behind_one_not_served_yet() -> None:
    slots = FairSlots(1)
    served: list[str] = []
    async with holding(slots, "A"):  # A's first file is read
        jobs = [asyncio.create_task(served_in(slots, owner, served)) for owner in "AAB"]
        await until(lambda: slots.waiting() == 3, "every job to queue")
    await asyncio.wait_for(asyncio.gather(*jobs), HANG_GUARD)
    assert served == ["B", "A", "A"]  # B came after A's files, but had no turn yet


async def test_one_conversation_never_holds_the_last_slot() -> None:
    slots = FairSlots(2)
    served: list[str] = []

    async with holding(slots, "A"):
        second = asyncio.create_task(served_in(slots, "A", served))
        await until(lambda: slots.waiting() == 1, "A's second job to wait")
        await asyncio.wait_for(
            served_in(slots, "B", served), HANG_GUARD
        )  # the free slot is B's at once
        assert served == ["B"]
        assert (slots.held("A"), slots.waiting()) == (1, 1)  # A's second still waits
    await asyncio.wait_for(second, HANG_GUARD)  # A's first is done: its second runs
    assert served == ["B", "A"]


async def test_a_waiter_that_gives_up_passes_its_turn() -> None:
    slots = FairSlots(1)
    served: list[str] = []

    async with holding(slots, "held"):
        gone = asyncio.create_task(served_in(slots, "A", served))
        stays = asyncio.create_task(served_in(slots, "B", served))
        await until(lambda: slots.waiting() == 2, "both jobs to queue")
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert slots.waiting() == 1
    await asyncio.wait_for(stays, HANG_GUARD)
    assert served == ["B"]
    async with holding(slots, "C"):  # every slot is free again
        assert slots.held("C") == 1


async def test_a_slot_granted_to_a_waiter_that_gave_up_is_handed_on() -> None:
    slots = FairSlots(1)
    served: list[str] = []
    held = slots.slot("held")
    await held.__aenter__()
    gone = asyncio.create_task(served_in(slots, "A", served))
    stays = asyncio.create_task(served_in(slots, "B", served))
    await until(lambda: slots.waiting() == 2, "both jobs to queue")
    await held.__aexit__(None, None, None)  # the slot is A's now (nothing yields meanwhile)
    assert slots.held("A") == 1
    gone.cancel()  # before A's job ran
    await asyncio.gather(gone, return_exceptions=True)
    await asyncio.wait_for(stays, HANG_GUARD)
    assert served == ["B"]
    assert (slots.held("A"), slots.held("B"), slots.waiting()) == (0, 0, 0)
