"""``link_previews``: off in one chat, on in another, on each platform; what the fakes
received of each message botd posted. The whole daemon with the real SDKs over the loopback
fakes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from botd.app import App
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.discord_api import CHANNEL_ID, DM_CHANNEL_ID, FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    discord_yaml,
    slack_yaml,
    telegram_yaml,
)
from tests.support.waiting import until

QUIET = "Quiet: https://example.com/quiet"
LOUD = "Loud: https://example.com/loud"
SUPPRESS_EMBEDS = 1 << 2
"""Discord's message flag for a message that shows no embeds (4)."""


async def test_telegram_previews_off_in_one_group_and_on_in_another(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    quiet_group, loud_group = -1001, -1002
    model.push(stream(text(QUIET)), stream(text(LOUD)))
    async with FakeTelegramAPI() as telegram:
        section = telegram_yaml(
            telegram,
            "groups:",
            f'  "{quiet_group}": {{require_mention: false, link_previews: false}}',
            f'  "{loud_group}": {{require_mention: false}}',
        )
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)):
            telegram.push_text(quiet_group, "a link please")
            await until(lambda: telegram.visible(quiet_group) != [], "the quiet group's answer")
            telegram.push_text(loud_group, "a link please")
            await until(lambda: telegram.visible(loud_group) != [], "the loud group's answer")
        options = {
            int(c.params["chat_id"]): c.params.get("link_preview_options")
            for c in telegram.calls_to("sendMessage", ok_only=True)
        }
    assert options == {quiet_group: {"is_disabled": True}, loud_group: None}


def _channel_message(channel: str, said: str, ts: str) -> dict[str, Any]:
    return event_callback(
        {
            "type": "message",
            "channel": channel,
            "channel_type": "channel",
            "user": "U1",
            "text": said,
            "ts": ts,
        }
    )


async def test_slack_unfurls_off_in_one_channel_and_on_in_another(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    model.push(stream(text(QUIET)), stream(text(LOUD)))
    async with FakeSlack() as slack:
        section = slack_yaml(
            slack,
            "groups:",
            "  C1: {require_mention: false, link_previews: false}",
            "  C2: {require_mention: false}",
        )
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)):
            await slack.send_event(_channel_message("C1", "a link please", "100.000001"))
            await until(lambda: slack.visible("C1") != [], "C1's answer")
            await slack.send_event(_channel_message("C2", "a link please", "100.000002"))
            await until(lambda: slack.visible("C2") != [], "C2's answer")
        posts = {
            str(c.args["channel"]): (c.args.get("unfurl_links"), c.args.get("unfurl_media"))
            for c in slack.calls
            if c.method == "chat.postMessage"
        }
    assert posts == {"C1": (False, False), "C2": (None, None)}


async def test_discord_embeds_off_on_the_channel_and_on_in_one_group(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    model.push(stream(text(QUIET)), stream(text(LOUD)))
    async with FakeDiscordAPI() as discord:
        section = discord_yaml(
            discord,
            "dm_policy: open",
            "link_previews: false",
            "groups:",
            f'  "{CHANNEL_ID}": {{require_mention: false, link_previews: true}}',
        )

        def ready(daemon: App) -> bool:
            return daemon.runtime is not None and "discord" in daemon.runtime.adapters

        config = config_yaml(tmp_path, anthropic_yaml(model), section)
        async with daemon_running(config, ready=ready):
            dm = discord.message("a link please", channel_id=DM_CHANNEL_ID, guild=False)
            await discord.dispatch_message(dm)
            await until(lambda: discord.visible(DM_CHANNEL_ID) != [], "the DM's answer")
            await discord.dispatch_message(discord.message("a link please"))
            await until(lambda: discord.visible(CHANNEL_ID) != [], "the channel's answer")
        flags = {
            r.path.split("/channels/")[1].split("/")[0]: r.body.get("flags", 0)
            for r in discord.message_posts()
        }
    assert flags[str(DM_CHANNEL_ID)] & SUPPRESS_EMBEDS
    assert not flags[str(CHANNEL_ID)] & SUPPRESS_EMBEDS
