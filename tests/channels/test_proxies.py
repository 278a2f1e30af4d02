"""``proxy:``: every connection of Telegram, Slack (Web API and Socket Mode), Discord (REST and
gateway, file downloads) and the model goes through the proxy its section names, an HTTP
one or a SOCKS5 one, each with credentials.

The real daemon with the real SDKs over the loopback fakes, one daemon per proxy kind
carrying all four. The fakes listen on 127.0.0.1 and the tests set ``NO_PROXY`` to it
(``tests/conftest.py``), so a proxy the SDK skipped for loopback would show here as a
passage missing from the proxy's record.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from botd.app import App
from botd.channels.base import Ack, ChannelAdapter, OutboundFile
from botd.channels.discord.adapter import DiscordAdapter
from botd.channels.errors import ChannelStartError
from botd.channels.slack.adapter import SlackAdapter
from botd.channels.telegram.adapter import TelegramAdapter
from botd.chat import InboundMessage, Target
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscordAPI
from tests.fakes.proxies import HttpProxy, Socks5Proxy
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import config_yaml, daemon_running, telegram_yaml
from tests.support.health_probe import free_port
from tests.support.waiting import HANG_GUARD, until

USER = "botd"
PASSWORD = "Pq7sW2nXv9"
"""The proxy's password: given as ``${PROXY_PASSWORD}``, never in a line botd writes."""
TELEGRAM_DM = 777


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def _config(
    tmp_path: Path,
    proxy: str,
    model: FakeAnthropicAPI,
    telegram: FakeTelegramAPI,
    slack: FakeSlack,
    discord: FakeDiscordAPI,
) -> str:
    where = json.dumps(proxy)
    return config_yaml(
        tmp_path,
        f"""model:
  provider: anthropic
  name: claude-test
  api_key: sk-ant-test
  base_url: {json.dumps(model.base_url)}
  max_retry_wait: 1
  proxy: {where}
channels:
  telegram:
    token: {json.dumps(telegram.token)}
    api_base_url: {json.dumps(telegram.base_url)}
    dm_policy: open
    poll_timeout: 1
    proxy: {where}
  slack:
    bot_token: xoxb-test
    app_token: xapp-test
    api_base_url: {json.dumps(slack.base_url)}
    dm_policy: open
    proxy: {where}
  discord:
    token: fake-discord-token
    api_base_url: {json.dumps(discord.base_url)}
    gateway_url: {json.dumps(discord.gateway_url)}
    guild_ready_timeout: 0.05
    dm_policy: open
    proxy: {where}
""",
    )


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeTelegramAPI, FakeSlack, FakeDiscordAPI]]:
    async with FakeTelegramAPI() as telegram, FakeSlack() as slack, FakeDiscordAPI() as discord:
        yield telegram, slack, discord


@pytest.mark.parametrize("kind", [HttpProxy, Socks5Proxy])
async def test_each_platform_and_the_model_answer_through_the_proxy(
    tmp_path: Path,
    kind: type[HttpProxy | Socks5Proxy],
    model: FakeAnthropicAPI,
    fakes: tuple[FakeTelegramAPI, FakeSlack, FakeDiscordAPI],
) -> None:
    telegram, slack, discord = fakes
    model.push(*(stream(text(f"answer {n}")) for n in range(3)))
    async with kind(user=USER, password=PASSWORD) as proxy:
        config = _config(tmp_path, proxy.url, model, telegram, slack, discord)

        def ready(daemon: App) -> bool:
            adapters = daemon.runtime.adapters if daemon.runtime is not None else {}
            return {"telegram", "slack", "discord"} <= set(adapters)

        async with daemon_running(config, ready=ready):
            # A file: its download goes through the proxy too.
            telegram.push_file(
                TELEGRAM_DM,
                "document",
                b"the notes",
                caption="hello from telegram",
                file_name="notes.txt",
                mime_type="text/plain",
            )
            await until(lambda: telegram.visible(TELEGRAM_DM), "the Telegram answer")
            await slack.wait_socket(HANG_GUARD)
            await slack.send_event(
                event_callback(
                    {
                        "type": "message",
                        "channel": "D1",
                        "channel_type": "im",
                        "user": "U1",
                        "text": "hello from slack",
                        "ts": "1700000100.000002",
                    }
                )
            )
            await until(lambda: slack.visible("D1"), "the Slack answer")
            await discord.dispatch_message(
                discord.message("hello from discord", channel_id=DM_CHANNEL_ID, guild=False)
            )
            await until(lambda: discord.visible(DM_CHANNEL_ID), "the Discord answer")
        answers = {
            *telegram.visible(TELEGRAM_DM),
            *slack.visible("D1"),
            *discord.visible(DM_CHANNEL_ID),
        }
        assert answers == {"answer 0", "answer 1", "answer 2"}
        for name, url in [
            ("telegram", telegram.base_url),
            ("slack", slack.base_url),
            ("discord", discord.base_url),
            ("the model", model.base_url),
        ]:
            assert proxy.reached(_port(url)), f"{name} went around the proxy: {proxy.passages}"
        assert proxy.refused == 0
        # The websockets too (Slack's Socket Mode, Discord's gateway) and the file download:
        # each proxy notes the plain HTTP requests it carried (the fakes speak plain HTTP).
        paths = {path.partition("?")[0] for _, path in proxy.requests}
        assert {"/link/", "/gateway/"} <= paths
        assert any(path.startswith("/file/bot") for path in paths)


