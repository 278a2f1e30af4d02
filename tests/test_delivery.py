"""Delivery: replies reach the adapter of their channel, refusals are not swallowed."""

from __future__ import annotations

import pytest

from botd.channels.base import InboundSink
from botd.chat import Capabilities, MessageRef, Target
from botd.delivery import ChannelDelivery, UnknownChannelError
from botd.subscriber import BlockReply, PartialReply


class FakeAdapter:
    name = "fake"
    capabilities = Capabilities(text_limit=100, markdown="plain")

    def __init__(self, fail: bool = False, fail_edit: bool = False) -> None:
        self.sent: list[tuple[Target, str]] = []
        self.edits: list[tuple[str, str]] = []
        self.fail = fail
        self.fail_edit = fail_edit

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
        if self.fail_edit:
            raise RuntimeError("message to edit not found")
        self.edits.append((ref.message_id, markdown))

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        if self.fail:
            raise RuntimeError("Forbidden: bot was kicked")


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


def partial(text: str) -> PartialReply:
    return PartialReply(text, [], lambda: text)


CHAT = Target("telegram", "42")


async def test_modes_default_to_blocks_and_edit_needs_an_editing_adapter() -> None:
    tg = FakeAdapter()
    delivery = ChannelDelivery({"telegram": tg, "slack": tg}, {"telegram": "edit"})
    assert delivery.delivery_mode(CHAT) == "edit"
    assert delivery.delivery_mode(Target("slack", "1")) == "blocks"
    tg.capabilities = Capabilities(text_limit=100, markdown="plain", can_edit=False)
    assert delivery.delivery_mode(CHAT) == "blocks"


async def test_previews_are_throttled_and_the_final_finishes_in_place() -> None:
    tg, now = FakeAdapter(), [0.0]
    delivery = ChannelDelivery({"telegram": tg}, {"telegram": "edit"}, clock=lambda: now[0])
    await delivery.preview(CHAT, partial("He"))
    await delivery.preview(CHAT, partial("Hello"))  # too soon: skipped
    now[0] = 1.0
    await delivery.preview(CHAT, partial("Hello wor"))
    await delivery.deliver(CHAT, BlockReply("Hello world"), kind="final")
    await delivery.deliver(CHAT, BlockReply("P.S."), kind="final")  # a second final is new
    assert [text for _, text in tg.sent] == ["He", "P.S."]
    assert tg.edits == [("1", "Hello wor"), ("1", "Hello world")]

    await delivery.end_run(CHAT)
    await delivery.preview(CHAT, partial("Next run"))
    assert tg.sent[-1][1] == "Next run"  # a new run, a new preview


async def test_a_failed_final_edit_posts_the_answer(caplog: pytest.LogCaptureFixture) -> None:
    tg = FakeAdapter(fail_edit=True)
    delivery = ChannelDelivery({"telegram": tg}, {"telegram": "edit"}, clock=lambda: 0.0)
    await delivery.preview(CHAT, partial("Hel"))
    await delivery.deliver(CHAT, BlockReply("Hello"), kind="final")
    assert [text for _, text in tg.sent] == ["Hel", "Hello"]
    assert "message to edit not found" in caplog.text


async def test_typing_failures_are_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    await ChannelDelivery({"telegram": FakeAdapter(fail=True)}).typing(CHAT)
    await ChannelDelivery({}).typing(CHAT)
    assert "bot was kicked" in caplog.text and "no adapter" in caplog.text
