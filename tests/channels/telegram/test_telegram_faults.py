"""Telegram under faults: delivery retries what may pass, once, in order, per chat.

Real python-telegram-bot against the loopback fake, which answers 5xx, resets connections,
goes away, or carries a call out and then fails it. Backoff is tiny (or its clock virtual):
tests assert what was delivered, never how long it took.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from botd.channels.telegram.adapter import TelegramAdapter, TelegramAPIError, api_error
from botd.chat import Target
from botd.delivery import ChannelDelivery, DeliveryGivenUp, Retrier, RetrySettings
from botd.delivery.sender import GIVE_UP_NOTICE
from botd.subscriber import BlockReply, PartialReply
from tests.fakes.telegram_api import FakeTelegramAPI, ScriptedError, retry_after, server_error
from tests.support.waiting import HANG_GUARD

TOKEN = "123456:TEST-TOKEN"
DM, GROUP = 777, -100123
QUICK = RetrySettings(budget=30.0, first=0.01, cap=0.05)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI(TOKEN) as api:
        yield api


@pytest.fixture
async def adapter(fake: FakeTelegramAPI) -> AsyncIterator[TelegramAdapter]:
    started = TelegramAdapter(TOKEN, api_base_url=fake.base_url, poll_timeout=1)
    await started.start(_ignore)
    yield started
    await started.stop()


async def _ignore(message: object) -> None:
    return None


def delivery(
    adapter: TelegramAdapter, *, edit: bool = False, retry: RetrySettings = QUICK
) -> ChannelDelivery:
    modes = {"telegram": "edit"} if edit else None
    return ChannelDelivery({"telegram": adapter}, modes, min_edit_interval=0.0, retry=retry)


def partial(text: str) -> PartialReply:
    return PartialReply(text, [], lambda: text)


def statuses(fake: FakeTelegramAPI, method: str) -> list[int]:
    return [call.status for call in fake.calls_to(method)]


async def test_500_502_and_a_reset_then_ok_deliver_once(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    fake.fail_next("sendMessage", server_error(500))
    fake.fail_next("sendMessage", server_error(502))
    fake.reset_next("sendMessage")
    async with asyncio.timeout(HANG_GUARD):
        refs = await delivery(adapter).send_text(Target("telegram", str(DM)), "hello")
    assert len(refs) == 1
    assert statuses(fake, "sendMessage") == [500, 502, 0, 200]
    assert fake.visible(DM) == ["hello"]


async def test_a_refusal_is_not_retried_and_is_reported_in_telegrams_words(
    fake: FakeTelegramAPI, adapter: TelegramAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_next("sendMessage", ScriptedError(403, "Forbidden: bot was blocked by the user"))
    with pytest.raises(TelegramAPIError, match="bot was blocked by the user") as raised:
        await delivery(adapter).send_text(Target("telegram", str(DM)), "hello?")
    assert not raised.value.retryable
    assert statuses(fake, "sendMessage") == [403]
    assert "bot was blocked by the user" in caplog.text


async def test_a_run_keeps_its_order_while_a_piece_is_retried(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    fake.fail_next("sendMessage", server_error(502), times=3)
    output = delivery(adapter).open_run(Target("telegram", str(DM)))
    for text in ("one", "two", "three"):
        output.block(BlockReply(text))
    async with asyncio.timeout(HANG_GUARD):
        await output.close()
    assert fake.visible(DM) == ["one", "two", "three"]


async def test_a_flood_wait_in_one_chat_does_not_delay_another(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    fake.fail_next("sendMessage", retry_after(2))
    sender = delivery(adapter)
    slow = asyncio.create_task(sender.send_text(Target("telegram", str(GROUP)), "to the group"))
    await fake.wait_for_call("sendMessage", 1)  # the group's first attempt got the 429
    async with asyncio.timeout(HANG_GUARD):
        await sender.send_text(Target("telegram", str(DM)), "to the DM")
    assert not slow.done()
    async with asyncio.timeout(HANG_GUARD):
        await slow
    delivered = [c.params["chat_id"] for c in fake.calls_to("sendMessage", ok_only=True)]
    assert delivered == [str(DM), str(GROUP)]


async def test_a_long_outage_is_ridden_out(fake: FakeTelegramAPI, adapter: TelegramAdapter) -> None:
    # Virtual time: each wait the retrier asks for passes at once, and the server comes back
    # once twenty virtual seconds have passed.
    now = [0.0]
    outage = await fake.outage()

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 20 and outage.active:
            await outage.end()
        await asyncio.sleep(0)

    retrier = Retrier(RetrySettings(), clock=lambda: now[0], sleep=sleep)
    sender = ChannelDelivery({"telegram": adapter}, retrier=retrier)
    async with asyncio.timeout(HANG_GUARD):
        await sender.send_text(Target("telegram", str(DM)), "still here")
    assert now[0] >= 20
    assert fake.visible(DM) == ["still here"]
    assert len(fake.calls_to("sendMessage", ok_only=True)) == 1


class VirtualTime:
    """A retrier's clock and sleep: a wait passes at once and moves the clock on."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


