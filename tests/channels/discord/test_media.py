"""Files sent on Discord reach the model, end to end: discord.py inside botd against its
loopback fake, the Anthropic fake answering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscordAPI
from tests.media.files import JPEG
from tests.media.telegram_botd import images, last_user_content, texts
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    anthropic_yaml,
    config_yaml,
    daemon_running,
)
from tests.support.waiting import until


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
    content = last_user_content(model)
    assert images(content) == [JPEG]
    assert "who is this?" in texts(content)
    assert len(discord.attachment_downloads) == 1
