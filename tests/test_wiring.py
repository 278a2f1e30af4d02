"""The runtime built in one place: parts connected, the scheduler reaching the sessions."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from botd.chat import InboundMessage, Target
from botd.config import parse_config
from botd.ops.metrics import Metrics
from botd.runtime import build_runtime
from botd.store.sqlite import SqliteStore
from botd.wiring import access_policy, scheduler_jobs
from tests.support.waiting import until


def console_config(tmp_path: Path, jobs: str = "") -> str:
    return f"state_dir: {tmp_path}\nchannels:\n  console: {{enabled: true}}\n" + jobs


async def test_a_scheduled_prompt_reaches_the_sessions_and_is_delivered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = """
scheduler:
  jobs:
    - id: ping
      every: 1s
      prompt: ping
      deliver_to: {channel: console, chat: local}
"""
    config = parse_config(console_config(tmp_path, jobs), {})
    metrics = Metrics()
    runtime = build_runtime(config, metrics=metrics, store=SqliteStore.open(tmp_path))
    try:
        assert list(runtime.adapters) == ["console"]
        await runtime.dispatcher.start()  # the one door into the sessions
        await runtime.scheduler.start()

        await runtime.scheduler.sync_config_jobs(scheduler_jobs(config))
        printed: list[str] = []

        def answered() -> bool:
            printed.append(capsys.readouterr().out)
            return "You said: ping" in "".join(printed)

        await until(answered, "the scheduled prompt answered")
        assert metrics.value("botd_messages_out_total", channel="console") >= 1
        # A scheduled job's prompt is no message in from the channel.
        assert metrics.value("botd_messages_in_total", channel="console") == 0
    finally:
        runtime.scheduler.shutdown()
        await runtime.dispatcher.close()
        await runtime.sessions.close(grace=1)
        await runtime.provider.aclose()
        await runtime.store.aclose()


def inbound(message_id: str) -> InboundMessage:
    return InboundMessage(
        channel="console",
        chat_id="local",
        sender_id="you",
        text="hi",
        message_id=message_id,
        conversation_key="console:local",
        is_direct=True,
    )


async def test_update_channels_points_delivery_and_router_at_the_new_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config(console_config(tmp_path), {})
    runtime = build_runtime(config, store=SqliteStore.open(tmp_path))
    await runtime.dispatcher.start()
    try:
        assert (await runtime.router.handle(inbound("m1"))).accepted  # the console is open
        await asyncio.wait_for(runtime.dispatcher.drain(), 30)
        assert capsys.readouterr().out == "You said: hi\n"
        runtime.adapters.pop("console")
        runtime.update_channels(parse_config(f"state_dir: {tmp_path}\n", {}))
        with pytest.raises(LookupError):
            await runtime.delivery.send_text(Target("console", "local"), "gone")
        # No longer open: the router offers a pairing code, through a channel that is gone.
        with caplog.at_level(logging.WARNING, logger="botd.conversation"):
            assert not (await runtime.router.handle(inbound("m2"))).accepted
            await asyncio.wait_for(runtime.dispatcher.drain(), 30)
        assert "no adapter for channel 'console'" in caplog.text
    finally:
        await runtime.dispatcher.close()
        await runtime.sessions.close(grace=1)
        await runtime.provider.aclose()
        await runtime.store.aclose()


def test_a_group_without_its_own_require_mention_takes_the_channels() -> None:
    """As the reference says: ``require_mention`` of the channel is the default for the
    groups listed without one of their own; a group's own value wins."""
    config = parse_config(
        """
channels:
  telegram:
    token: "123:abc"
    require_mention: false
    groups:
      "-100": {allow_from: [7]}
      "-200": {require_mention: true}
      "*": {}
""",
        {},
    )
    section = config.channels.section("telegram")
    assert section is not None
    policy = access_policy(section)
    assert policy.groups["-100"].require_mention is False
    assert policy.groups["*"].require_mention is False
    assert policy.groups["-200"].require_mention is True
