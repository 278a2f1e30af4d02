"""``chunk_mode`` and ``text_chunk_limit`` per channel: how replies are cut into messages.

The real daemon with the real SDKs over the loopback fakes; the config checks go through
``load_config`` as ``botd check`` does.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from botd.channels.console.adapter import ConsoleAdapter
from botd.channels.discord.adapter import DiscordAdapter
from botd.channels.discord.spec import DiscordSection
from botd.channels.slack.adapter import SlackAdapter
from botd.channels.slack.spec import SlackSection
from botd.channels.telegram.adapter import TelegramAdapter
from botd.channels.telegram.spec import TelegramSection
from botd.chat import Target
from botd.config import ConfigError, load_config
from botd.delivery import ChannelDelivery, ChunkSettings
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    slack_yaml,
    telegram_yaml,
)
from tests.support.waiting import until

CHAT = 777
PARAGRAPHS = ["First, the queue is empty.", "Second, the disk is fine.", "Third, all quiet."]


async def test_newline_mode_on_telegram_posts_a_message_per_paragraph(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    model.push(stream(text("\n\n".join(PARAGRAPHS))))
    async with FakeTelegramAPI() as telegram:
        options = ("poll_timeout: 1", "dm_policy: open", "chunk_mode: newline")
        config = config_yaml(tmp_path, anthropic_yaml(model), telegram_yaml(telegram, *options))
        async with daemon_running(config):
            telegram.push_text(CHAT, "how is it going?")
            await until(lambda: len(telegram.visible(CHAT)) >= 3, "three messages")
        assert telegram.visible(CHAT) == PARAGRAPHS


async def test_a_text_chunk_limit_on_slack_cuts_a_long_answer_under_it(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    sentences = [f"Sentence {n:02d} of a long answer that goes on for a while." for n in range(30)]
    answer = " ".join(sentences)  # about 1,800 characters: one message at Slack's own limit
    model.push(stream(text(answer)))
    async with FakeSlack() as slack:
        options = ("dm_policy: open", "delivery: final", "text_chunk_limit: 500")
        config = config_yaml(tmp_path, anthropic_yaml(model), slack_yaml(slack, *options))
        async with daemon_running(config):
            await slack.send_slash_command("/botd", "tell me everything", channel="D1")

            def posted() -> list[str]:
                return [str(c.args.get("text")) for c in slack.calls_to("chat.postMessage")]

            await until(lambda: " ".join(posted()) == answer, "the whole answer")
    texts = posted()
    assert len(texts) >= 4
    assert all(len(part) <= 500 for part in texts)


def _problems(tmp_path: Path, text: str) -> dict[str, tuple[int | None, str]]:
    path = tmp_path / "botd.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    return {p.path: (p.line, p.message) for p in caught.value.problems}


def test_botd_check_refuses_limits_outside_the_platform_and_unknown_modes(
    tmp_path: Path,
) -> None:
    found = _problems(
        tmp_path,
        """
        channels:
          discord:
            token: t
            text_chunk_limit: 2001
          telegram:
            token: t
            text_chunk_limit: 50
          slack:
            bot_token: b
            app_token: a
            chunk_mode: paragraph
          console:
            enabled: true
            text_chunk_limit: 99
        """,
    )
    assert found == {
        "channels.discord.text_chunk_limit": (
            4,
            "must be at most 2000, the platform's own limit, got 2001",
        ),
        "channels.telegram.text_chunk_limit": (7, "must be at least 100 characters, got 50"),
        "channels.slack.chunk_mode": (11, "expected 'length' or 'newline', got 'paragraph'"),
        "channels.console.text_chunk_limit": (14, "must be at least 100 characters, got 99"),
    }


def test_each_platforms_ceiling_is_its_adapters_limit() -> None:
    for section, adapter in [
        (TelegramSection, TelegramAdapter),
        (SlackSection, SlackAdapter),
        (DiscordSection, DiscordAdapter),
    ]:
        assert section.platform_text_limit == adapter.capabilities.text_limit


async def test_the_console_in_newline_mode_prints_a_message_per_line_under_its_limit() -> None:
    output = io.StringIO()
    console = ConsoleAdapter(output=output)
    delivery = ChannelDelivery(
        {"console": console}, chunking={"console": ChunkSettings("newline", 100)}
    )
    refs = await delivery.send_text(Target("console", "local"), "one\ntwo\n" + "x" * 150)
    assert len(refs) == 4
    assert output.getvalue() == "one\ntwo\n" + "x" * 100 + "\n" + "x" * 50 + "\n"
