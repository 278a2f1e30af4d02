"""Config reload: what ``plan_reload`` restarts, starts, stops and re-syncs; metrics hooks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from botd.app import App
from botd.chat import InboundMessage
from botd.config import parse_config
from botd.config.reload import plan_reload
from botd.conversation import Conversations
from botd.store.sqlite import SqliteStore
from tests.conversation.harness import ListSink, settings

BASE = """
channels:
  telegram:
    token: "123:abc"
    dm_policy: open
  slack:
    bot_token: xoxb-1
    app_token: xapp-1
"""


def config(text: str = BASE) -> Any:
    return parse_config(text, {})


def test_nothing_changed_plans_nothing() -> None:
    plan = plan_reload(config(), config())
    assert plan.empty and plan.unchanged == {"telegram", "slack"}
    assert plan.describe() == "nothing changed"


def test_a_changed_section_restarts_only_that_channel() -> None:
    new = config(BASE.replace("dm_policy: open", "dm_policy: allowlist"))
    plan = plan_reload(config(), new)
    assert plan.restart == {"telegram"} and plan.unchanged == {"slack"}
    assert not plan.start and not plan.stop and not plan.jobs_changed


def test_added_and_removed_channels_start_and_stop() -> None:
    new = config(
        """
channels:
  telegram:
    token: "123:abc"
    dm_policy: open
  discord:
    token: d-token
"""
    )
    plan = plan_reload(config(), new)
    assert plan.start == {"discord"} and plan.stop == {"slack"} and not plan.restart
    assert "starting discord" in plan.describe() and "stopping slack" in plan.describe()


def test_scheduler_jobs_and_start_only_sections() -> None:
    new = config(
        BASE
        + """
scheduler:
  jobs:
    - id: standup
      every: 1h
      prompt: summarize
      deliver_to: {channel: telegram, chat: 42}
model:
  max_tokens: 100
"""
    )
    plan = plan_reload(config(), new)
    assert plan.jobs_changed and not plan.restart
    assert plan.restart_only == ("model",)


def test_message_targets_apply_live_other_agent_keys_at_restart() -> None:
    targets = config(BASE + "agent:\n  message_targets: [telegram/-100123]\n")
    plan = plan_reload(config(), targets)
    assert plan.targets_changed and plan.restart_only == () and not plan.empty
    assert plan.describe() == "new message targets"

    prompt = config(BASE + "agent:\n  system_prompt: be terse\n")
    plan = plan_reload(config(), prompt)
    assert not plan.targets_changed and plan.restart_only == ("agent",)


def test_the_web_token_applies_live_the_rest_of_web_at_restart() -> None:
    on = config(BASE + "web:\n  enabled: true\n  token: first-t0ken\n")
    token = config(BASE + "web:\n  enabled: true\n  token: second-t0ken\n")
    assert plan_reload(on, token).restart_only == ()  # read at each request
    moved = config(BASE + "web:\n  enabled: true\n  token: first-t0ken\n  port: 9999\n")
    assert plan_reload(on, moved).restart_only == ("web",)


async def test_daemon_hooks_count_runs_and_observe_latency(tmp_path: Path) -> None:
    from botd.agent.providers.scripted import ScriptedProvider

    daemon = App(config(), env={})
    store = SqliteStore.open(tmp_path / "state")
    try:
        manager = Conversations(
            store, ScriptedProvider(), ListSink("telegram"), settings(), hooks=daemon.run_hooks()
        )
        message = InboundMessage(
            channel="telegram",
            chat_id="1",
            sender_id="u",
            text="hi",
            message_id="m1",
            conversation_key="telegram:1",
        )
        await manager.submit(message)
        await asyncio.wait_for(manager.drain(), 30)
    finally:
        store.close()
    rendered = daemon.metrics.render()
    assert 'botd_runs_total{channel="telegram"} 1' in rendered
    assert 'botd_reply_latency_seconds_count{channel="telegram"} 1' in rendered
    assert daemon.metrics.value("botd_errors_total", channel="telegram", kind="run_failed") == 0
