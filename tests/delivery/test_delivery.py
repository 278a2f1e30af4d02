"""Delivery: replies reach the adapter of their channel, refusals are not swallowed."""

from __future__ import annotations

import asyncio
import logging

import pytest

from botd.channels.base import InboundSink, SendScope
from botd.chat import Capabilities, MessageRef, PieceKey, Target
from botd.cluster.fencing import Fence, RunScope
from botd.cluster.leases import LeaseKeeper, ProcessLeases
from botd.delivery import (
    ChannelDelivery,
    CoalesceSettings,
    DeliveryMode,
    ReplyKind,
    RunOptions,
    RunOutbox,
    UnknownChannelError,
)
from botd.store.errors import ContentRefused, StoreWriteError
from botd.subscriber import BlockReply, PartialReply
from botd.text.markup import PLAIN
from tests.support.waiting import after_timers, until


class FakeAdapter:
    name = "fake"
    capabilities = Capabilities(text_limit=100, markup=PLAIN)

    def __init__(self, fail: bool = False, fail_edit: bool = False) -> None:
        self.sent: list[tuple[Target, str]] = []
        self.edits: list[tuple[str, str]] = []
        self.fail = fail
        self.fail_edit = fail_edit
        self.typed: list[Target] = []

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        if self.fail:
            raise RuntimeError("Bad Request: chat not found")
        self.sent.append((target, markdown))
        return [MessageRef(target, str(len(self.sent)))]

    async def edit(self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None) -> None:
        if self.fail_edit:
            raise RuntimeError("message to edit not found")
        self.edits.append((ref.message_id, markdown))

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        self.typed.append(target)
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
    tg.capabilities = Capabilities(text_limit=100, markup=PLAIN, can_edit=False)
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


async def test_set_channels_replaces_the_adapters_and_modes() -> None:
    old, new = FakeAdapter(), FakeAdapter()
    delivery = ChannelDelivery({"telegram": old})
    delivery.set_channels({"slack": new}, {"slack": "edit"})
    assert delivery.delivery_mode(Target("slack", "1")) == "edit"
    await delivery.send_text(Target("slack", "1"), "hi")
    assert new.sent and not old.sent
    with pytest.raises(UnknownChannelError):
        await delivery.send_text(CHAT, "hi")


class RecordingOutlet:
    """Notes every call a run's outbox makes, in order; ``refuse`` texts raise."""

    def __init__(self, mode: DeliveryMode = "blocks", refuse: str = "") -> None:
        self.mode = mode
        self.refuse = refuse
        self.calls: list[tuple[str, str]] = []

    def delivery_mode(self, target: Target) -> DeliveryMode:
        return self.mode

    def fits_caption(self, target: Target, text: str) -> bool:
        return True

    async def deliver(
        self,
        target: Target,
        reply: BlockReply,
        *,
        kind: ReplyKind = "block",
        piece: PieceKey | None = None,
        scope: RunScope | None = None,
    ) -> list[MessageRef]:
        await asyncio.sleep(0)
        if reply.text == self.refuse:
            raise RuntimeError("refused")
        self.calls.append((kind, reply.text))
        return [MessageRef(target, str(len(self.calls)))]

    async def preview(
        self, target: Target, partial: PartialReply, scope: RunScope | None = None
    ) -> bool:
        await asyncio.sleep(0)
        self.calls.append(("partial", partial.text))
        return True

    async def typing(self, target: Target) -> None:
        self.calls.append(("typing", ""))

    async def end_run(self, target: Target, scope: RunScope | None = None) -> None:
        self.calls.append(("end", ""))


