"""Slack under faults: the real Web API client against the loopback fake, through delivery.

Backoff is tiny: tests assert what was posted, never how long it took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from botd.channels.slack.adapter import SlackAdapter
from botd.channels.slack.errors import SlackError
from botd.chat import Target
from botd.delivery import ChannelDelivery, RetrySettings
from botd.subscriber import BlockReply, PartialReply
from tests.fakes.slack_api import FakeSlack
from tests.support.waiting import HANG_GUARD

QUICK = RetrySettings(budget=30.0, first=0.01, cap=0.05)
CHANNEL = "C1"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


def sender(fake: FakeSlack, *, edit: bool = False, retry: RetrySettings = QUICK) -> ChannelDelivery:
    adapter = SlackAdapter(bot_token="xoxb-test", app_token="xapp-test", api_base_url=fake.base_url)
    modes = {"slack": "edit"} if edit else None
    return ChannelDelivery({"slack": adapter}, modes, min_edit_interval=0.0, retry=retry)


async def test_5xx_slack_faults_and_a_reset_then_ok_post_once(fake: FakeSlack) -> None:
    fake.fail_next("chat.postMessage", "internal_error", status=500)
    fake.fail_next("chat.postMessage", "service_unavailable", status=503)
    fake.fail_next("chat.postMessage", "fatal_error")  # ok: false on a 200
    fake.reset_next("chat.postMessage")
    async with asyncio.timeout(HANG_GUARD):
        refs = await sender(fake).send_text(Target("slack", CHANNEL), "hello")
    assert len(refs) == 1
    assert len(fake.calls_to("chat.postMessage")) == 5
    assert fake.visible(CHANNEL) == ["hello"]


async def test_a_refusal_is_not_retried_and_keeps_slacks_words(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_next("chat.postMessage", "not_in_channel")
    with pytest.raises(SlackError) as raised:
        await sender(fake).send_text(Target("slack", CHANNEL), "hello?")
    assert raised.value.error == "not_in_channel" and not raised.value.retryable
    assert len(fake.calls_to("chat.postMessage")) == 1
    assert "not_in_channel" in caplog.text


async def test_a_429_past_the_adapters_own_waits_is_retried_by_delivery(fake: FakeSlack) -> None:
    delivery = sender(fake)
    adapter = delivery.adapter_for(Target("slack", CHANNEL))
    assert isinstance(adapter, SlackAdapter)
    waits: list[float] = []

    async def record(delay: float) -> None:
        waits.append(delay)

    adapter.api.sleep = record
    fake.fail_next("chat.postMessage", "ratelimited", status=429, retry_after=0, times=4)
    async with asyncio.timeout(HANG_GUARD):
        await delivery.send_text(Target("slack", CHANNEL), "patience")
    assert fake.visible(CHANNEL) == ["patience"]
    assert len(fake.calls_to("chat.postMessage")) == 5


async def test_a_refused_final_edit_deletes_the_preview_and_posts_the_answer(
    fake: FakeSlack,
) -> None:
    delivery = sender(fake, edit=True)
    target = Target("slack", CHANNEL)
    fake.fail_next("chat.update", "cant_update_message")
    await delivery.preview(target, PartialReply("The answer", [], lambda: "The answer"))
    async with asyncio.timeout(HANG_GUARD):
        await delivery.deliver(target, BlockReply("The answer is 42"), kind="final")
    assert fake.visible(CHANNEL) == ["The answer is 42"]
    assert len(fake.calls_to("chat.update")) == 1
    assert len(fake.calls_to("chat.delete")) == 1


async def test_a_final_edit_that_landed_before_a_reset_is_shown_once(fake: FakeSlack) -> None:
    delivery = sender(fake, edit=True)
    target = Target("slack", CHANNEL)
    fake.reset_next("chat.update", land=True)
    await delivery.preview(target, PartialReply("The answer", [], lambda: "The answer"))
    async with asyncio.timeout(HANG_GUARD):
        await delivery.deliver(target, BlockReply("The answer is 42"), kind="final")
    assert fake.visible(CHANNEL) == ["The answer is 42"]
    assert len(fake.calls_to("chat.update")) == 2  # retried: an edit may be repeated
    assert fake.calls_to("chat.delete") == []


async def test_failures_say_whether_they_may_pass(fake: FakeSlack) -> None:
    adapter = SlackAdapter(bot_token="xoxb-test", app_token="xapp-test", api_base_url=fake.base_url)
    target = Target("slack", CHANNEL)
    fake.fail_next("chat.postMessage", "internal_error", status=502)
    fake.reset_next("chat.postMessage")
    fake.fail_next("chat.postMessage", "channel_not_found")
    seen: list[tuple[bool, bool]] = []
    for _ in range(3):
        with pytest.raises(SlackError) as raised:
            await adapter.send(target, "x")
        seen.append((raised.value.retryable, raised.value.maybe_delivered))
    assert seen == [(True, False), (True, True), (False, False)]


async def test_an_unreachable_slack_is_retryable_and_never_sent(unused_port: int) -> None:
    adapter = SlackAdapter(
        bot_token="xoxb-test",
        app_token="xapp-test",
        api_base_url=f"http://127.0.0.1:{unused_port}/api/",
    )
    with pytest.raises(SlackError, match="cannot reach Slack") as raised:
        await adapter.send(Target("slack", CHANNEL), "x")
    assert raised.value.retryable and not raised.value.maybe_delivered