async def _ignore(message: InboundMessage, *, ack: Ack | None = None) -> None:
    return None


def _adapter(
    platform: str,
    proxy: str | None,
    fakes: tuple[FakeTelegramAPI, FakeSlack, FakeDiscordAPI],
) -> ChannelAdapter:
    """An adapter of ``platform`` on its fake through ``proxy``, as the instance ``support``."""
    telegram, slack, discord = fakes
    if platform == "telegram":
        return TelegramAdapter(
            telegram.token, channel="support", api_base_url=telegram.base_url, proxy=proxy
        )
    if platform == "slack":
        return SlackAdapter(
            channel="support",
            bot_token="xoxb-test",
            app_token="xapp-test",
            api_base_url=slack.base_url,
            proxy=proxy,
        )
    return DiscordAdapter(
        "fake-discord-token",
        channel="support",
        api_base_url=discord.base_url,
        gateway_url=discord.gateway_url,
        guild_ready_timeout=0.05,
        proxy=proxy,
    )


@pytest.mark.parametrize("platform", ["telegram", "slack", "discord"])
@pytest.mark.parametrize("kind", [HttpProxy, Socks5Proxy])
async def test_a_wrong_proxy_password_fails_the_start_naming_the_key_not_the_password(
    kind: type[HttpProxy | Socks5Proxy],
    platform: str,
    fakes: tuple[FakeTelegramAPI, FakeSlack, FakeDiscordAPI],
) -> None:
    async with kind(user=USER, password=PASSWORD) as proxy:
        wrong = proxy.url_with(USER, "Wr0ngPassw0rd")
        adapter = _adapter(platform, wrong, fakes)
        with pytest.raises(ChannelStartError) as caught:
            await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
        assert proxy.refused >= 1 and proxy.passages == []
    message = str(caught.value)
    assert "refused the credentials" in message
    assert "check the user and password of channels.support.proxy" in message
    assert f"{kind.scheme}://{USER}:***@127.0.0.1:{proxy.port}" in message
    assert "Wr0ngPassw0rd" not in message and PASSWORD not in message


@pytest.mark.parametrize("platform", ["telegram", "slack", "discord"])
@pytest.mark.parametrize("setting", [None, "direct"])
async def test_the_environment_s_proxy_is_taken_unless_the_section_says_direct(
    monkeypatch: pytest.MonkeyPatch,
    setting: str | None,
    platform: str,
    fakes: tuple[FakeTelegramAPI, FakeSlack, FakeDiscordAPI],
) -> None:
    """Unset, ``HTTP(S)_PROXY`` is taken (Discord's too, which discord.py alone ignores);
    ``direct`` goes around it."""
    async with HttpProxy() as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY")
        monkeypatch.delenv("no_proxy")
        adapter = _adapter(platform, setting, fakes)
        try:
            await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
        finally:
            await adapter.stop()
        telegram, slack, discord = fakes
        url = {"telegram": telegram.base_url, "slack": slack.base_url}.get(platform)
        assert proxy.reached(_port(url or discord.base_url)) is (setting is None)
        if setting == "direct":
            assert proxy.passages == []


async def test_a_wrong_proxy_password_shows_in_the_log_and_healthz_masked(
    tmp_path: Path, telegram: FakeTelegramAPI, capfd: pytest.CaptureFixture[str]
) -> None:
    """The daemon's own lines of a channel its proxy refused: the channel named, the
    password nowhere (it is a URL password: a secret botd masks wherever it appears)."""
    port = free_port()
    async with HttpProxy(user=USER, password=PASSWORD) as proxy:
        wrong = proxy.url_with(USER, "Wr0ngPassw0rd")
        config = config_yaml(
            tmp_path,
            f"health: {{host: 127.0.0.1, port: {port}}}\n",
            telegram_yaml(telegram, "poll_timeout: 1", f"proxy: {json.dumps(wrong)}"),
        )
        async with daemon_running(config), aiohttp.ClientSession() as http:

            async def healthz() -> dict[str, Any] | None:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                    body: dict[str, Any] = await response.json()
                    return body if response.status == 503 else None

            body = await until(healthz, "/healthz naming the channel down")
        assert proxy.refused >= 1
    said = json.dumps(body) + capfd.readouterr().err
    assert "channels.telegram.proxy" in said and "refused the credentials" in said
    assert "channel telegram down: " in said
    assert "Wr0ngPassw0rd" not in said and PASSWORD not in said


async def test_a_slack_upload_goes_through_the_socks_proxy_too(
    fakes: tuple[FakeTelegramAPI, FakeSlack, FakeDiscordAPI],
) -> None:
    """``files_upload_v2`` posts the bytes to the URL Slack issued outside the Web API
    calls: through SOCKS too (an HTTP proxy is the SDK's own for both)."""
    _, slack, _ = fakes
    async with Socks5Proxy(user=USER, password=PASSWORD) as proxy:
        adapter = _adapter("slack", proxy.url, fakes)
        try:
            await asyncio.wait_for(adapter.start(_ignore), HANG_GUARD)
            await adapter.send_file(Target("support", "C1"), OutboundFile(b"a note", "note.txt"))
        finally:
            await adapter.stop()
    assert list(slack.uploaded.values()) == [b"a note"]
    assert [path for _, path in proxy.requests if path.startswith("/upload/")]