async def test_a_spent_budget_gives_up_and_tells_the_chat_once_it_can(
    fake: FakeTelegramAPI, adapter: TelegramAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    time = VirtualTime()
    # The retry budget's clock is virtual, but the chat's own limit (about a send a second)
    # paces the tries in real time: a minute of backoff is a handful of tries.
    budget = 60.0
    real_sleep = time.sleep

    async def sleep(seconds: float) -> None:
        await real_sleep(seconds)
        if time.now >= budget:
            # The last attempt within the budget fails too; the notice after it goes out.
            fake.clear_faults()
            fake.fail_next("sendMessage", server_error(502))

    retrier = Retrier(RetrySettings(budget=budget), clock=time.clock, sleep=sleep)
    sender = ChannelDelivery({"telegram": adapter}, retrier=retrier)
    fake.fail_next("sendMessage", server_error(502), times=1_000_000)
    with pytest.raises(DeliveryGivenUp):
        async with asyncio.timeout(HANG_GUARD):
            await sender.send_text(Target("telegram", str(DM)), "lost")
    assert time.now >= budget  # retried for the whole budget
    assert "given up" in caplog.text
    assert fake.visible(DM) == [GIVE_UP_NOTICE]
    # The chat answered again: the next reply goes through at once.
    await sender.send_text(Target("telegram", str(DM)), "back")
    assert fake.visible(DM) == [GIVE_UP_NOTICE, "back"]


async def test_after_the_budget_is_spent_each_piece_gets_one_attempt(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    time = VirtualTime()
    retrier = Retrier(RetrySettings(budget=60.0), clock=time.clock, sleep=time.sleep)
    sender = ChannelDelivery({"telegram": adapter}, retrier=retrier)
    fake.fail_next("sendMessage", server_error(503), times=1_000_000)
    with pytest.raises(DeliveryGivenUp):
        await sender.send_text(Target("telegram", str(DM)), "one")
    tried = len(fake.calls_to("sendMessage"))
    spent = time.now
    with pytest.raises(DeliveryGivenUp):
        await sender.send_text(Target("telegram", str(DM)), "two")
    # One attempt at "two" and one at the notice (it failed before, so it is tried again).
    assert len(fake.calls_to("sendMessage")) == tried + 2
    assert time.now == spent
    # Another chat has a budget of its own.
    fake.clear_faults()
    await sender.send_text(Target("telegram", str(GROUP)), "elsewhere")
    assert fake.visible(GROUP) == ["elsewhere"]


# --- edit mode: a final edit that fails never shows the answer twice nor loses it --------


async def _preview_then_final(sender: ChannelDelivery, preview: str, final: str) -> None:
    target = Target("telegram", str(DM))
    await sender.preview(target, partial(preview))
    async with asyncio.timeout(HANG_GUARD):
        await sender.deliver(target, BlockReply(final), kind="final")


async def test_a_refused_final_edit_deletes_the_preview_and_posts_the_answer(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    fake.fail_next("editMessageText", ScriptedError(400, "Bad Request: message can't be edited"))
    await _preview_then_final(delivery(adapter, edit=True), "The answer is", "The answer is 42")
    assert fake.visible(DM) == ["The answer is 42"]
    assert statuses(fake, "editMessageText") == [400]  # a refusal is not retried
    assert statuses(fake, "deleteMessage") == [200]


async def test_a_refused_final_edit_whose_preview_cannot_be_deleted_posts_the_answer(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    fake.fail_next("editMessageText", ScriptedError(400, "Bad Request: message can't be edited"))
    fake.fail_next("deleteMessage", ScriptedError(400, "Bad Request: message can't be deleted"))
    await _preview_then_final(delivery(adapter, edit=True), "The answer is", "The answer is 42")
    # The edit certainly did not land: the answer is posted once, beside the stale part.
    assert fake.visible(DM) == ["The answer is", "The answer is 42"]


async def test_a_final_edit_that_landed_before_a_reset_is_shown_once(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    fake.reset_next("editMessageText", land=True)
    await _preview_then_final(delivery(adapter, edit=True), "The answer is", "The answer is 42")
    # The retry finds the text already there ("message is not modified"): nothing more.
    assert fake.visible(DM) == ["The answer is 42"]
    assert statuses(fake, "editMessageText") == [0, 400]
    assert fake.calls_to("deleteMessage") == []


async def test_an_edit_that_may_have_landed_and_cannot_be_deleted_posts_nothing_new(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    fake.reset_next("editMessageText", land=True, times=1_000_000)
    fake.fail_next("deleteMessage", ScriptedError(400, "Bad Request: message can't be deleted"))
    sender = delivery(adapter, edit=True, retry=RetrySettings(budget=0.2, first=0.01, cap=0.05))
    await _preview_then_final(sender, "The answer is", "The answer is 42")
    assert fake.visible(DM) == ["The answer is 42"]
    assert len(fake.calls_to("sendMessage")) == 1  # the preview only


async def test_an_edit_that_may_have_landed_is_replaced_when_the_preview_can_go(
    fake: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    fake.reset_next("editMessageText", land=False, times=1_000_000)
    sender = delivery(adapter, edit=True, retry=RetrySettings(budget=0.2, first=0.01, cap=0.05))
    await _preview_then_final(sender, "The answer is", "The answer is 42")
    assert fake.visible(DM) == ["The answer is 42"]


# --- classification ------------------------------------------------------------------------


async def test_failures_are_classified_by_whether_they_may_pass(
    fake: FakeTelegramAPI, adapter: TelegramAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    target = Target("telegram", str(DM))
    cases: list[tuple[str, bool, bool]] = []
    fake.fail_next("sendMessage", server_error(500))
    fake.reset_next("sendMessage")
    fake.fail_next("sendMessage", ScriptedError(400, "Bad Request: chat not found"))
    for _ in range(3):
        try:
            await adapter.send(target, "x")
        except TelegramAPIError as exc:
            cases.append((exc.description, exc.retryable, exc.maybe_delivered))
    assert cases[0] == ("Internal Server Error", True, False)
    assert cases[1][1:] == (True, True)  # the request went out: it may have landed
    assert cases[2] == ("Chat not found", False, False)


def test_a_429_carries_telegrams_retry_after() -> None:
    from telegram.error import RetryAfter

    error = api_error("sendMessage", RetryAfter(7))
    assert error.retryable and error.retry_after == 7.0


def _caused(error: Exception, cause: BaseException) -> Exception:
    error.__cause__ = cause
    return error


def test_a_timeout_after_sending_may_have_landed_and_one_before_never_did() -> None:
    import httpx
    from telegram.error import NetworkError, TimedOut

    read = api_error("sendMessage", _caused(TimedOut(), httpx.ReadTimeout("read")))
    connect = api_error("sendMessage", _caused(TimedOut(), httpx.ConnectTimeout("connect")))
    refused = api_error(
        "sendMessage", _caused(NetworkError("httpx.ConnectError"), httpx.ConnectError("refused"))
    )
    answered = api_error("sendMessage", NetworkError("Bad Gateway"))
    assert (read.retryable, read.maybe_delivered) == (True, True)
    assert (connect.retryable, connect.maybe_delivered) == (True, False)
    assert (refused.retryable, refused.maybe_delivered) == (True, False)
    assert (answered.retryable, answered.maybe_delivered) == (True, False)
