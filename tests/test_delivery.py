"""Delivery: replies reach the adapter of their channel, refusals are not swallowed."""

from __future__ import annotations

import pytest

from botd.channels.base import Capabilities, InboundSink, MessageRef, Target
from botd.delivery import ChannelDelivery, UnknownChannelError
from botd.subscriber import BlockReply


class FakeAdapter:
    name = "fake"
    capabilities = Capabilities(text_limit=100, markdown="plain")

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[Target, str]] = []
        self.fail = fail

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, target: Target, markdown: str) -> list[MessageRef]:
        if self.fail:
            raise RuntimeError("Bad Request: chat not found")
        self.sent.append((target, markdown))
        return [MessageRef(target, str(len(self.sent)))]

    async def edit(self, ref: MessageRef, markdown: str) -> None:
        return None

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None


async def test_reply_goes_to_its_channel_with_its_reply_to_id() -> None:
    tg, slack = FakeAdapter(), FakeAdapter()
    delivery = ChannelDelivery({"telegram": tg, "slack": slack})
    await delivery.deliver(Target("telegram", "42"), BlockReply("hi", reply_to_id="7"))
    assert tg.sent == [(Target("telegram", "42", reply_to_id="7"), "hi")]
    assert slack.sent == []


async def test_media_urls_are_named_after_the_text() -> None:
    tg = FakeAdapter()
    await ChannelDelivery({"telegram": tg}).deliver(
        Target("telegram", "42"), BlockReply("Here", media_urls=["https://x.y/a.png"])
    )
    assert tg.sent[0][1] == "Here\n\nhttps://x.y/a.png"


async def test_unknown_channel_and_refusals_raise(caplog: pytest.LogCaptureFixture) -> None:
    delivery = ChannelDelivery({"telegram": FakeAdapter(fail=True)})
    with pytest.raises(UnknownChannelError, match="discord"):
        await delivery.deliver(Target("discord", "1"), BlockReply("x"))
    with pytest.raises(RuntimeError):
        await delivery.deliver(Target("telegram", "1"), BlockReply("x"))
    assert "chat not found" in caplog.text
