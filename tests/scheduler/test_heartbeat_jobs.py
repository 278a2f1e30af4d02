"""Heartbeat checks: a scheduled job whose quiet answer, ``HEARTBEAT_OK``, is never posted.

The real daemon in the test's loop, python-telegram-bot over the loopback Bot API and the
Anthropic SDK over the loopback Messages API. The job is due when the daemon starts (``at``
now), so its run starts at once; every wait is a condition with a hang guard.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from botd.app import App
from botd.store.sqlite import SqliteStore
from botd.subscriber import HEARTBEAT_INSTRUCTION
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.waiting import until

CHAT = 777
PROMPT = "Check the deploy queue."
QUIET = "heartbeat check: nothing needs attention, nothing posted"


class Lines(logging.Handler):
    """Every line ``botd.conversation`` logs."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def session_log() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("botd.conversation")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _config(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    model: FakeAnthropicAPI,
    heartbeat: str | None = "true",
) -> str:
    job = (
        ""
        if heartbeat is None
        else f"""scheduler:
  jobs:
    - id: queue-watch
      at: {json.dumps(datetime.now(UTC).isoformat())}
      prompt: {json.dumps(PROMPT)}
      heartbeat: {heartbeat}
      deliver_to: {{channel: telegram, chat: {CHAT}}}
"""
    )
    return config_yaml(
        tmp_path,
        "shutdown_grace: 0\n",
        anthropic_yaml(model),
        telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open"),
        job,
    )


def _store(daemon: App) -> SqliteStore:
    return daemon_store(daemon)


def _answered(daemon: App) -> bool:
    """The job's run (the first inbox row of a fresh state dir) is marked answered."""
    return _store(daemon).inbox_state(1) == "answered"


def _sent(telegram: FakeTelegramAPI) -> list[str]:
    return [str(call.params["text"]) for call in telegram.calls_to("sendMessage")]


def _prompts(model: FakeAnthropicAPI, index: int) -> str:
    return json.dumps(model.requests[index].body["messages"])


async def test_a_quiet_heartbeat_posts_nothing_and_its_run_is_answered(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, session_log: Lines
) -> None:
    model.push(stream(text("HEARTBEAT_OK")), stream(text("Hello there.")))
    async with daemon_running(_config(tmp_path, telegram, model)) as daemon:
        await until(lambda: _answered(daemon), "the heartbeat run answered")
        assert _store(daemon).unfinished_inbox() == []
        # The bot still answers people: what it posts after the check is this answer alone.
        telegram.push_text(CHAT, "hi")
        await until(lambda: _sent(telegram) != [], "the answer to hi")
    assert _sent(telegram) == ["Hello there."]
    assert telegram.calls_to("sendChatAction") == []  # no "typing…" for a check either
    assert HEARTBEAT_INSTRUCTION in _prompts(model, 0)  # the agent was told how to say so
    assert session_log.lines.count(QUIET) == 1


async def test_an_alert_is_posted_without_the_token(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, session_log: Lines
) -> None:
    # A remark longer than ack_max_chars beside the token is an alert, not an acknowledgement.
    model.push(stream(text("HEARTBEAT_OK\n\nTwo deploys are stuck in the queue.")))
    config = _config(tmp_path, telegram, model, heartbeat="{ack_max_chars: 10}")
    async with daemon_running(config) as daemon:
        await until(lambda: _answered(daemon), "the heartbeat run answered")
    assert _sent(telegram) == ["Two deploys are stuck in the queue."]
    assert QUIET not in session_log.lines


async def test_a_short_remark_beside_the_token_is_an_acknowledgement(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    model.push(stream(text("All quiet. HEARTBEAT_OK")))
    async with daemon_running(_config(tmp_path, telegram, model)) as daemon:
        await until(lambda: _answered(daemon), "the heartbeat run answered")
    assert _sent(telegram) == []


async def test_a_heartbeat_run_cut_by_a_restart_resumes_and_still_posts_nothing(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, session_log: Lines
) -> None:
    model.push(stream(stall=True))  # the model takes the check and says nothing yet
    async with daemon_running(_config(tmp_path, telegram, model)) as daemon:
        await until(lambda: len(model.requests) == 1, "the model asked")
    # Stopped mid-run (no grace): the run is left for the next start.
    with SqliteStore.open(tmp_path / "state") as store:
        assert store.inbox_state(1) == "running"

    model.push(stream(text("HEARTBEAT_OK")))
    # The job is gone from the config: what runs now is the run the inbox kept.
    async with daemon_running(_config(tmp_path, telegram, model, heartbeat=None)) as daemon:
        await until(lambda: _answered(daemon), "the resumed heartbeat run answered")
    assert _sent(telegram) == []  # neither an interruption notice nor the token
    assert len(model.requests) == 2
    assert _prompts(model, 1).count(PROMPT) == 1  # the check went on from its transcript
    assert session_log.lines.count(QUIET) == 1
