"""A stopped run posts nothing more: after ``/stop``, an interrupt or shutdown, what the run
had not yet handed to the platform is dropped, and the stop's confirmation is the last word.
Also: a stalled model seen through the sessions (one answer, or one error line)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from botd.agent.loop import LoopConfig
from botd.agent.providers.anthropic import AnthropicProvider
from botd.agent.providers.openai import OpenAIProvider
from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.agent.providers.waits import NO_ANSWER_IN_TIME
from botd.agent.types import AssistantResult, ModelRequest, Provider, ProviderItem
from botd.channels.base import InboundSink, SendScope
from botd.chat import Capabilities, InboundMessage, MessageRef, Target
from botd.conversation import Conversations, SessionSettings
from botd.delivery import ChannelDelivery, CoalesceSettings, DeliveryMode
from botd.events import AssistantStreamEvent, Message
from botd.store import Store
from botd.store.sqlite import SqliteStore
from botd.subscriber import ChunkingConfig, SubscriberConfig
from botd.text.markup import PLAIN
from tests.conversation.harness import GateTool
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.openai_api import ChatStream, FakeOpenAI
from tests.support.waiting import until

HANG_GUARD = 30.0
CHAT = "c1"


# --- a platform that records, and can hold a send --------------------------------------------


class RecordingAdapter:
    """Records every post and edit; ``hold`` keeps the next send in flight until released."""

    name = "rec"

    def __init__(self, *, can_edit: bool = True) -> None:
        self.capabilities = Capabilities(text_limit=100_000, markup=PLAIN, can_edit=can_edit)
        self.posts: list[str] = []
        self.edits: list[str] = []
        self.posted = asyncio.Event()
        self.hold: asyncio.Event | None = None
        self.holding = asyncio.Event()

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        if self.hold is not None:
            gate, self.hold = self.hold, None
            self.holding.set()
            await gate.wait()
        self.posts.append(markdown)
        self.posted.set()
        return [MessageRef(target, str(len(self.posts)))]

    async def edit(self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None) -> None:
        self.edits.append(markdown)

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None

    async def wait_posts(self, count: int) -> None:
        async with asyncio.timeout(HANG_GUARD):
            while len(self.posts) < count:
                self.posted.clear()
                await self.posted.wait()


def delivery(adapter: RecordingAdapter, mode: DeliveryMode = "blocks") -> ChannelDelivery:
    return ChannelDelivery({"console": adapter}, {"console": mode}, min_edit_interval=0.0)


# --- a model that says some text, then waits to be cancelled --------------------------------


class HangingProvider:
    """Streams ``pieces`` of one text block, then hangs until cancelled (a slow model)."""

    name = "hanging"

    def __init__(self, *pieces: str) -> None:
        self.pieces = pieces
        self.said_all = asyncio.Event()
        self.cancelled = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        yield AssistantStreamEvent(type="text_start", content_index=0)
        for piece in self.pieces:
            await asyncio.sleep(0)
            yield AssistantStreamEvent(type="text_delta", content_index=0, delta=piece)
        self.said_all.set()
        try:
            await asyncio.Event().wait()  # never set: the model hangs until cancelled
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        yield AssistantResult(Message(role="assistant", content="never"))  # pragma: no cover

    async def aclose(self) -> None:
        return None


def inbound(text_: str, n: int = 0) -> InboundMessage:
    return InboundMessage(
        channel="console",
        chat_id=CHAT,
        sender_id="u1",
        text=text_,
        message_id=f"m{n}",
        conversation_key=f"console:{CHAT}",
    )


def settings(min_chars: int = 4000, **overrides: Any) -> SessionSettings:
    fields: dict[str, Any] = {
        "loop": LoopConfig(model="m"),
        "subscriber": SubscriberConfig(chunking=ChunkingConfig(min_chars, 8000)),
        "queue_mode": "followup",
    }
    fields.update(overrides)
    return SessionSettings(**fields)


async def stop(manager: Conversations) -> None:
    async with asyncio.timeout(HANG_GUARD):
        await manager.submit(inbound("/stop", n=99))
        await manager.drain()


# --- /stop ------------------------------------------------------------------------------------


async def test_stop_drops_text_the_user_never_saw(store: Store) -> None:
    # The chunker holds the text (a block needs 4000 characters): nothing was shown yet.
    model = HangingProvider("The first half ", "of an answer")
    adapter = RecordingAdapter()
    manager = Conversations(store, model, delivery(adapter), settings())
    await manager.submit(inbound("tell me"))
    await asyncio.wait_for(model.said_all.wait(), HANG_GUARD)

    await stop(manager)

    assert model.cancelled
    assert adapter.posts == ["Stopped."]


async def test_stop_drops_blocks_the_coalescer_was_holding(store: Store) -> None:
    model = HangingProvider("One.\n\n", "Two.\n\n", "Three.\n\n", "Four")
    adapter = RecordingAdapter()
    coalesce = CoalesceSettings(min_chars=1, max_chars=1000, idle_ms=600_000)
    manager = Conversations(
        store, model, delivery(adapter), settings(min_chars=1, coalesce=coalesce)
    )
    await manager.submit(inbound("count"))
    await asyncio.wait_for(model.said_all.wait(), HANG_GUARD)

    await stop(manager)

    assert adapter.posts == ["Stopped."]


async def test_stop_keeps_what_was_handed_over_and_drops_what_waited(store: Store) -> None:
    # Blocks are cut per paragraph; the platform holds the first send while more queue up.
    model = HangingProvider("One.\n\n", "Two.\n\n", "Three.\n\n", "Four")
    adapter = RecordingAdapter()
    adapter.hold = gate = asyncio.Event()
    manager = Conversations(store, model, delivery(adapter), settings(min_chars=1))
    await manager.submit(inbound("count"))
    await asyncio.wait_for(model.said_all.wait(), HANG_GUARD)
    await asyncio.wait_for(adapter.holding.wait(), HANG_GUARD)

    stopping = asyncio.create_task(stop(manager))
    # /stop is taken while "One." is with the platform
    await until(lambda: model.cancelled, "the run to be cancelled")
    gate.set()
    await asyncio.wait_for(stopping, HANG_GUARD)

    assert adapter.posts == ["One.", "Stopped."]


async def test_stop_in_edit_mode_leaves_the_preview_and_posts_only_the_confirmation(
    store: Store,
) -> None:
    # The platform holds the preview's first post while the answer grows behind it.
    model = HangingProvider("The first half ", "of an answer")
    adapter = RecordingAdapter()
    adapter.hold = gate = asyncio.Event()
    manager = Conversations(store, model, delivery(adapter, "edit"), settings())
    await manager.submit(inbound("tell me"))
    await asyncio.wait_for(model.said_all.wait(), HANG_GUARD)
    await asyncio.wait_for(adapter.holding.wait(), HANG_GUARD)

    stopping = asyncio.create_task(stop(manager))
    await until(lambda: model.cancelled, "the run to be cancelled")
    gate.set()
    await asyncio.wait_for(stopping, HANG_GUARD)

    # The preview that was in flight stays as it was; the newer text is never shown.
    assert adapter.posts == ["The first half", "Stopped."]
    assert adapter.edits == []


async def test_interrupt_drops_what_the_interrupted_run_had_buffered(store: Store) -> None:
    model = HangingProvider("Half an answer")
    adapter = RecordingAdapter()
    manager = Conversations(store, model, delivery(adapter), settings(queue_mode="interrupt"))
    await manager.submit(inbound("first"))
    await asyncio.wait_for(model.said_all.wait(), HANG_GUARD)
    model.pieces = ()  # the second run says nothing, then hangs too
    model.said_all.clear()
    await manager.submit(inbound("second", n=1))
    await asyncio.wait_for(model.said_all.wait(), HANG_GUARD)

    await stop(manager)

    assert adapter.posts == ["Stopped."]


async def test_new_answers_at_once_and_its_conversation_waits_for_the_cut_run(
    store: Store,
) -> None:
    # The run posts "One." (held by the platform), then waits in a tool.
    gate = GateTool()
    model = ScriptedProvider([ScriptedTurn(text="One.\n\n", tool_calls=[{"name": "wait"}])])
    adapter = RecordingAdapter()
    adapter.hold = held = asyncio.Event()
    manager = Conversations(
        store, model, delivery(adapter), settings(min_chars=1), tools=lambda m: [gate]
    )
    await manager.submit(inbound("count"))
    await asyncio.wait_for(adapter.holding.wait(), HANG_GUARD)
    await asyncio.wait_for(gate.started.wait(), HANG_GUARD)

    async with asyncio.timeout(HANG_GUARD):  # taken now, while "One." is with the platform
        await manager.submit(inbound("/new", n=1))
        await manager.submit(inbound("and now?", n=2))
    held.set()
    await asyncio.wait_for(manager.drain(), HANG_GUARD)

    assert gate.cancelled
    posts = adapter.posts
    assert sorted(posts) == sorted(
        ["One.", "Started a new conversation.", "You said: [id u1] and now?"]
    )
    # The cut run's last piece first: the confirmation and the new conversation come after.
    assert posts[0] == "One."


# --- shutdown ---------------------------------------------------------------------------------


async def test_a_run_cancelled_by_shutdown_posts_nothing_and_is_not_recorded_as_finished(
    sqlite_store: SqliteStore,
) -> None:
    model = HangingProvider("Half ", "an answer")
    adapter = RecordingAdapter()
    manager = Conversations(sqlite_store, model, delivery(adapter), settings())
    await manager.submit(inbound("tell me"))
    await asyncio.wait_for(model.said_all.wait(), HANG_GUARD)

    await asyncio.wait_for(manager.close(grace=0.01), HANG_GUARD)

    assert model.cancelled
    assert adapter.posts == []
    session = manager.conversations[f"console:{CHAT}"]
    stored = sqlite_store.load_transcript(session.session_id)
    replies = [m for m in stored if m.role == "assistant"]
    assert all(m.stop_reason == "cancelled" for m in replies)


async def test_a_run_that_finishes_within_the_grace_is_delivered(store: Store) -> None:
    model = ScriptedProvider([ScriptedTurn(text="All done.")], delay=0.001)
    adapter = RecordingAdapter()
    manager = Conversations(store, model, delivery(adapter), settings())
    await manager.submit(inbound("go"))

    await asyncio.wait_for(manager.close(grace=HANG_GUARD), HANG_GUARD)

    assert adapter.posts == ["All done."]


# --- a stalled model, as the user sees it -----------------------------------------------------


ERROR_LINE = f"⚠️ The agent stopped with an error: {NO_ANSWER_IN_TIME}"


async def answer_with(store: Store, provider: Provider, mode: DeliveryMode) -> list[str]:
    adapter = RecordingAdapter()
    manager = Conversations(store, provider, delivery(adapter, mode), settings(min_chars=1))
    try:
        await manager.submit(inbound("hi"))
        await asyncio.wait_for(manager.drain(), HANG_GUARD)
    finally:
        await provider.aclose()
    return adapter.posts


@pytest.mark.parametrize("mode", ["blocks", "final"])
async def test_anthropic_stalls_as_the_user_sees_them(store: Store, mode: DeliveryMode) -> None:
    async with FakeAnthropicAPI(api_key="sk-ant") as api:

        def provider() -> AnthropicProvider:
            return AnthropicProvider(
                api_key="sk-ant",
                base_url=api.base_url,
                idle_timeout=0.3,
                max_retries=2,
                max_retry_wait=0.01,
            )

        # Silent before any text: retried, answered once.
        api.push(stream(text("lost"), hang_after=2), stream(text("Hello ", "world")))
        assert await answer_with(store, provider(), mode) == ["Hello world"]

        # Silent mid-answer: what streamed stays, one error line, nothing repeated.
        api.push(stream(text("Partial ", "answer"), hang_after=4))
        asked = len(api.requests)
        posts = await answer_with(store, provider(), mode)
        assert posts.count(ERROR_LINE) == 1
        assert sorted(posts) == sorted([ERROR_LINE, "Partial"])
        assert len(api.requests) == asked + 1  # not asked again

        # Silent every time: one give-up line and nothing else.
        api.push(*[stream(text("x"), hang_after=1) for _ in range(3)])
        assert await answer_with(store, provider(), mode) == [ERROR_LINE]


async def test_openai_stalls_as_the_user_sees_them(store: Store) -> None:
    async with FakeOpenAI() as api:

        def provider() -> OpenAIProvider:
            return OpenAIProvider(
                base_url=api.base_url, idle_timeout=0.3, max_retries=2, max_retry_wait=0.01
            )

        api.enqueue(
            ChatStream().then_hang(), ChatStream().role().text("Hi ", "there").finish("stop")
        )
        assert await answer_with(store, provider(), "blocks") == ["Hi there"]

        api.enqueue(*[ChatStream().role().then_hang() for _ in range(3)])
        assert await answer_with(store, provider(), "blocks") == [ERROR_LINE]


# --- the grace, configured ------------------------------------------------------------------


def test_shutdown_grace_is_configured_and_a_reload_notes_its_change() -> None:
    from botd.config import ConfigError, parse_config
    from botd.config.reload import plan_reload

    default = parse_config("", {}, "botd.yaml")
    assert default.shutdown_grace == 10
    longer = parse_config("shutdown_grace: 25\n", {}, "botd.yaml")
    assert longer.shutdown_grace == 25
    plan = plan_reload(default, longer)
    assert plan.grace_changed and not plan.empty
    assert "new shutdown grace" in plan.describe()
    assert not plan.restart_only  # it applies to the next stop without a restart
    with pytest.raises(ConfigError, match="shutdown_grace"):
        parse_config("shutdown_grace: -1\n", {}, "botd.yaml")
