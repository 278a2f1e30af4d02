"""What the conversation tests share: a platform that records each post (``ListSink`` over
the real delivery), a scripted provider that remembers its requests, a tool that waits until
released, a timer the test moves for the album and debounce windows, an inbound message,
session settings with the tests' defaults, and the dispatcher of a node alone in front of a
registry (``dispatching``: what a botd process does at start and for each accepted entry)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider
from botd.agent.tools.base import ToolContext, ToolOutput
from botd.agent.types import ModelRequest, ProviderItem, ToolDefinition
from botd.channels.base import SendScope
from botd.chat import Capabilities, InboundMessage, MessageRef, Target
from botd.cluster.leases import LeaseKeeper
from botd.conversation import Conversations, SessionSettings
from botd.conversation.dispatcher import Dispatcher
from botd.delivery import ChannelDelivery
from botd.events import TextContent
from botd.store.protocols import ConversationInbox
from botd.subscriber import ChunkingConfig, SubscriberConfig
from botd.text.markup import PLAIN
from tests.support.text_only_adapter import TextOnlyAdapter


class ListAdapter(TextOnlyAdapter):
    """A platform that only records what is posted to it."""

    name = "list"
    capabilities = Capabilities(text_limit=100_000, markup=PLAIN)

    def __init__(self, sink: ListSink) -> None:
        self.sink = sink

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        self.sink.posts.append((target.chat_id, markdown))
        self.sink.arrived.set()
        return [MessageRef(target, str(len(self.sink.posts)))]


class ListSink(ChannelDelivery):
    """Collects what would be posted, per chat (the real delivery over a recording adapter)."""

    def __init__(self, channel: str = "console") -> None:
        self.posts: list[tuple[str, str]] = []
        self.arrived = asyncio.Event()
        super().__init__({channel: ListAdapter(self)})

    def texts(self, chat: str) -> list[str]:
        return [text for chat_id, text in self.posts if chat_id == chat]

    async def last(self, chat: str, count: int) -> str:
        """The chat's latest text once it has ``count`` texts (hang-guarded)."""
        async with asyncio.timeout(30):
            while len(self.texts(chat)) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.texts(chat)[-1]


class ManualTimer:
    """Time that passes only when the test says so."""

    def __init__(self) -> None:
        self.time = 0.0
        self.waiting = 0
        self.looked_at = -1.0
        """The time a wait last looked at (whether to go on waiting or end)."""
        self._moved = asyncio.Event()

    def now(self) -> float:
        return self.time

    async def wait(self, seconds: float, wake: asyncio.Event) -> None:
        deadline = self.time + seconds
        self.waiting += 1
        try:
            while True:
                self.looked_at = self.time
                if self.time >= deadline or wake.is_set():
                    break
                moved = self._moved
                waits = [asyncio.ensure_future(e.wait()) for e in (wake, moved)]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in waits:
                        task.cancel()
        finally:
            self.waiting -= 1

    def advance(self, seconds: float) -> None:
        self.time += seconds
        self._moved.set()
        self._moved = asyncio.Event()


class RecordingProvider:
    """A scripted provider that remembers every request and how many streams run at once;
    with ``hold``, each stream waits for that event before it answers."""

    def __init__(self, inner: ScriptedProvider, *, hold: asyncio.Event | None = None) -> None:
        self.inner = inner
        self.name = "recording"
        self.requests: list[ModelRequest] = []
        self.active = 0
        self.peak = 0
        self._hold = hold

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        self.requests.append(request)
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            if self._hold is not None:
                await self._hold.wait()
            async for item in self.inner.stream(request):
                yield item
        finally:
            self.active -= 1

    async def aclose(self) -> None:
        await self.inner.aclose()

    def prompts(self) -> list[list[str]]:
        """The user texts of each request, in order."""
        return [
            [
                "".join(b.text for b in m.blocks() if isinstance(b, TextContent))
                for m in r.messages
                if m.role == "user"
            ]
            for r in self.requests
        ]


class GateTool:
    """A tool that waits until released (or cancelled)."""

    def __init__(self) -> None:
        self.spec = ToolDefinition(
            "wait", "Waits for a signal.", {"type": "object", "properties": {}}
        )
        self.timeout: float | None = None
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return ToolOutput("released")


def inbound(text: str, chat: str = "c1", n: int = 0) -> InboundMessage:
    return InboundMessage(
        channel="console",
        chat_id=chat,
        sender_id="u1",
        text=text,
        message_id=f"{chat}-{n}-{text}",
        conversation_key=f"console:{chat}",
        is_direct=True,  # as the console adapter marks its operator's messages
    )


def settings(**overrides: Any) -> SessionSettings:
    fields: dict[str, Any] = {
        "loop": LoopConfig(model="scripted"),
        "subscriber": SubscriberConfig(chunking=ChunkingConfig(1, 4000)),
    }
    fields.update(overrides)
    return SessionSettings(**fields)


async def settle(manager: Conversations) -> None:
    await asyncio.wait_for(manager.drain(), 30)


@asynccontextmanager
async def dispatching(
    conversations: Conversations, inbox: ConversationInbox
) -> AsyncIterator[Dispatcher]:
    """The dispatcher of a node alone in front of ``conversations``, started (its first poll
    claims what the inbox holds unfinished, as a botd process does once its channels can
    send) and closed at the end."""
    dispatcher = Dispatcher(conversations, inbox, LeaseKeeper.alone("node"))
    await dispatcher.start()
    try:
        yield dispatcher
    finally:
        await dispatcher.close()
