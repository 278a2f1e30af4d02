"""What the Telegram tests share: the real adapter started against the loopback Bot API,
with the inbound messages it delivers in a queue."""

from __future__ import annotations

import asyncio
from typing import Any

from botd.channels.base import Ack
from botd.channels.telegram.adapter import TelegramAdapter
from botd.chat import InboundMessage
from botd.store import Store
from tests.channels.routed import through_router
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import HANG_GUARD

TOKEN = "123456:TEST-TOKEN"
DM, GROUP, FORUM = 777, -100123, -100500


class Bot:
    """A started adapter and the inbound messages it delivered."""

    def __init__(self, adapter: TelegramAdapter) -> None:
        self.adapter = adapter
        self.inbound: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def sink(self, message: InboundMessage, *, ack: Ack | None = None) -> None:
        await self.inbound.put(message)

    async def next(self) -> InboundMessage:
        async with asyncio.timeout(HANG_GUARD):
            return await self.inbound.get()


async def started(fake: FakeTelegramAPI, store: Store | None = None, **kwargs: Any) -> Bot:
    """A started adapter; with a store, it keeps its offset there and its messages pass the
    router (and its inbound ledger) on their way to the bot's queue."""
    kwargs.setdefault("poll_timeout", 5)
    adapter = TelegramAdapter(TOKEN, offsets=store, api_base_url=fake.base_url, **kwargs)
    bot = Bot(adapter)
    await adapter.start(bot.sink if store is None else through_router(store, bot.sink, "telegram"))
    return bot
