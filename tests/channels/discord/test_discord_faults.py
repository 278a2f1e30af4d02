"""Discord under faults: real discord.py against the loopback fake, through delivery.

Backoff is tiny: tests assert what was posted, never how long it took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from botd.channels.discord.adapter import DiscordAdapter, DiscordError
from botd.chat import Target
from botd.delivery import ChannelDelivery, RetrySettings
from botd.subscriber import BlockReply, PartialReply
from tests.fakes.discord_api import CHANNEL_ID, FakeDiscordAPI
from tests.support.waiting import HANG_GUARD

QUICK = RetrySettings(budget=30.0, first=0.01, cap=0.05)
TARGET = Target("discord", str(CHANNEL_ID))


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as server:
        yield server


@pytest.fixture
async def adapter(fake: FakeDiscordAPI) -> AsyncIterator[DiscordAdapter]:
    running = DiscordAdapter(
        "fake-discord-token",
        api_base_url=fake.base_url,
        gateway_url=fake.gateway_url,
        guild_ready_timeout=0.05,
        ready_timeout=HANG_GUARD,
    )
    await asyncio.wait_for(running.start(_ignore), HANG_GUARD)
    yield running
    await asyncio.wait_for(running.stop(), HANG_GUARD)


async def _ignore(message: object) -> None:
    return None


def sender(adapter: DiscordAdapter, *, edit: bool = False) -> ChannelDelivery:
    modes = {"discord": "edit"} if edit else None
    return ChannelDelivery({"discord": adapter}, modes, min_edit_interval=0.0, retry=QUICK)


async def test_a_503_and_a_reset_then_ok_post_once(
    fake: FakeDiscordAPI, adapter: DiscordAdapter
) -> None:
    fake.fail_next("POST", 503)
    fake.reset_next("POST")
    async with asyncio.timeout(HANG_GUARD):
        refs = await sender(adapter).send_text(TARGET, "hello")
    assert len(refs) == 1
    assert len(fake.faulted) == 2
    assert fake.visible(CHANNEL_ID) == ["hello"]


async def test_a_refusal_is_not_retried_and_keeps_discords_words(
    fake: FakeDiscordAPI, adapter: DiscordAdapter
) -> None:
    fake.fail_next("POST", 403, code=50013, message="Missing Permissions")
    with pytest.raises(DiscordError, match="403 Missing Permissions") as raised:
        await sender(adapter).send_text(TARGET, "hi")
    assert not raised.value.retryable
    assert len(fake.faulted) == 1 and fake.visible(CHANNEL_ID) == []


async def test_a_refused_final_edit_deletes_the_preview_and_posts_the_answer(
    fake: FakeDiscordAPI, adapter: DiscordAdapter
) -> None:
    delivery = sender(adapter, edit=True)
    fake.fail_next("PATCH", 403, code=50005, message="Cannot edit a message authored by another")
    await delivery.preview(TARGET, PartialReply("The answer", [], lambda: "The answer"))
    async with asyncio.timeout(HANG_GUARD):
        await delivery.deliver(TARGET, BlockReply("The answer is 42"), kind="final")
    assert fake.visible(CHANNEL_ID) == ["The answer is 42"]
    assert [r.method for r in fake.requests if r.method == "DELETE"] == ["DELETE"]


async def test_a_final_edit_that_landed_before_a_reset_is_shown_once(
    fake: FakeDiscordAPI, adapter: DiscordAdapter
) -> None:
    delivery = sender(adapter, edit=True)
    fake.reset_next("PATCH", land=True)
    await delivery.preview(TARGET, PartialReply("The answer", [], lambda: "The answer"))
    async with asyncio.timeout(HANG_GUARD):
        await delivery.deliver(TARGET, BlockReply("The answer is 42"), kind="final")
    assert fake.visible(CHANNEL_ID) == ["The answer is 42"]
    assert not [r for r in fake.requests if r.method == "DELETE"]


async def test_a_refused_edit_whose_preview_cannot_be_deleted_posts_the_answer_once(
    fake: FakeDiscordAPI, adapter: DiscordAdapter
) -> None:
    delivery = sender(adapter, edit=True)
    fake.fail_next("PATCH", 403, code=50005, message="Cannot edit a message authored by another")
    fake.fail_next("DELETE", 403, code=50013, message="Missing Permissions")
    await delivery.preview(TARGET, PartialReply("The answer", [], lambda: "The answer"))
    async with asyncio.timeout(HANG_GUARD):
        await delivery.deliver(TARGET, BlockReply("The answer is 42"), kind="final")
    assert fake.visible(CHANNEL_ID) == ["The answer", "The answer is 42"]
