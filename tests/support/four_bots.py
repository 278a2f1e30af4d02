"""Two Telegram bots and two Discord bots in one config, each on its own loopback fake: the
channels ``telegram`` and ``support`` (``platform: telegram``), ``discord`` and ``guild``
(``platform: discord``), each with its own token, all open to direct messages."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.telegram_api import FakeTelegramAPI

CHANNELS = ("telegram", "support", "discord", "guild")


@dataclass
class FourBots:
    """The four bots' fakes, by channel name."""

    telegram: FakeTelegramAPI
    support: FakeTelegramAPI
    discord: FakeDiscordAPI
    guild: FakeDiscordAPI


@asynccontextmanager
async def four_bots() -> AsyncIterator[FourBots]:
    """The four fakes, each serving its own token."""
    async with AsyncExitStack() as stack:
        yield FourBots(
            await stack.enter_async_context(FakeTelegramAPI(token="111:first-bot")),
            await stack.enter_async_context(FakeTelegramAPI(token="222:second-bot")),
            await stack.enter_async_context(FakeDiscordAPI(token="discord-first")),
            await stack.enter_async_context(FakeDiscordAPI(token="discord-second")),
        )


def four_bots_yaml(
    bots: FourBots,
    bot_api_url: Callable[[FakeTelegramAPI], str] = lambda fake: fake.base_url,
) -> str:
    """The ``channels:`` section of the four bots: the second of each platform named, with
    its platform; each Telegram bot reached at ``bot_api_url(fake)`` (a node's own path
    prefix, on several nodes)."""

    def telegram(fake: FakeTelegramAPI) -> str:
        return (
            f"    token: {json.dumps(fake.token)}\n"
            f"    api_base_url: {json.dumps(bot_api_url(fake))}\n"
            "    poll_timeout: 1\n    dm_policy: open\n"
        )

    def discord(fake: FakeDiscordAPI) -> str:
        return (
            f"    token: {json.dumps(fake.token)}\n"
            f"    api_base_url: {json.dumps(fake.base_url)}\n"
            f"    gateway_url: {json.dumps(fake.gateway_url)}\n"
            "    guild_ready_timeout: 0.05\n"
            "    dm_policy: open\n    command_menu: false\n"
        )

    return (
        "channels:\n"
        + ("  telegram:\n" + telegram(bots.telegram))
        + ("  support:\n    platform: telegram\n" + telegram(bots.support))
        + ("  discord:\n" + discord(bots.discord))
        + ("  guild:\n    platform: discord\n" + discord(bots.guild))
    )
