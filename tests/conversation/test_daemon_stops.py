"""Stops and stalls end to end: ``botd run`` in a subprocess, Telegram and Anthropic over their
loopback fakes (real SDKs). After ``/stop`` or SIGTERM the chat gets nothing but the stop's
confirmation; a model that stays silent gets one line to the user."""

from __future__ import annotations

import json
from pathlib import Path

from botd.agent.providers.waits import NO_ANSWER_IN_TIME
from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import HANG_GUARD, RunningDaemon, reap, start_daemon, stop_daemon

DM = 777
TOKEN = "123456:TEST-TOKEN"
API_KEY = "sk-ant-test"


def _config(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    anthropic: FakeAnthropicAPI,
    *,
    idle_timeout: float = 30.0,
    shutdown_grace: float = 10.0,
) -> Path:
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
health: {{enabled: false}}
shutdown_grace: {shutdown_grace}
model:
  provider: anthropic
  name: claude-test
  api_key: ${{ANTHROPIC_TEST_KEY}}
  base_url: {json.dumps(anthropic.base_url)}
  max_retry_wait: 0.05
  idle_timeout: {idle_timeout}
channels:
  telegram:
    token: ${{TELEGRAM_TEST_TOKEN}}
    api_base_url: {json.dumps(telegram.base_url)}
    dm_policy: open
""",
        encoding="utf-8",
    )
    return config


async def _start(config: Path, cwd: Path) -> RunningDaemon:
    return await start_daemon(config, cwd, ANTHROPIC_TEST_KEY=API_KEY, TELEGRAM_TEST_TOKEN=TOKEN)


_stop = stop_daemon


async def _kill(process: RunningDaemon) -> None:
    await reap(process)


def _sent(telegram: FakeTelegramAPI) -> list[str]:
    return [c.params["text"] for c in telegram.calls_to("sendMessage", ok_only=True)]


async def test_stop_over_telegram_posts_only_the_confirmation(tmp_path: Path) -> None:
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=API_KEY) as model:
        # Part of a paragraph streams (too short to be a block yet), then the model goes quiet.
        model.push(stream(text("The first half ", "of a long answer"), hang_after=5))
        process = await _start(_config(tmp_path, telegram, model), tmp_path)
        try:
            telegram.push_text(DM, "tell me everything")
            await model.wait_silent(0, HANG_GUARD)
            telegram.push_text(DM, "/stop")
            await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
            assert (await model.wait_stream_ended(0, HANG_GUARD)).closed_by_client
            assert await _stop(process) == 0
        finally:
            await _kill(process)
    assert _sent(telegram) == ["Stopped."]


async def test_sigterm_past_the_grace_posts_nothing_and_records_no_finished_turn(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=API_KEY) as model:
        model.push(stream(text("Half ", "an answer"), hang_after=5))
        config = _config(tmp_path, telegram, model, shutdown_grace=0.2)
        process = await _start(config, tmp_path)
        try:
            telegram.push_text(DM, "tell me everything")
            await model.wait_silent(0, HANG_GUARD)
            assert await _stop(process) == 0
        finally:
            await _kill(process)
        assert (await model.wait_stream_ended(0, HANG_GUARD)).closed_by_client
    log = (tmp_path / "daemon.log").read_text(encoding="utf-8", errors="replace")
    assert "running answers get 0.2 s to finish" in log
    assert "run ended: cancelled" in log
    assert _sent(telegram) == []
    with SqliteStore.open(tmp_path / "state") as store:
        session = store.get_or_create_session(f"telegram:{DM}")
        transcript = store.load_transcript(session.session_id)
    # Whatever of the cut turn is kept is marked cancelled, never as a finished answer.
    assert [m for m in transcript if m.role == "assistant" and m.stop_reason != "cancelled"] == []


async def test_a_model_that_stays_silent_gets_one_line_to_the_user(tmp_path: Path) -> None:
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=API_KEY) as model:
        # The first attempt and all three retries go silent before any text.
        model.push(*[stream(text("never"), hang_after=1) for _ in range(4)])
        process = await _start(_config(tmp_path, telegram, model, idle_timeout=0.3), tmp_path)
        try:
            telegram.push_text(DM, "hello?")
            await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
            assert await _stop(process) == 0
        finally:
            await _kill(process)
        assert len(model.requests) == 4
    assert _sent(telegram) == [f"⚠️ The agent stopped with an error: {NO_ANSWER_IN_TIME}"]
