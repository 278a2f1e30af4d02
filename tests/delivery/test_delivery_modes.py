"""Delivery modes end to end: sessions → ChannelDelivery → a fake adapter, and typing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.channels.base import InboundSink, SendScope
from botd.chat import Capabilities, InboundMessage, MessageRef, PieceKey, Target
from botd.cluster.fencing import RunScope
from botd.conversation import Conversations, SessionSettings
from botd.delivery import ChannelDelivery, DeliveryMode, ReplyKind, RunOptions, RunOutbox
from botd.store import Store
from botd.store.sqlite import SqliteStore
from botd.subscriber import BlockReply, ChunkingConfig, PartialReply, SubscriberConfig, chunk_text
from botd.text.markup import PLAIN
from tests.support.waiting import after_timers

ANSWER = (
    "First paragraph of the answer, with several words in it.\n\n"
    "Second paragraph follows here, also with words.\n\n"
    "Third and last paragraph ends the answer."
)


class FakeAdapter:
    """An in-memory platform: messages by id, and a log of every call in order."""

    name = "fake"

    def __init__(
        self, *, text_limit: int = 10_000, can_edit: bool = True, typing_fails: bool = False
    ) -> None:
        self.capabilities = Capabilities(text_limit=text_limit, markup=PLAIN, can_edit=can_edit)
        self.messages: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.typing_fails = typing_fails

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        refs = []
        for chunk in chunk_text(markdown, self.capabilities.text_limit):
            message_id = str(len(self.messages) + 1)
            self.messages[message_id] = chunk
            self.calls.append(("send", message_id))
            refs.append(MessageRef(target, message_id))
        return refs

    async def edit(self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None) -> None:
        assert len(markdown) <= self.capabilities.text_limit
        assert ref.message_id in self.messages
        self.messages[ref.message_id] = markdown
        self.calls.append(("edit", ref.message_id))

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        self.calls.append(("typing", target.chat_id))
        if self.typing_fails:
            raise RuntimeError("typing refused")

    def count(self, kind: str) -> int:
        return sum(1 for call, _ in self.calls if call == kind)

    def texts(self) -> list[str]:
        return list(self.messages.values())


class RecordingDelivery(ChannelDelivery):
    """Notes in the adapter's log when a run's delivery ended."""

    def __init__(self, adapter: FakeAdapter, mode: DeliveryMode, **kwargs: Any) -> None:
        super().__init__({"fake": adapter}, {"fake": mode}, **kwargs)
        self.adapter = adapter

    async def end_run(self, target: Target, scope: RunScope | None = None) -> None:
        self.adapter.calls.append(("end_run", target.chat_id))
        await super().end_run(target, scope)


def stepping_clock(step: float) -> Callable[[], float]:
    """A clock that moves ``step`` seconds each time it is read: deterministic throttling."""
    now = [0.0]

    def clock() -> float:
        now[0] += step
        return now[0]

    return clock


def inbound(text: str = "question") -> InboundMessage:
    return InboundMessage(
        channel="fake",
        chat_id="c1",
        sender_id="u1",
        text=text,
        message_id="m1",
        conversation_key="fake:c1",
        is_direct=True,
    )


async def answer(
    store: Store,
    delivery: ChannelDelivery,
    text: str = ANSWER,
    *,
    delay: float = 0.0,
    **overrides: Any,
) -> Conversations:
    fields: dict[str, Any] = {
        "loop": LoopConfig(model="scripted"),
        "subscriber": SubscriberConfig(chunking=ChunkingConfig(10, 60)),
    }
    fields.update(overrides)
    provider = ScriptedProvider([ScriptedTurn(text=text)], chunk_chars=5, delay=delay)
    manager = Conversations(store, provider, delivery, SessionSettings(**fields))
    await manager.submit(inbound())
    await asyncio.wait_for(manager.drain(), 30)
    return manager


def words(texts: list[str]) -> list[str]:
    return " ".join(texts).split()


async def test_blocks_mode_posts_each_block(store: Store) -> None:
    adapter = FakeAdapter()
    await answer(store, RecordingDelivery(adapter, "blocks"))
    assert adapter.count("send") > 1
    assert adapter.count("edit") == 0
    assert words(adapter.texts()) == ANSWER.split()


async def test_final_mode_posts_only_the_final_answer_once(store: Store) -> None:
    adapter = FakeAdapter()
    await answer(store, RecordingDelivery(adapter, "final"))
    assert adapter.texts() == [ANSWER]
    assert adapter.count("send") == 1 and adapter.count("edit") == 0


async def test_edit_mode_edits_one_preview_into_the_answer(store: Store) -> None:
    adapter = FakeAdapter()
    await answer(store, RecordingDelivery(adapter, "edit", clock=stepping_clock(0.6)), delay=0.001)
    assert adapter.count("send") == 1  # the preview; never a second copy
    assert adapter.count("edit") > 1  # throttled previews, then the final text
    assert adapter.texts() == [ANSWER]


async def test_edit_mode_throttles_edits(store: Store, tmp_path: Path) -> None:
    free, throttled = FakeAdapter(), FakeAdapter()
    await answer(store, RecordingDelivery(free, "edit", min_edit_interval=0.0), delay=0.001)
    with SqliteStore.open(tmp_path / "other") as other:
        await answer(
            other,
            RecordingDelivery(throttled, "edit", min_edit_interval=1e9, clock=lambda: 0.0),
            delay=0.001,
        )
    assert throttled.count("edit") == 1  # only the final one
    assert free.count("edit") > throttled.count("edit")
    assert free.texts() == throttled.texts() == [ANSWER]


async def test_edit_mode_continues_a_long_answer_in_new_messages(store: Store) -> None:
    adapter = FakeAdapter(text_limit=40)
    long_answer = " ".join(f"word{n}" for n in range(60))
    await answer(
        store,
        RecordingDelivery(adapter, "edit", clock=stepping_clock(0.6)),
        text=long_answer,
        delay=0.001,
    )
    texts = adapter.texts()
    assert len(texts) > 1
    assert all(len(text) <= 40 for text in texts)
    assert words(texts) == long_answer.split()  # everything, once, in order
    assert adapter.count("send") == len(texts)


async def test_edit_mode_falls_back_to_blocks_without_editing(store: Store) -> None:
    adapter = FakeAdapter(can_edit=False)
    delivery = RecordingDelivery(adapter, "edit")
    assert delivery.delivery_mode(inbound().reply_target()) == "blocks"
    await answer(store, delivery)
    assert adapter.count("edit") == 0 and adapter.count("send") > 1
    assert words(adapter.texts()) == ANSWER.split()


async def test_typing_runs_while_working_and_stops_with_the_replies(store: Store) -> None:
    adapter = FakeAdapter()
    await answer(
        store,
        RecordingDelivery(adapter, "final"),
        delay=0.001,
        typing_delay=0,
        typing_interval=0.001,
    )
    assert adapter.count("typing") >= 1
    end = adapter.calls.index(("end_run", "c1"))
    assert all(call != "typing" for call, _ in adapter.calls[end:])
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("typing:")]
    typed = adapter.count("typing")
    await after_timers(0.002)  # past any renewal armed before the run ended
    assert adapter.count("typing") == typed


async def test_a_failing_typing_call_does_not_break_the_run(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = FakeAdapter(typing_fails=True)
    await answer(store, RecordingDelivery(adapter, "final"), typing_delay=0)
    assert adapter.texts() == [ANSWER]
    assert "typing refused" in caplog.text


PACING = RunOptions()


class RaisingTypingSink:
    """A delivery of its own whose typing raises: the run's outbox logs it and carries on."""

    def __init__(self) -> None:
        self.posts: list[str] = []

    def open_run(
        self,
        target: Target,
        options: RunOptions = PACING,
        *,
        on_first_reply: Callable[[], None] | None = None,
        scope: RunScope | None = None,
    ) -> RunOutbox:
        return RunOutbox(self, target, options, on_first_reply=on_first_reply, scope=scope)

    async def send_text(
        self,
        target: Target,
        markdown: str,
        *,
        reply_to: str | None = None,
        piece: PieceKey | None = None,
    ) -> list[MessageRef]:
        self.posts.append(markdown)
        return []

    def resends_safely(self, target: Target, written_at: float, now: float) -> bool:
        return False

    def follower(self, target: Target) -> None:
        return None  # a chat's: nobody follows the run but through its replies

    def delivery_mode(self, target: Target) -> DeliveryMode:
        return "blocks"

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
        self.posts.append(reply.text)
        return []

    async def preview(
        self, target: Target, partial: PartialReply, scope: RunScope | None = None
    ) -> bool:
        return False

    async def end_run(self, target: Target, scope: RunScope | None = None) -> None:
        return None

    async def typing(self, target: Target) -> None:
        raise RuntimeError("no typing here")


async def test_a_raising_typing_sink_does_not_break_the_run(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    sink = RaisingTypingSink()
    settings = SessionSettings(loop=LoopConfig(model="scripted"), typing_delay=0)
    manager = Conversations(store, ScriptedProvider(), sink, settings)
    await manager.submit(inbound("hello"))
    await asyncio.wait_for(manager.drain(), 30)
    assert sink.posts == ["You said: hello"]
    assert "no typing here" in caplog.text


async def test_a_run_that_fails_before_it_starts_still_ends_its_delivery(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = FakeAdapter()

    def broken_tools(message: InboundMessage) -> list[Any]:
        raise RuntimeError("no tools today")

    settings = SessionSettings(
        loop=LoopConfig(model="scripted"), typing_delay=0, typing_interval=0.001
    )
    delivery = RecordingDelivery(adapter, "blocks")
    manager = Conversations(store, ScriptedProvider(), delivery, settings, tools=broken_tools)
    await manager.submit(inbound("hello"))
    await asyncio.wait_for(manager.drain(), 30)
    assert "no tools today" in caplog.text
    assert ("end_run", "c1") in adapter.calls
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("typing:")]
