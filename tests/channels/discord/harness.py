"""What the Discord adapter tests share: a sink that collects what the adapter hands on, and
the adapter pointed at the loopback fake."""

from __future__ import annotations

import asyncio
from typing import Any

from botd.channels.base import Ack
from botd.channels.discord.adapter import DiscordAdapter
from botd.chat import InboundMessage
from tests.fakes.discord_api import FakeDiscordAPI
from tests.support.waiting import HANG_GUARD

TOKEN = "fake-discord-token"


class Sink:
    """Collects inbound messages in arrival order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def __call__(self, message: InboundMessage, *, ack: Ack | None = None) -> None:
        await self.queue.put(message)

    async def next(self) -> InboundMessage:
        return await asyncio.wait_for(self.queue.get(), HANG_GUARD)


def make_adapter(fake: FakeDiscordAPI, **options: Any) -> DiscordAdapter:
    """A Discord adapter over ``fake`` (``options``: more of its keyword arguments)."""
    return DiscordAdapter(
        TOKEN,
        api_base_url=fake.base_url,
        gateway_url=fake.gateway_url,
        guild_ready_timeout=0.05,
        ready_timeout=HANG_GUARD,
        **options,
    )
