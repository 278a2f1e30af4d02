"""How adapters report a failed start and a channel that stopped working, in words that point
at the fix: Telegram's 404 (a wrong ``api_base_url``) against its 401 (a refused token), a
revoked Telegram token while polling, Slack's refused app-level token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from botd.channels.base import Ack
from botd.channels.errors import ChannelStartError
from botd.channels.slack.adapter import SlackAdapter
from botd.channels.telegram.adapter import TelegramAdapter
from botd.channels.telegram.spec import TelegramSection
from botd.chat import InboundMessage
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import HANG_GUARD

TOKEN = "123456:TEST-TOKEN"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI(TOKEN) as api:
        yield api


async def _ignore(message: InboundMessage, *, ack: Ack | None = None) -> None:
    return None


async def test_a_404_from_get_me_says_check_api_base_url(telegram: FakeTelegramAPI) -> None:
    adapter = TelegramAdapter(TOKEN, api_base_url=f"{telegram.base_url}/wrong")
    with pytest.raises(ChannelStartError) as caught:
        await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
    message = str(caught.value)
    assert "404" in message and "check api_base_url" in message
    assert "rejected" not in message
    assert TOKEN not in message


async def test_a_401_from_get_me_says_the_token_was_rejected(telegram: FakeTelegramAPI) -> None:
    adapter = TelegramAdapter("999:WRONG", api_base_url=telegram.base_url)
    with pytest.raises(ChannelStartError) as caught:
        await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
    message = str(caught.value)
    assert "token was rejected" in message and "api_base_url" not in message
    assert "999:WRONG" not in message


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("https://api.telegram.org/bot", "https://api.telegram.org"),
        ("https://api.telegram.org/bot/", "https://api.telegram.org"),
        ("http://127.0.0.1:8081/", "http://127.0.0.1:8081"),
        ("https://proxy.example/tg/robot", "https://proxy.example/tg/robot"),
    ],
)
def test_a_trailing_bot_in_api_base_url_is_dropped(given: str, used: str) -> None:
    assert TelegramSection(token="t", api_base_url=given).api_base_url == used


async def test_ptb_s_own_url_form_starts(telegram: FakeTelegramAPI) -> None:
    section = TelegramSection(token=TOKEN, api_base_url=f"{telegram.base_url}/bot")
    adapter = TelegramAdapter(TOKEN, api_base_url=section.api_base_url, poll_timeout=1)
    try:
        await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
    finally:
        await adapter.stop()
    assert [c.status for c in telegram.calls_to("getMe")] != []


async def test_a_token_revoked_while_polling_reports_the_channel_down(
    telegram: FakeTelegramAPI,
) -> None:
    reports: asyncio.Queue[str] = asyncio.Queue()
    adapter = TelegramAdapter(
        TOKEN,
        api_base_url=telegram.base_url,
        poll_timeout=1,
        conflict_backoff=(0.01, 0.05),
        on_down=reports.put_nowait,
    )
    await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
    try:
        telegram.token = "456:OTHER"  # every call from now on answers 401
        reason = await asyncio.wait_for(reports.get(), HANG_GUARD)
    finally:
        await asyncio.wait_for(adapter.stop(), HANG_GUARD)
    assert "getUpdates" in reason and "rejected" in reason
    assert TOKEN not in reason


async def test_a_refused_app_token_fails_the_slack_start() -> None:
    async with FakeSlack() as slack:
        slack.fail_next("apps.connections.open", "invalid_auth")
        adapter = SlackAdapter(
            bot_token="xoxb-test", app_token="xapp-test", api_base_url=slack.base_url
        )
        with pytest.raises(ChannelStartError, match="invalid_auth") as caught:
            await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
        await adapter.stop()
        assert "app_token" in str(caught.value)
        # Asked once: no retry loop inside the SDK, and no socket was opened.
        assert len(slack.calls_to("apps.connections.open")) == 1
        assert slack.connections == 0


async def test_a_slack_socket_start_asks_for_one_url_and_connects() -> None:
    async with FakeSlack() as slack:
        adapter = SlackAdapter(
            bot_token="xoxb-test", app_token="xapp-test", api_base_url=slack.base_url
        )
        await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
        try:
            assert len(slack.calls_to("apps.connections.open")) == 1
            assert slack.calls_to("apps.connections.open")[0].token == "xapp-test"
        finally:
            await adapter.stop()


async def test_a_discord_connection_ended_for_good_reports_the_channel_down() -> None:
    from botd.channels.discord.adapter import DiscordAdapter
    from tests.fakes.discord_api import FakeDiscordAPI

    reports: asyncio.Queue[str] = asyncio.Queue()
    async with FakeDiscordAPI() as discord:
        adapter = DiscordAdapter(
            "discord-token",
            api_base_url=discord.base_url,
            gateway_url=discord.gateway_url,
            guild_ready_timeout=0.05,
            ready_timeout=HANG_GUARD,
            on_down=reports.put_nowait,
        )
        await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
        try:
            await discord.drop_connection(4004)  # authentication failed: not resumable
            reason = await asyncio.wait_for(reports.get(), HANG_GUARD)
        finally:
            await adapter.stop()
    assert reason.startswith("Discord connection ended") and "\n" not in reason
    assert reports.empty()  # stop() itself reports nothing