async def test_a_run_outbox_sends_in_order_and_a_refusal_skips_one_piece(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outlet, firsts = RecordingOutlet(refuse="two"), []
    output = RunOutbox(outlet, CHAT, on_first_reply=lambda: firsts.append(len(outlet.calls)))
    assert output.mode == "blocks"
    for text in ("one", "two", "three"):
        output.block(BlockReply(text))
    output.flush()
    output.final(BlockReply("done"))
    await asyncio.wait_for(output.close(), 30)
    assert outlet.calls == [  # answered at once: no "typing…" at all
        ("block", "one"),
        ("block", "three"),
        ("final", "done"),
        ("end", ""),
    ]
    assert firsts == [1]  # once, right after the first piece reached the chat
    assert "refused" in caplog.text


async def test_a_run_outbox_skips_to_the_latest_partial() -> None:
    outlet = RecordingOutlet(mode="edit")
    output = RunOutbox(outlet, CHAT, RunOptions(typing_interval=60))
    output.partial(partial("a"))
    output.partial(partial("ab"))
    output.partial(partial("abc"))
    output.final(BlockReply("abcd"))
    await asyncio.wait_for(output.close(), 30)
    assert [c for c in outlet.calls if c[0] != "typing"] == [
        ("partial", "abc"),
        ("final", "abcd"),
        ("end", ""),
    ]


async def test_a_run_outbox_coalesces_blocks_until_a_tool_starts() -> None:
    outlet = RecordingOutlet()
    coalesce = CoalesceSettings(min_chars=1, max_chars=100, idle_ms=60_000, joiner=" ")
    output = RunOutbox(outlet, CHAT, RunOptions(coalesce=coalesce))
    output.block(BlockReply("a"))
    output.block(BlockReply("b"))
    output.flush()
    output.block(BlockReply("c"))
    await asyncio.wait_for(output.close(), 30)
    assert [c for c in outlet.calls if c[0] == "block"] == [("block", "a b"), ("block", "c")]


async def test_closing_a_run_outbox_stops_typing() -> None:
    outlet = RecordingOutlet()
    output = RunOutbox(outlet, CHAT, RunOptions(typing_delay=0, typing_interval=0.001))
    await until(lambda: ("typing", "") in outlet.calls, "typing shown")
    await asyncio.wait_for(output.close(), 30)
    typed = outlet.calls.count(("typing", ""))
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("typing:")]
    await after_timers(0.002)  # past any renewal armed before the close
    assert outlet.calls.count(("typing", "")) == typed


async def test_typing_is_sent_once_per_conversation_per_interval_until_a_message_goes() -> None:
    tg, now = FakeAdapter(), [0.0]
    delivery = ChannelDelivery({"telegram": tg}, typing_interval=5.0, clock=lambda: now[0])
    other = Target("telegram", "43")
    await delivery.typing(CHAT)
    await delivery.typing(CHAT)  # still showing: not sent again
    await delivery.typing(Target("telegram", CHAT.chat_id, reply_to_id="9"))  # same chat
    await delivery.typing(other)
    assert tg.typed == [CHAT, other]
    now[0] = 5.0
    await delivery.typing(CHAT)  # expired: renewed
    assert tg.typed == [CHAT, other, CHAT]
    await delivery.send_text(CHAT, "answer")  # a message clears it on the platform
    await delivery.typing(CHAT)
    assert tg.typed == [CHAT, other, CHAT, CHAT]


async def test_a_slow_run_shows_typing_until_its_first_piece_and_never_after() -> None:
    outlet = RecordingOutlet()
    output = RunOutbox(outlet, CHAT, RunOptions(typing_delay=0.02, typing_interval=0.01))
    await until(lambda: ("typing", "") in outlet.calls, '("typing", "") in outlet.calls', guard=30)
    output.block(BlockReply("one"))
    await until(
        lambda: ("block", "one") in outlet.calls, '("block", "one") in outlet.calls', guard=30
    )
    await after_timers(0.05)  # several intervals: no renewal once the answer started
    output.block(BlockReply("two"))
    await asyncio.wait_for(output.close(), 30)
    first_block = outlet.calls.index(("block", "one"))
    assert ("typing", "") in outlet.calls[:first_block]
    assert ("typing", "") not in outlet.calls[first_block:]


async def test_a_quick_run_sends_no_typing() -> None:
    outlet = RecordingOutlet()
    output = RunOutbox(outlet, CHAT, RunOptions(typing_delay=60))
    output.final(BlockReply("done"))
    await asyncio.wait_for(output.close(), 30)
    assert outlet.calls == [("final", "done"), ("end", "")]
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("typing:")]


