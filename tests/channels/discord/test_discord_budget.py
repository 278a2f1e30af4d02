"""Discord's buckets end to end: the whole daemon and discord.py against the fake putting each
channel's message posts in a bucket of five per five seconds, told in every answer's
``X-RateLimit-*`` headers and enforced with 429s (``FakeDiscordAPI.limit_like_discord``). A
long answer (more messages than a bucket holds, status reactions on by default) is posted
whole, each message once, and Discord refuses none: discord.py reads the buckets and waits
before the limit, each call in its turn in botd's budget (``botd.channels.discord.budget``).
What is asserted is what the fake saw, never how long it took.
"""

from __future__ import annotations

from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscordAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    discord_yaml,
)
from tests.support.waiting import until

LINES = 130
"""Lines in the answer: Discord's messages hold 17 each here, so eight messages."""


async def test_a_long_answer_keeps_to_discords_buckets(tmp_path: Path) -> None:
    async with FakeDiscordAPI() as discord, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        discord.limit_like_discord()
        model.push(stream(text("\n".join(f"line {n}." for n in range(LINES)))))
        section = discord_yaml(discord, "dm_policy: open")
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)):
            said = discord.message("tell me", channel_id=DM_CHANNEL_ID, guild=False)
            await discord.dispatch_message(said)

            def whole() -> bool:
                return f"line {LINES - 1}." in "\n".join(discord.visible(DM_CHANNEL_ID))

            await until(whole, "the whole answer posted")
        shown = "\n".join(discord.visible(DM_CHANNEL_ID)).split("\n")
        assert discord.rate_limited == []
        assert len(discord.message_posts()) > 5  # past one bucket's five
        assert [line for line in shown if line.startswith("line ")] == [
            f"line {n}." for n in range(LINES)
        ]
