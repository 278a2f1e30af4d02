"""Approvals over Slack, end to end: botd in-process with the real slack-bolt/slack_sdk in
Socket Mode against the loopback Slack fake and the real anthropic SDK against the fake
Messages API; the model calls a gated tool in a DM and a press decides the request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from botd.app import App
from botd.approvals import NOT_AN_APPROVER
from botd.chat import InboundMessage
from tests.approvals.harness import (
    RAN,
    approvals_yaml,
    model_calls_the_tool,
    press,
    press_message,
    requests_kept,
    tool_result,
)
from tests.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    slack_yaml,
)
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.waiting import until

DM = "D1"


@asynccontextmanager
async def slack_botd(
    tmp_path: Path, slack: FakeSlack, model: FakeAnthropicAPI, *lines: str
) -> AsyncIterator[App]:
    config = config_yaml(
        tmp_path,
        anthropic_yaml(model),
        slack_yaml(slack, "dm_policy: open"),
        approvals_yaml(*lines),
    )
    async with daemon_running(
        config, ready=lambda d: d.runtime is not None and "slack" in d.runtime.adapters
    ) as daemon:
        await slack.wait_socket(HANG_GUARD)
        yield daemon


async def ask(slack: FakeSlack) -> None:
    message = {"type": "message", "channel": DM, "channel_type": "im", "user": "U1"}
    await slack.send_event(event_callback({**message, "text": "what is scheduled?", "ts": "1.1"}))
    await until(lambda: slack.visible(DM), "the request to approve in the DM")


def pressed(tmp_path: Path, user: str, name: str, verb: str, callback: str) -> InboundMessage:
    (request,) = requests_kept(tmp_path / "state")
    value = f"approval:{request['token']}:{verb}"
    return press_message("slack", DM, user, name, value, callback)


async def test_approved_in_slack_the_tool_runs_and_the_request_shows_who(tmp_path: Path) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with slack_botd(tmp_path, slack, model) as daemon:
            await ask(slack)
            assert slack.visible(DM)[0].startswith('Approve `schedule(action="list")`?')
            message = pressed(tmp_path, "U1", "Alice", "approve", "a1")
            assert await press(daemon, message) == "Approved."
            await until(lambda: "All done." in slack.visible(DM), "the answer in the DM")
            assert tool_result(model) == RAN
            assert slack.visible(DM)[0].endswith("Approved by Alice.")


async def test_in_slack_only_an_approver_decides_and_a_denial_names_them(tmp_path: Path) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with slack_botd(tmp_path, slack, model, 'approvers: ["slack:U9"]') as daemon:
            await ask(slack)
            other = pressed(tmp_path, "U1", "Mallory", "approve", "a1")
            assert await press(daemon, other) == NOT_AN_APPROVER
            assert [r["state"] for r in requests_kept(tmp_path / "state")] == ["pending"]
            approver = pressed(tmp_path, "U9", "Bob", "deny", "a2")
            assert await press(daemon, approver) == "Denied."
            await until(lambda: "All done." in slack.visible(DM), "the answer in the DM")
            is_error, said = tool_result(model)
            assert is_error and "denied by Bob" in said
            assert slack.visible(DM)[0].endswith("Denied by Bob.")
