"""Delivery retries: per conversation, in order, within a budget, never across chats.

The adapter here is a scripted stand-in (the platform tests in tests/channels run the real
SDKs); time is virtual where a budget matters, so nothing waits for real.
"""

from __future__ import annotations

import asyncio

import pytest

from botd.channels.base import InboundSink, SendScope
from botd.channels.errors import ChannelError
from botd.chat import Capabilities, MessageRef, Target
from botd.delivery import ChannelDelivery, DeliveryGivenUp, Retrier, RetrySettings
from botd.delivery.sender import GIVE_UP_NOTICE
from botd.subscriber import BlockReply
from botd.text.markup import PLAIN
from tests.support.waiting import HANG_GUARD

A, B = Target("chat", "a"), Target("chat", "b")


class ScriptedAdapter:
    """Fails sends as told (per chat, in order), posts the rest."""

    name = "chat"
    capabilities = Capabilities(text_limit=50, markup=PLAIN)

    def __init__(self) -> None:
        self.failures: dict[str, list[ChannelError]] = {}
        self.attempts: list[tuple[str, str]] = []
        self.posted: list[tuple[str, str]] = []
        self.gates: dict[str, asyncio.Event] = {}

    def fail(self, chat: str, *errors: ChannelError) -> None:
        self.failures.setdefault(chat, []).extend(errors)

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        self.attempts.append((target.chat_id, markdown))
        gate = self.gates.get(target.chat_id)
        if gate is not None:
            await gate.wait()
        pending = self.failures.get(target.chat_id)
        if pending:
            raise pending.pop(0)
        self.posted.append((target.chat_id, markdown))
        return [MessageRef(target, str(len(self.posted)))]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        return [ref]

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        return None

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None


def transient(retry_after: float | None = None) -> ChannelError:
    return ChannelError("503 Service Unavailable", retryable=True, retry_after=retry_after)


class VirtualTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def delivery(adapter: ScriptedAdapter, time: VirtualTime, budget: float = 300.0) -> ChannelDelivery:
    retrier = Retrier(RetrySettings(budget=budget), clock=time.clock, sleep=time.sleep)
    return ChannelDelivery({"chat": adapter}, retrier=retrier)


async def test_a_transient_failure_is_retried_and_delivered_once() -> None:
    adapter, time = ScriptedAdapter(), VirtualTime()
    adapter.fail("a", transient(), transient(), transient())
    await delivery(adapter, time).send_text(A, "hello")
    assert adapter.posted == [("a", "hello")]
    assert len(adapter.attempts) == 4


async def test_the_platforms_retry_after_is_respected() -> None:
    adapter, time = ScriptedAdapter(), VirtualTime()
    adapter.fail("a", transient(retry_after=7.0))
    await delivery(adapter, time).send_text(A, "hello")
    assert time.waits == [7.0]


async def test_a_refusal_is_raised_at_once() -> None:
    adapter, time = ScriptedAdapter(), VirtualTime()
    adapter.fail("a", ChannelError("400 Bad Request: chat not found"))
    with pytest.raises(ChannelError, match="chat not found"):
        await delivery(adapter, time).send_text(A, "hello")
    assert len(adapter.attempts) == 1 and time.waits == []


async def test_the_budget_is_at_least_what_is_configured_then_the_chat_is_told() -> None:
    adapter, time = ScriptedAdapter(), VirtualTime()
    adapter.fail("a", *[transient() for _ in range(100)])
    sender = delivery(adapter, time, budget=300.0)
    with pytest.raises(DeliveryGivenUp):
        await sender.send_text(A, "hello")
    assert time.now >= 300.0
    # The notice was tried once (and failed: the chat is still down); the next give-up of
    # the same outage tries it again, and this time the chat answers.
    adapter.failures["a"] = [transient()]
    with pytest.raises(DeliveryGivenUp):
        await sender.send_text(A, "again")
    assert adapter.posted == [("a", GIVE_UP_NOTICE)]