class FailingJournal:
    """A run journal whose store is away: every piece's row fails to be written."""

    def __init__(self) -> None:
        self.tried = 0

    async def written(self, piece: object, text: str) -> int:
        self.tried += 1
        raise StoreWriteError("postgresql://db/botd", "connection refused")

    def sent(self, key: int, refs: object) -> None:
        raise AssertionError("nothing was written, so nothing is marked")

    def failed(self, key: int) -> None:
        raise AssertionError("nothing was written, so nothing is marked")


async def test_a_piece_whose_row_fails_is_sent_anyway_without_a_lease() -> None:
    # One node (SQLite): the answer still reaches the user when the journal cannot write.
    adapter, journal = FakeAdapter(), FailingJournal()
    output = ChannelDelivery({"fake": adapter}).open_run(
        Target("fake", "c1"), RunOptions(journal=journal)
    )
    output.final(BlockReply("The answer."))
    await output.close()
    assert journal.tried == 1
    assert [text for _, text in adapter.sent] == ["The answer."]


class RefusingJournal:
    """A run journal whose store refuses one piece for its content (``ContentRefused``) and
    writes the others."""

    def __init__(self, refuse: str) -> None:
        self.refuse = refuse
        self.texts: list[str] = []
        self.sent_keys: list[int] = []

    async def written(self, piece: object, text: str) -> int:
        if text == self.refuse:
            raise ContentRefused("postgresql://db/botd", "outbox_add", "bigint out of range")
        self.texts.append(text)
        return len(self.texts)

    def sent(self, key: int, refs: object) -> None:
        self.sent_keys.append(key)

    def failed(self, key: int) -> None:
        raise AssertionError("every piece written was sent")


async def test_under_a_lease_a_piece_refused_for_its_content_is_skipped_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Refused for what it carries, the piece would be refused again by whoever resumed the
    # run: the lease is no reason to give up, only that piece is left out.
    keeper = LeaseKeeper(ProcessLeases(), "node-a", 60)
    lease = await keeper.try_claim("conversation:fake:c1")
    assert lease is not None
    adapter, journal = FakeAdapter(), RefusingJournal("Second paragraph.")
    scope = RunScope("fake:c1", Fence(lease, "node-a", 1.0))
    with caplog.at_level(logging.WARNING):
        output = ChannelDelivery({"fake": adapter}).open_run(
            Target("fake", "c1"), RunOptions(journal=journal), scope=scope
        )
        output.block(BlockReply("First paragraph."))
        output.block(BlockReply("Second paragraph."))
        output.final(BlockReply("Third\x00paragraph."))
        await output.close()
    assert [text for _, text in adapter.sent] == ["First paragraph.", "Third\ufffdparagraph."]
    assert journal.texts == ["First paragraph.", "Third\ufffdparagraph."]
    assert journal.sent_keys == [1, 2]
    assert not lease.lost.is_set()
    [line] = [r.getMessage() for r in caplog.records if r.name == "botd.delivery.outbox"]
    assert line == (
        "a reply to c1 is not sent: postgresql://db/botd: outbox_add was refused for its "
        "content: bigint out of range"
    )


async def test_under_a_lease_a_piece_whose_row_fails_is_not_sent_and_the_lease_given_up() -> None:
    # Several nodes: a piece sent without its row would be sent again by the next holder,
    # which resumes the run from the store; so it is not sent, and the lease is given up.
    keeper = LeaseKeeper(ProcessLeases(), "node-a", 60)
    lease = await keeper.try_claim("conversation:fake:c1")
    assert lease is not None
    adapter, journal = FakeAdapter(), FailingJournal()
    scope = RunScope("fake:c1", Fence(lease, "node-a", 1.0))
    output = ChannelDelivery({"fake": adapter}).open_run(
        Target("fake", "c1"), RunOptions(journal=journal), scope=scope
    )
    output.block(BlockReply("First paragraph."))
    output.final(BlockReply("Second paragraph."))
    await output.close()
    assert journal.tried == 1
    assert adapter.sent == []
    assert lease.lost.is_set()
