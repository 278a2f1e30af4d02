"""The album and debounce windows on a timer the test moves: no test sleeps through them."""

from __future__ import annotations

import asyncio

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider
from botd.chat import InboundMessage
from botd.conversation import Conversations, SessionSettings
from botd.delivery import ChannelDelivery
from botd.store import Store
from botd.subscriber import ChunkingConfig, SubscriberConfig
from tests.conversation.harness import ManualTimer
from tests.conversation.platform import Edge, Platform
from tests.support.waiting import until


def message(text: str, n: int, album: str | None = None) -> InboundMessage:
    return InboundMessage(
        channel="console",
        chat_id="c1",
        sender_id="u1",
        text=text,
        message_id=f"c1-{n}",
        conversation_key="console:c1",
        is_direct=True,
        album=album,
    )


def conversations(
    store: Store, platform: Platform, timer: ManualTimer, **fields: object
) -> Conversations:
    settings = SessionSettings(
        loop=LoopConfig(model="scripted"),
        subscriber=SubscriberConfig(chunking=ChunkingConfig(1, 4000)),
        **fields,  # type: ignore[arg-type]
    )
    delivery = ChannelDelivery({"console": Edge(platform)})
    return Conversations(store, ScriptedProvider(), delivery, settings, timer=timer)


async def test_an_albums_parts_wait_for_the_window_and_are_answered_as_one(
    store: Store,
) -> None:
    platform, timer = Platform(), ManualTimer()
    registry = conversations(store, platform, timer, queue_mode="followup")
    await registry.submit(message("look", 1, album="a1"))
    await until(lambda: timer.waiting == 1, "the album's first part to wait for the rest")
    timer.advance(0.5)  # within the window: the next part comes
    await registry.submit(message("ok?", 2, album="a1"))
    await until(lambda: timer.waiting == 1, "the album to wait on from its latest part")
    timer.advance(0.9)  # 0.9 s after the latest part: still within its window
    await until(lambda: timer.looked_at == timer.time, "the album's wait to see the time")
    assert timer.waiting == 1 and platform.posts == []  # it saw 0.9 s go by and waits on
    timer.advance(0.2)
    await asyncio.wait_for(registry.drain(), 30)
    assert platform.posts == ["You said: look", "ok?"]  # one answer (a block per paragraph)


async def test_a_burst_within_the_debounce_is_one_prompt_and_a_later_one_its_own(
    store: Store,
) -> None:
    platform, timer = Platform(), ManualTimer()
    registry = conversations(store, platform, timer, queue_mode="followup", debounce=1.0)
    await registry.submit(message("hi", 1))
    await until(lambda: timer.waiting == 1, "the first line to wait for more")
    timer.advance(0.6)
    await registry.submit(message("check the logs", 2))
    timer.advance(1.0)
    await asyncio.wait_for(registry.drain(), 30)
    assert platform.posts == ["You said: hi", "check the logs"]
    await registry.submit(message("thanks", 3))
    await until(lambda: timer.waiting == 1, "the next line to wait for more")
    timer.advance(1.0)
    await asyncio.wait_for(registry.drain(), 30)
    assert platform.posts[2:] == ["You said: thanks"]