async def test_a_long_text_is_sent_message_by_message_and_no_part_twice() -> None:
    adapter, time = ScriptedAdapter(), VirtualTime()
    text = "\n\n".join(f"Paragraph {n} is here." for n in range(6))
    sender = delivery(adapter, time)

    original = adapter.send
    calls = 0

    async def second_part_fails_once(
        target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise transient()
        return await original(target, markdown, scope=scope)

    adapter.send = second_part_fails_once  # type: ignore[method-assign]
    refs = await sender.send_text(A, text)
    posted = [markdown for _, markdown in adapter.posted]
    assert len(posted) > 1 and len(refs) == len(posted)
    assert all(len(part) <= 50 for part in posted)
    assert " ".join(posted).split() == text.split()  # every word once, in order


async def test_a_run_keeps_order_behind_a_retried_piece() -> None:
    adapter, time = ScriptedAdapter(), VirtualTime()
    adapter.fail("a", transient(), transient())
    output = delivery(adapter, time).open_run(A)
    for text in ("one", "two", "three"):
        output.block(BlockReply(text))
    async with asyncio.timeout(HANG_GUARD):
        await output.close()
    assert adapter.posted == [("a", "one"), ("a", "two"), ("a", "three")]


async def test_one_chat_retrying_does_not_hold_up_another() -> None:
    adapter = ScriptedAdapter()
    # Real time, but chat a's retry waits on a gate the test opens only at the end.
    waiting = asyncio.Event()
    release = asyncio.Event()

    async def sleep(seconds: float) -> None:
        waiting.set()
        await release.wait()

    retrier = Retrier(RetrySettings(budget=300.0), sleep=sleep)
    sender = ChannelDelivery({"chat": adapter}, retrier=retrier)
    adapter.fail("a", transient(retry_after=60.0))
    slow = sender.open_run(A)
    slow.block(BlockReply("for a"))
    async with asyncio.timeout(HANG_GUARD):
        await waiting.wait()
        fast = sender.open_run(B)
        fast.block(BlockReply("for b"))
        await fast.close()
        assert adapter.posted == [("b", "for b")]
        release.set()
        await slow.close()
    assert adapter.posted == [("b", "for b"), ("a", "for a")]


async def test_retry_settings_are_per_channel() -> None:
    adapter, time = ScriptedAdapter(), VirtualTime()
    retrier = Retrier(clock=time.clock, sleep=time.sleep)
    sender = ChannelDelivery(
        {"chat": adapter}, retry={"chat": RetrySettings(budget=0.0)}, retrier=retrier
    )
    adapter.fail("a", transient(), transient())
    with pytest.raises(DeliveryGivenUp):
        await sender.send_text(A, "hello")
    assert time.waits == []  # a budget of zero: one attempt


async def test_a_message_that_may_have_landed_is_retried_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter, time = ScriptedAdapter(), VirtualTime()
    adapter.fail("a", ChannelError("read timeout", retryable=True, maybe_delivered=True))
    await delivery(adapter, time).send_text(A, "hello")
    assert adapter.posted == [("a", "hello")]
    assert "may have landed" in caplog.text


def test_the_retry_budget_is_configured_per_channel() -> None:
    from botd import wiring
    from botd.config import ConfigError, parse_config

    text = (
        "channels:\n"
        "  telegram:\n    token: '1:x'\n    delivery_retry_for: 600\n"
        "  slack:\n    bot_token: xoxb-1\n    app_token: xapp-1\n"
    )
    config = parse_config(text, {}, "botd.yaml")
    budgets = {name: s.budget for name, s in wiring.delivery_retry(config).items()}
    assert budgets == {"telegram": 600.0, "slack": 300.0}
    with pytest.raises(ConfigError, match="delivery_retry_for"):
        parse_config(
            "channels:\n  telegram:\n    token: '1:x'\n    delivery_retry_for: -1\n",
            {},
            "botd.yaml",
        )
