"""Files sent on Slack and Discord reach the model too, end to end: slack-bolt and
discord.py inside botd against their loopback fakes, the Anthropic fake answering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
)
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.media.files import JPEG, PNG
from tests.media.telegram_botd import images, texts
from tests.waiting import until

BOT_TOKEN = "xoxb-media-test"


def _slack_yaml(slack: FakeSlack) -> str:
    return f"""channels:
  slack:
    bot_token: {BOT_TOKEN}
    app_token: xapp-test
    api_base_url: {json.dumps(slack.base_url)}
    dm_policy: open
"""


def _dm_with_file(
    slack: FakeSlack, ts: str, text_: str, file: dict[str, object]
) -> dict[str, object]:
    return event_callback(
        {
            "type": "message",
            "subtype": "file_share",
            "channel": "D1",
            "channel_type": "im",
            "user": "U1",
            "text": text_,
            "ts": ts,
            "files": [file],
        }
    )


def _user_content(model: FakeAnthropicAPI) -> list[dict[str, Any]]:
    messages = model.requests[-1].body["messages"]
    content = [m for m in messages if m["role"] == "user"][-1]["content"]
    assert isinstance(content, list)
    return content


async def test_a_slack_image_reaches_the_model_fetched_with_the_bot_token(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(tmp_path, anthropic_yaml(model), _slack_yaml(slack))
        ready = lambda d: d.runtime is not None and "slack" in d.runtime.adapters  # noqa: E731
        async with daemon_running(config, ready=ready):
            await slack.wait_socket(HANG_GUARD)
            model.push(stream(text("A chart.")))
            file = slack.add_file(PNG, name="chart.png", mimetype="image/png", token=BOT_TOKEN)
            await slack.send_event(_dm_with_file(slack, "1.000001", "what is this", file))
            await until(
                lambda: slack.calls_to("chat.postMessage"), 'slack.calls_to("chat.postMessage")'
            )
    content = _user_content(model)
    assert images(content) == [PNG]
    assert "what is this" in texts(content)
    assert [token for _, token in slack.file_downloads] == [BOT_TOKEN]


async def test_a_slack_file_refused_for_want_of_files_read_gets_one_line(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(tmp_path, anthropic_yaml(model), _slack_yaml(slack))
        ready = lambda d: d.runtime is not None and "slack" in d.runtime.adapters  # noqa: E731
        async with daemon_running(config, ready=ready):
            await slack.wait_socket(HANG_GUARD)
            # Served only for another token: Slack answers with its sign-in page.
            file = slack.add_file(PNG, name="chart.png", mimetype="image/png", token="xoxb-other")
            await slack.send_event(_dm_with_file(slack, "1.000002", "", file))
            await until(
                lambda: slack.calls_to("chat.postMessage"), 'slack.calls_to("chat.postMessage")'
            )
    [call] = slack.calls_to("chat.postMessage")
    assert "files:read" in str(call.args["text"])
    assert model.requests == []


async def test_a_discord_image_attachment_reaches_the_model(tmp_path: Path) -> None:
    async with FakeDiscordAPI() as discord, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            f"""channels:
  discord:
    token: discord-test-token
    api_base_url: {json.dumps(discord.base_url)}
    gateway_url: {json.dumps(discord.gateway_url)}
    guild_ready_timeout: 0.05
    dm_policy: open
""",
        )

        def ready(daemon: Any) -> bool:
            return daemon.runtime is not None and "discord" in daemon.runtime.adapters

        async with daemon_running(config, ready=ready):
            model.push(stream(text("A cat.")))
            photo = discord.attachment(JPEG, "cat.jpg", "image/jpeg")
            await discord.dispatch_message(
                discord.message(
                    "who is this?", channel_id=DM_CHANNEL_ID, guild=False, attachments=[photo]
                )
            )
            await until(lambda: discord.message_posts(), "discord.message_posts()")
    content = _user_content(model)
    assert images(content) == [JPEG]
    assert "who is this?" in texts(content)
    assert len(discord.attachment_downloads) == 1
