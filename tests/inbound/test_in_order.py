"""Messages of one conversation reach the inbox in the order the adapter handed them over,
however long the store takes for each; other conversations do not wait."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from botd.inbound.access import AccessPolicy
from botd.inbound.in_order import InOrder
from botd.store import Store
from tests.inbound.routing import Recorder, group, router
from tests.support.waiting import HANG_GUARD


class SlowFirstAccept:
    """The real store, but its first accept (the router's first store call for a prompt in
    a conversation that keeps no chatter) waits for ``release`` (a database round trip that
    happens to take long)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.release = asyncio.Event()
        self.reading = asyncio.Event()
        self._first = True

    async def accept_inbound(self, *args: Any, **kwargs: Any) -> Any:
        if self._first:
            self._first = False
            self.reading.set()
            await self.release.wait()
        return await self._store.accept_inbound(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_slow_first_message_is_still_accepted_first(store: Store) -> None:
    rec = Recorder()
    slow = SlowFirstAccept(store)
    r = router(slow, rec, AccessPolicy(group_policy="open", require_mention=False))
    first = asyncio.create_task(r.handle(group("one", n=1)))
    await asyncio.wait_for(slow.reading.wait(), HANG_GUARD)
    second = asyncio.create_task(r.handle(group("two", n=2)))
    other = await asyncio.wait_for(r.handle(group("elsewhere", chat="g2", n=3)), HANG_GUARD)
    assert other.accepted  # another conversation does not wait behind g1
    await asyncio.sleep(0.05)
    assert not second.done()  # g1's second message waits for its first
    slow.release.set()
    assert (await asyncio.wait_for(first, HANG_GUARD)).accepted
    assert (await asyncio.wait_for(second, HANG_GUARD)).accepted
    assert [m.text for m in rec.submitted] == ["elsewhere", "one", "two"]
    one, two = (m.inbox_id for m in rec.submitted[1:])
    assert one is not None and two is not None and one < two


async def test_turns_are_first_come_first_served_and_forgotten() -> None:
    order = InOrder()
    entered: list[int] = []
    gate = asyncio.Event()

    async def take(n: int) -> None:
        async with order.turn("k"):
            entered.append(n)
            await gate.wait()

    tasks = [asyncio.create_task(take(n)) for n in range(5)]
    await asyncio.sleep(0)
    assert entered == [0] and len(order) == 1
    gate.set()
    await asyncio.wait_for(asyncio.gather(*tasks), HANG_GUARD)
    assert entered == [0, 1, 2, 3, 4]
    assert len(order) == 0  # nobody holds or waits: the key is gone


async def test_a_turn_is_released_when_its_holder_fails() -> None:
    order = InOrder()

    async def fail() -> None:
        async with order.turn("k"):
            raise RuntimeError("boom")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            await fail()
    async with order.turn("k"):
        pass
    assert len(order) == 0
