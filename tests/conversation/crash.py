"""What the crash tests share: a Telegram DM, the notice a resumed answer starts with, and a
long streamed answer to cut in the middle."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropicAPI, StreamReply, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI

DM = 777
TOKEN = "123456:TEST-TOKEN"
NOTICE = "(The answer was interrupted by a restart; continuing.)"
PARAGRAPHS = [f"Paragraph {n:02d} of the long answer." for n in range(1, 31)]


def long_answer(delay: float) -> StreamReply:
    return stream(text(*(p + "\n\n" for p in PARAGRAPHS)), delay=delay)


def crash_config(
    path: Path,
    state: Path,
    telegram: FakeTelegramAPI,
    model: FakeAnthropicAPI,
    extra: str = "",
    *,
    via: str | None = None,
) -> Path:
    """``botd.yaml`` for a crash test: a Telegram DM answered in blocks by the fake model;
    ``extra`` sections go at the end; ``via``: the path prefix botd reaches ``telegram``
    under (``base_url_via``; one of several nodes sharing it)."""
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
channels:
  telegram:
    token: ${{TELEGRAM_TEST_TOKEN}}
    api_base_url: {json.dumps(telegram.base_url if via is None else telegram.base_url_via(via))}
    dm_policy: open
{extra}""",
        encoding="utf-8",
    )
    return config
