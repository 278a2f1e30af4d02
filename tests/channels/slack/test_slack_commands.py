"""Slack slash commands carry botd's chat commands (Slack's client keeps a typed ``/stop`` to
itself): ``/botd stop``, ``/stop`` registered on its own, ``/botd <question>``. End to end:
the real slack-bolt and anthropic SDKs inside the daemon, the loopback fakes outside.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from botd.channels.slack.commands import slash_text
from botd.store import StoreError
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import FakeSlack
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    slack_yaml,
)
from tests.support.waiting import until


@pytest.mark.parametrize(
    ("command", "said", "meant"),
    [
        ("/botd", "stop", "/stop"),
        ("/botd", "/STOP", "/stop"),
        ("/botd", "new  what next?", "/new what next?"),
        ("/botd", "", "/help"),
        ("/botd", "what is on today?", "what is on today?"),
        ("/botd", "newer things", "newer things"),
        ("/stop", "", "/stop"),
        ("/new", "a fresh topic", "/new a fresh topic"),
        ("/Model", "2", "/model 2"),
    ],
)
def test_what_a_slash_command_stands_for(command: str, said: str, meant: str) -> None:
    assert slash_text(command, said) == meant


def _config(tmp_path: Path, slack: FakeSlack, model: FakeAnthropicAPI, *more: str) -> str:
    return config_yaml(tmp_path, anthropic_yaml(model), slack_yaml(slack, "dm_policy: open", *more))


async def _posted(slack: FakeSlack, count: int) -> list[str]:
    await until(
        lambda: len(slack.calls_to("chat.postMessage")) >= count,
        'len(slack.calls_to("chat.postMessage")) >= count',
    )
    return [str(c.args.get("text")) for c in slack.calls_to("chat.postMessage")]


async def _acked(slack: FakeSlack, envelope: str) -> None:
    await until(lambda: envelope in slack.acks, "envelope in slack.acks")


async def test_a_slash_command_runs_the_chat_command_and_a_question_is_answered(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("It is sunny.")))
        async with daemon_running(_config(tmp_path, slack, model)):
            asked = await slack.send_slash_command("/botd", "what is the weather?", channel="D1")
            assert await _posted(slack, 1) == ["It is sunny."]
            status = await slack.send_slash_command("/botd", "status", channel="D1")
            posted = await _posted(slack, 2)
            await slack.send_slash_command("/botd", "status", channel="D1", trigger_id="t-same")
            await _posted(slack, 3)
            again = await slack.send_slash_command("/botd", "status", trigger_id="t-same")
            await _acked(slack, again)
    assert posted[1].startswith("Session ") and "1 runs" in posted[1]
    # Both acked with nothing to show: the answers are the channel's messages.
    assert slack.ack_payload(asked) is None and slack.ack_payload(status) is None
    # The question reached the model as the user asked it.
    [request] = model.requests
    assert request.body["messages"][-1]["content"][-1]["text"].endswith("what is the weather?")
    # A repeated trigger is taken once.
    assert len(slack.calls_to("chat.postMessage")) == 3
    assert all(c.args.get("channel") == "D1" for c in slack.calls_to("chat.postMessage"))


async def test_a_slash_command_from_a_refused_user_gets_no_answer(tmp_path: Path) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = _config(tmp_path, slack, model, "allow_from: [U1]").replace(
            "dm_policy: open", "dm_policy: allowlist"
        )
        async with daemon_running(config):
            refused = await slack.send_slash_command("/botd", "status", user="U9")
            await _acked(slack, refused)
            allowed = await slack.send_slash_command("/botd", "help", user="U1")
            await _posted(slack, 1)
            await _acked(slack, allowed)
    [answer] = [str(c.args.get("text")) for c in slack.calls_to("chat.postMessage")]
    assert answer.startswith("Commands:")
    assert model.requests == []


async def test_a_slash_command_that_cannot_be_stored_is_answered_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(*args: object, **kwargs: object) -> None:
        raise StoreError("disk I/O error")

    async with (
        FakeSlack() as slack,
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
        daemon_running(_config(tmp_path, slack, model)) as daemon,
    ):
        assert daemon.runtime is not None
        monkeypatch.setattr(daemon.runtime.store, "accept_inbound", failing)
        envelope = await slack.send_slash_command("/botd", "status")
        await _acked(slack, envelope)
        [answer] = await _posted(slack, 1)
    # Acked (Slack would only show the user a timeout) and told once, by the router.
    assert slack.ack_payload(envelope) is None
    assert answer.startswith("Sorry") and "send it again" in answer


async def test_a_command_where_the_bot_is_no_member_is_told_only_to_its_user(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = _config(tmp_path, slack, model, "group_policy: open")
        async with daemon_running(config) as daemon:
            # Slack lets anyone run the command in a channel the bot was never invited to,
            # and refuses the bot's post there.
            slack.fail_next("chat.postMessage", "not_in_channel")
            envelope = await slack.send_slash_command("/botd", "status", channel="C9")
            await until(lambda: slack.command_responses, "slack.command_responses")
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    [(responded_to, body)] = slack.command_responses
    assert responded_to == envelope
    assert body["response_type"] == "ephemeral"
    assert body["text"].startswith("I cannot post in this channel: invite me")
    assert slack.calls_to("chat.postMessage")[0].args["channel"] == "C9"
