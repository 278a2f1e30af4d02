"""The platform budget (``botd.channels.budget``): answers first, windows with a reserve for
answers, a reaction behind its chat's held-back answer, stale decorations dropped, a call
withdrawn before its turn costs nothing; and the rate shared through PostgreSQL
(``botd.store.postgres.budget``) spacing every node's slots; Slack's posts paced per channel
(``botd.channels.slack.budget``).

Assertions are on the order calls were let go and on what was counted, never on how long
anything took."""

from __future__ import annotations

import asyncio

from botd.channels.budget import Budget, Priority, Window, waits_for_turn
from botd.channels.slack.budget import CHANNEL, slack_budget, take_turn
from botd.cluster.budget import LocalRate
from botd.store.postgres import PostgresStore
from tests.support.waiting import until

SLOW = Window(1, 0.5)
"""A rate slow enough that calls started together queue for it."""


async def test_answers_go_before_decorations_that_came_first() -> None:
    budget = Budget("test", SLOW, burst=1)
    went: list[str] = []

    async def call(name: str, priority: Priority) -> None:
        if await budget.take(priority):
            went.append(name)

    try:
        await call("first", Priority.ANSWER)  # the rate's slot now; the next is later
        calls = [
            asyncio.create_task(call("typing", Priority.DECORATION)),
            asyncio.create_task(call("status line", Priority.STATUS)),
            asyncio.create_task(call("draft", Priority.PREVIEW)),
            asyncio.create_task(call("answer", Priority.ANSWER)),
        ]
        await asyncio.gather(*calls)
    finally:
        await budget.close()
    assert went == ["first", "answer", "draft", "status line", "typing"]


async def test_a_window_keeps_half_for_answers() -> None:
    budget = Budget("test", Window(100, 1.0))
    group = ("group:-1", Window(2, 60.0))
    try:
        assert await budget.take(Priority.PREVIEW, [group])
        second_preview = asyncio.create_task(budget.take(Priority.PREVIEW, [group]))
        assert await budget.take(Priority.ANSWER, [group])  # the half kept for answers
        await until(lambda: budget.granted[Priority.ANSWER] == 1, "the answer let go")
        assert not second_preview.done()  # the window is full for anything but answers
        second_preview.cancel()
    finally:
        await budget.close()
    assert budget.granted == {Priority.PREVIEW: 1, Priority.ANSWER: 1}


async def test_a_reaction_stays_behind_its_chats_held_back_answer() -> None:
    """A call that follows a chat's window waits while an answer waits for that window, and
    goes once the answer is out of the way; elsewhere it goes at once."""
    budget = Budget("test", Window(100, 1.0))
    group = ("group:-1", Window(1, 60.0))
    try:
        assert await budget.take(Priority.ANSWER, [group])  # the group's window is full now
        held = asyncio.create_task(budget.take(Priority.ANSWER, [group]))
        await until(lambda: waits_for_turn(held), "the second answer held back")
        reaction = asyncio.create_task(budget.take(Priority.DECORATION, follows=[group[0]]))
        await until(lambda: waits_for_turn(reaction), "the reaction waiting")
        assert await budget.take(Priority.DECORATION, follows=["group:-2"])  # another chat's
        assert not reaction.done()  # behind the held answer
        held.cancel()  # the answer withdrawn: nothing of the group waits any more
        assert await reaction
    finally:
        await budget.close()
    assert budget.granted == {Priority.ANSWER: 1, Priority.DECORATION: 2}


async def test_a_stale_decoration_is_dropped() -> None:
    budget = Budget("test", Window(1, 60.0), burst=1)
    try:
        assert await budget.take(Priority.ANSWER)
        assert not await budget.take(Priority.DECORATION, stale_after=0.05)
    finally:
        await budget.close()
    assert budget.dropped == 1
    assert budget.granted == {Priority.ANSWER: 1}


async def test_a_call_withdrawn_before_its_turn_is_never_let_go() -> None:
    budget = Budget("test", Window(1, 60.0), burst=1)
    try:
        assert await budget.take(Priority.ANSWER)
        reaction = asyncio.create_task(budget.take(Priority.DECORATION))
        await until(lambda: waits_for_turn(reaction), "the reaction waiting for its turn")
        reaction.cancel()
        await asyncio.wait({reaction})
        assert not waits_for_turn(reaction)
    finally:
        await budget.close()
    assert reaction.cancelled()
    assert budget.granted == {Priority.ANSWER: 1}


async def test_a_local_rate_spaces_its_slots() -> None:
    now = [100.0]
    rate = LocalRate(lambda: now[0])
    # Idle, a burst of three may go at once: the first slot was free 0.2 s ago.
    assert round(await rate.reserve("bot", 3, 0.1, 0.2), 6) == -0.2
    assert round(await rate.reserve("bot", 1, 0.1, 0.2), 6) == 0.1  # after the three reserved
    assert round(await rate.reserve("other", 1, 0.1, 0.2), 6) == -0.2  # another bot's own rate


async def test_nodes_draw_one_rate_from_postgres(migrated_postgres_dsn: str) -> None:
    """Two nodes' stores on one database: their reservations take turns on one schedule."""
    one, two = (
        await PostgresStore.open(migrated_postgres_dsn),
        await PostgresStore.open(migrated_postgres_dsn),
    )
    try:
        first = await one.shared_rate().reserve("telegram:1", 4, 10.0, 0.0)
        second = await two.shared_rate().reserve("telegram:1", 1, 10.0, 0.0)
        elsewhere = await two.shared_rate().reserve("telegram:2", 1, 10.0, 20.0)
    finally:
        await one.aclose()
        await two.aclose()
    assert first < 1.0  # free at first
    assert 39.0 < second <= 40.0  # after the four slots the other node reserved
    assert -20.0 <= elsewhere < -19.0  # idle: a burst of three may go at once


async def test_slack_posts_are_paced_per_channel_only() -> None:
    budget = slack_budget("test")
    try:
        for _ in range(CHANNEL.count):
            await take_turn(budget, "chat.postMessage", {"channel": "C1"})
        fourth = asyncio.create_task(take_turn(budget, "chat.postMessage", {"channel": "C1"}))
        await take_turn(budget, "chat.postMessage", {"channel": "C2"})  # its own window
        await take_turn(budget, "reactions.add", {"channel": "C1"})  # counts in no window
        assert not fourth.done()  # C1's window is full
        await fourth
    finally:
        await budget.close()
    assert budget.granted == {Priority.ANSWER: CHANNEL.count + 2, Priority.DECORATION: 1}
