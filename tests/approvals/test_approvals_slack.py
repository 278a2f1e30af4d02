"""Approvals over Slack, end to end: botd in-process with the real slack-bolt/slack_sdk in
Socket Mode against the loopback Slack fake and the real anthropic SDK against the fake
Messages API; the model calls a gated tool, the request is posted as Block Kit with Approve /
Deny buttons, and a press (a ``block_actions`` payload over Socket Mode, acked, answered in an
ephemeral message) decides it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from botd.app import App
from botd.approvals import NOT_AN_APPROVER
from tests.approvals.harness import (
    RAN,
    approvals_yaml,
    model_calls_the_tool,
    request_posted,
    states,
    tool_result,
)
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.slack_api import BOT_USER_ID, FakeSlack, event_callback
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    slack_yaml,
)
from tests.support.waiting import until

DM = "D1"
CHANNEL = "C42"


@asynccontextmanager
async def slack_botd(
    tmp_path: Path, slack: FakeSlack, model: FakeAnthropicAPI, *lines: str
) -> AsyncIterator[App]:
    config = config_yaml(
        tmp_path,
        anthropic_yaml(model),
        slack_yaml(slack, "dm_policy: open", "group_policy: open"),
        approvals_yaml(*lines),
    )
    async with daemon_running(
        config, ready=lambda d: d.runtime is not None and "slack" in d.runtime.adapters
    ) as daemon:
        await slack.wait_socket(HANG_GUARD)
        yield daemon


class Request:
    """The bot's message asking to approve the call, as Slack keeps it."""

    def __init__(self, slack: FakeSlack, channel: str, ts: str) -> None:
        self.slack, self.channel, self.ts = slack, channel, ts
        self.action_ids = {
            element["text"]["text"]: element["action_id"]
            for block in self.message["blocks"]
            if block["type"] == "actions"
            for element in block["elements"]
        }
        """Each button's action id by its label, as posted."""

    @property
    def message(self) -> dict[str, Any]:
        return next(m for m in self.slack.posted(self.channel) if m["ts"] == self.ts)

    @property
    def text(self) -> str:
        return str(self.message["text"])

    @property
    def block_types(self) -> list[str]:
        return [block["type"] for block in self.message.get("blocks", [])]

    async def press(self, label: str, user: str, action_ts: str) -> str:
        """``user`` presses the button ``label``, once acked; the envelope id (the same
        ``action_ts`` again is Slack delivering that press again)."""
        envelope = await self.slack.send_press(
            self.channel, self.ts, self.action_ids[label], user=user, action_ts=action_ts
        )
        await until(lambda: envelope in self.slack.acks, f"the press {action_ts} acked")
        return envelope


async def asked(tmp_path: Path, slack: FakeSlack, channel: str) -> Request:
    """The request, once posted (the run waits on it)."""
    ts = await until(lambda: request_posted(tmp_path / "state"), "the request posted")
    assert ts is not None
    request = Request(slack, channel, ts)
    assert list(request.action_ids) == ["Approve", "Deny"]
    return request


async def told(slack: FakeSlack, user: str, text: str) -> None:
    """Wait until ``user`` was shown ``text`` in an ephemeral message."""
    await until(lambda: (user, text) in slack.ephemerals, f"{user} told {text!r}")


async def test_approved_in_slack_the_tool_runs_and_the_request_shows_who(tmp_path: Path) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with slack_botd(tmp_path, slack, model):
            message = {"type": "message", "channel": DM, "channel_type": "im", "user": "U1"}
            await slack.send_event(
                event_callback({**message, "text": "what is scheduled?", "ts": "1.1"})
            )
            request = await asked(tmp_path, slack, DM)
            assert request.text == 'Approve `schedule(action="list")`?'
            assert request.block_types == ["section", "actions"]
            await request.press("Approve", "U1", action_ts="5.5")
            await request.press("Approve", "U1", action_ts="5.5")  # delivered again
            await told(slack, "U1", "Approved.")
            await until(lambda: "All done." in slack.visible(DM), "the answer in the DM")
            assert tool_result(model) == RAN
            assert request.text.endswith("\nApproved by name-U1.")
            assert request.block_types == ["section"]  # the buttons are gone
            # A client still showing the buttons: told, nothing changes.
            await request.press("Deny", "U1", action_ts="7.7")
            await told(slack, "U1", "Already approved by name-U1.")
            # The redelivery reached no handler (it would have been told "Already approved").
            assert slack.ephemerals == [("U1", "Approved."), ("U1", "Already approved by name-U1.")]
            assert states(tmp_path / "state") == ["approved"]


async def test_in_a_slack_channel_only_an_approver_decides_and_a_denial_names_them(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with slack_botd(tmp_path, slack, model, 'approvers: ["slack:U9"]'):
            mention = {
                "type": "message",
                "channel": CHANNEL,
                "channel_type": "channel",
                "user": "U1",
                "text": f"<@{BOT_USER_ID}> what is scheduled?",
                "ts": "1700000000.000100",
            }
            await slack.send_event(event_callback(mention))
            request = await asked(tmp_path, slack, CHANNEL)
            await request.press("Approve", "U1", action_ts="5.5")
            await told(slack, "U1", NOT_AN_APPROVER)
            assert states(tmp_path / "state") == ["pending"]
            assert request.block_types == ["section", "actions"]  # still there to be decided
            assert len(model.requests) == 1
            await request.press("Deny", "U9", action_ts="6.6")
            await told(slack, "U9", "Denied.")
            await until(lambda: "All done." in slack.visible(CHANNEL), "the answer")
            is_error, said = tool_result(model)
            assert is_error and "denied by name-U9" in said
            assert request.text.endswith("\nDenied by name-U9.")
            assert request.block_types == ["section"]
            assert states(tmp_path / "state") == ["denied"]
