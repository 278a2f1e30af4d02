"""Two bots of one platform in one daemon (issue 34): the real wiring in-process with two
Telegram channels (``telegram`` and ``support``, each its own token and loopback Bot API)
and two Discord channels (``discord`` and ``guild``, each its own token and loopback REST
API and gateway), answering with the scripted model.

The same person writes to each bot from the same chat id: each bot answers its own chat on
its own server, each conversation is its own (the default channels keep the keys botd always
stored, the others have their own), and ``/healthz`` and ``/metrics`` show every channel
under its own name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from botd.app import App
from tests.fakes.discord_api import DM_CHANNEL_ID, USER_ID, user
from tests.support.daemon_inprocess import config_yaml, daemon_running
from tests.support.four_bots import CHANNELS, FourBots, four_bots, four_bots_yaml
from tests.support.health_probe import free_port, named, scrape
from tests.support.waiting import guarded, until

CHAT = 777
"""The Telegram DM written to each bot (a private chat's id is its user's)."""
ALICE = user(USER_ID, "alice")


@pytest.fixture
async def fakes() -> AsyncIterator[FourBots]:
    async with four_bots() as bots:
        yield bots


def all_running(daemon: App) -> bool:
    return daemon.started and daemon.channel_states() == dict.fromkeys(CHANNELS, "running")


async def healthz(port: int) -> dict[str, object]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/healthz") as resp,
    ):
        assert resp.status == 200
        body: dict[str, object] = await resp.json()
        return body


async def test_two_telegram_and_two_discord_bots_each_answer_their_own_chats(
    tmp_path: Path, fakes: FourBots
) -> None:
    port = free_port()
    config = config_yaml(
        tmp_path, f"health: {{enabled: true, port: {port}}}\n", four_bots_yaml(fakes)
    )
    async with daemon_running(config, ready=all_running) as daemon:
        fakes.telegram.push_text(CHAT, "hello first")
        fakes.support.push_text(CHAT, "hello second")
        for fake, text in ((fakes.discord, "ping first"), (fakes.guild, "ping second")):
            dm = fake.message(text, channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
            await fake.dispatch_message(dm)

        def answered() -> bool:
            telegrams = (fakes.telegram.visible(CHAT), fakes.support.visible(CHAT))
            discords = (fakes.discord.visible(DM_CHANNEL_ID), fakes.guild.visible(DM_CHANNEL_ID))
            return all(telegrams) and all(discords)

        await until(answered, "every bot's answer")
        assert daemon.runtime is not None
        await guarded(daemon.runtime.dispatcher.drain(), "botd to finish its runs")
        shown = await healthz(port)
        samples, _ = await scrape(port)
        keys = set(daemon.runtime.sessions.conversations)

    # Each bot answered its own chat on its own server, and nothing else.
    assert fakes.telegram.visible(CHAT) == ["You said: hello first"]
    assert fakes.support.visible(CHAT) == ["You said: hello second"]
    assert fakes.discord.visible(DM_CHANNEL_ID) == ["You said: ping first"]
    assert fakes.guild.visible(DM_CHANNEL_ID) == ["You said: ping second"]
    # Each Discord bot's gateway session and REST calls went to its own fake, with its token.
    for fake in (fakes.discord, fakes.guild):
        assert [identify["token"] for identify in fake.identifies] == [fake.token]
        assert {r.headers.get("Authorization") for r in fake.requests} == {f"Bot {fake.token}"}

    # Four conversations: the default channels' keys as botd always spelled them.
    assert keys == {
        f"telegram:{CHAT}",
        f"support:{CHAT}",
        f"discord:dm:{USER_ID}",
        f"guild:dm:{USER_ID}",
    }

    # A /healthz line and metrics labels per channel.
    assert shown["channels"] == dict.fromkeys(CHANNELS, "running")
    assert named(samples, "botd_channel_up") == {
        frozenset({("channel", name)}): 1.0 for name in CHANNELS
    }
    assert named(samples, "botd_messages_in_total") == {
        frozenset({("channel", name)}): 1.0 for name in CHANNELS
    }
    assert named(samples, "botd_messages_out_total") == {
        frozenset({("channel", name)}): 1.0 for name in CHANNELS
    }


async def test_a_second_bot_that_fails_is_down_under_its_own_name(
    tmp_path: Path, fakes: FourBots
) -> None:
    """The second Telegram bot's token refused (its Bot API knows another): it alone is
    down, under its name, and the first bot answers."""
    port = free_port()
    refused = four_bots_yaml(fakes).replace(fakes.support.token, "333:not-this-bot")

    def support_down(daemon: App) -> bool:
        return daemon.started and daemon.channel_states().get("support") == "down"

    config = config_yaml(tmp_path, f"health: {{enabled: true, port: {port}}}\n", refused)
    async with daemon_running(config, ready=support_down) as daemon:
        states = daemon.channel_states()
        fakes.telegram.push_text(CHAT, "still there?")
        await until(lambda: fakes.telegram.visible(CHAT), "the first bot's answer")
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as resp,
        ):
            assert resp.status == 503
            body = await resp.json()
    assert states["support"] == "down" and states["telegram"] == "running"
    assert fakes.telegram.visible(CHAT) == ["You said: still there?"]
    assert fakes.support.visible(CHAT) == []
    assert body["channels"]["support"] == "down"
    [problem] = body["problems"]
    assert problem.startswith("channel support: down (")
