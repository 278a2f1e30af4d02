"""What the crash tests share: a Telegram DM (or a Slack one), the notice a resumed answer
starts with, and a long streamed answer to cut in the middle."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropicAPI, StreamReply, stream, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI

DM = 777
TOKEN = "123456:TEST-TOKEN"
NOTICE = "(The answer was interrupted by a restart; continuing.)"
PARAGRAPHS = [f"Paragraph {n:02d} of the long answer." for n in range(1, 9)]
"""A long answer: one block each. Telegram takes about one message a second in a chat, and
botd keeps to it, so every paragraph costs a second of the test once the model is done."""


def long_answer(delay: float) -> StreamReply:
    return stream(text(*(p + "\n\n" for p in PARAGRAPHS)), delay=delay)


def crash_config(
    path: Path,
    state: Path,
    telegram: FakeTelegramAPI,
    model: FakeAnthropicAPI,
    extra: str = "",
    node: str = "",
    tools: str = "",
) -> Path:
    """``botd.yaml`` for a crash test: a Telegram DM answered in blocks by the fake model;
    ``extra`` sections go at the end; ``node``: reach Telegram through ``node_url(node)``
    (one of several nodes sharing the fake); ``tools``: the agent's, if not the default."""
    config = path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(state))}
health: {{enabled: false}}
shutdown_grace: 1
model:
  provider: anthropic
  name: claude-test
  api_key: ${{ANTHROPIC_TEST_KEY}}
  base_url: {json.dumps(model.base_url)}
  max_retry_wait: 1
agent:
  block_streaming: {{min_chars: 10, max_chars: 200}}
{f"  tools: {tools}" if tools else ""}
channels:
  telegram:
    token: ${{TELEGRAM_TEST_TOKEN}}
    api_base_url: {json.dumps(telegram.node_url(node) if node else telegram.base_url)}
    dm_policy: open
{extra}""",
        encoding="utf-8",
    )
    return config


def slack_crash_config(
    path: Path, state: Path, slack: FakeSlack, model: FakeAnthropicAPI, extra: str = ""
) -> Path:
    """``botd.yaml`` for a crash test on Slack (Socket Mode over ``slack``), DMs open;
    ``extra`` lines go at the end of its channel section."""
    config = path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(state))}
health: {{enabled: false}}
shutdown_grace: 1
model:
  provider: anthropic
  name: claude-test
  api_key: ${{ANTHROPIC_TEST_KEY}}
  base_url: {json.dumps(model.base_url)}
  max_retry_wait: 1
channels:
  slack:
    bot_token: xoxb-test
    app_token: xapp-test
    api_base_url: {json.dumps(slack.base_url)}
    dm_policy: open
{extra}""",
        encoding="utf-8",
    )
    return config
