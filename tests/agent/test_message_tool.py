"""The ``message`` tool: where it posts, what it refuses, what the model reads back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from botd.agent.loop import AgentRun, LoopConfig
from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.agent.tools.base import ToolContext, ToolOutput
from botd.agent.tools.message.tool import MessageTool
from botd.chat import MessageRef, Target
from botd.cluster.fencing import RunScope
from botd.events import AgentEvent, TextContent

ORIGIN = Target("slack", "C1", account_id="work", thread_id="T9", reply_to_id="M5")
SCOPE = RunScope("conv")


class Outbox:
    """The channel layer's send, recorded; fails with ``error`` when set."""

    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[tuple[Target, str]] = []
        self.scopes: list[RunScope] = []
        self.error = error

    async def __call__(self, target: Target, text: str, scope: RunScope) -> MessageRef:
        if self.error is not None:
            raise self.error
        self.sent.append((target, text))
        self.scopes.append(scope)
        return MessageRef(target, f"id-{len(self.sent)}")


async def call(tool: MessageTool, origin: Target | None = ORIGIN, **args: Any) -> ToolOutput:
    return await tool.run(args, ToolContext(SCOPE, origin, "call_1"))


async def test_send_without_a_target_posts_to_the_current_conversation() -> None:
    outbox = Outbox()
    output = await call(MessageTool(outbox), action="send", message="hello")

    # The thread is part of the conversation; a send is not a reply.
    assert outbox.sent == [(Target("slack", "C1", "work", "T9"), "hello")]
    assert output == ToolOutput(
        text="sent",
        details={"status": "ok", "message_id": "id-1", "to": "C1:thread:T9", "channel": "slack"},
    )


async def test_to_names_another_chat_on_the_same_account() -> None:
    outbox = Outbox()
    output = await call(MessageTool(outbox), action="send", message="hi", to="C2")

    assert outbox.sent == [(Target("slack", "C2", "work"), "hi")]
    assert output.details["to"] == "C2"


async def test_to_can_name_a_thread() -> None:
    outbox = Outbox()
    await call(MessageTool(outbox), action="send", message="hi", to="C2:thread:1700.5")

    assert outbox.sent == [(Target("slack", "C2", "work", "1700.5"), "hi")]


async def test_channel_and_to_reach_another_platform() -> None:
    outbox = Outbox()
    await call(MessageTool(outbox), action="send", message="hi", to="-100", channel="telegram")

    assert outbox.sent == [(Target("telegram", "-100", "work"), "hi")]


async def test_another_channel_without_to_is_an_error() -> None:
    outbox = Outbox()
    output = await call(MessageTool(outbox), action="send", message="hi", channel="telegram")

    assert output.is_error and "to" in output.text
    assert outbox.sent == []


async def test_reply_answers_the_current_conversation_as_a_reply() -> None:
    outbox = Outbox()
    output = await call(MessageTool(outbox), action="reply", message="yes")

    assert outbox.sent == [(ORIGIN, "yes")]
    assert not output.is_error


async def test_reply_to_another_chat_is_an_error() -> None:
    outbox = Outbox()
    output = await call(MessageTool(outbox), action="reply", message="yes", to="C2")

    assert output.is_error and "send" in output.text
    assert outbox.sent == []


async def test_reply_naming_the_current_conversation_is_fine() -> None:
    outbox = Outbox()
    await call(MessageTool(outbox), action="reply", message="yes", to="C1:thread:T9")

    assert outbox.sent == [(ORIGIN, "yes")]


async def test_a_refused_target_is_a_clear_error() -> None:
    outbox = Outbox()
    tool = MessageTool(
        outbox, refusal=lambda target, origin: None if target.chat_id == "C1" else "not here"
    )

    output = await call(tool, action="send", message="psst", to="C-secret")

    assert output.is_error
    assert output.text == "not allowed: slack:C-secret: not here"
    assert output.details["status"] == "error"
    assert outbox.sent == []


async def test_a_failing_send_reports_the_platforms_words() -> None:
    tool = MessageTool(Outbox(error=RuntimeError("channel_not_found")))

    output = await call(tool, action="send", message="hi", to="C404")

    assert output.is_error
    assert "channel_not_found" in output.text and "slack:C404" in output.text


async def test_without_an_origin_to_and_channel_are_needed() -> None:
    outbox = Outbox()
    tool = MessageTool(outbox)

    missing = await call(tool, origin=None, action="send", message="hi")
    only_to = await call(tool, origin=None, action="send", message="hi", to="C1")
    reply = await call(tool, origin=None, action="reply", message="hi", to="C1", channel="slack")
    ok = await call(tool, origin=None, action="send", message="hi", to="C1", channel="slack")

    assert missing.is_error and only_to.is_error and reply.is_error
    assert "no current conversation" in missing.text
    assert not ok.is_error
    assert outbox.sent == [(Target("slack", "C1"), "hi")]


async def test_a_blank_message_is_refused() -> None:
    outbox = Outbox()
    output = await call(MessageTool(outbox), action="send", message="   ")
    assert output.is_error and outbox.sent == []


def test_the_spec_is_what_the_model_sees() -> None:
    tool = MessageTool(Outbox(), timeout=5)
    schema = tool.spec.input_schema
    assert tool.spec.name == "message" and tool.timeout == 5
    assert schema["required"] == ["action", "message"]
    assert schema["properties"]["action"]["enum"] == ["send", "reply"]
    assert set(schema["properties"]) == {"action", "message", "to", "channel", "media", "buttons"}
    assert schema["properties"]["media"]["items"] == {"type": "string", "minLength": 1}


def test_the_channel_argument_names_the_channels_botd_runs() -> None:
    def described(tool: MessageTool) -> str:
        return str(tool.spec.input_schema["properties"]["channel"]["description"])

    running = MessageTool(Outbox(), channels=["filechat", "console"])
    assert (
        described(running)
        == "The channel to post on (filechat, console). Default: the current one."
    )
    assert described(MessageTool(Outbox())) == "The channel to post on. Default: the current one."


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"message": "hi"}, "'action' is a required property"),
        ({"action": "shout", "message": "hi"}, "'shout' is not one of ['send', 'reply']"),
        ({"action": "send", "message": ""}, "should be non-empty"),
    ],
)
async def test_the_loop_checks_calls_against_the_schema(
    args: dict[str, Any], expected: str
) -> None:
    outbox = Outbox()
    provider = ScriptedProvider(
        [ScriptedTurn(tool_calls=[{"name": "message", "args": args}]), ScriptedTurn(text="ok")]
    )
    events: list[AgentEvent] = []
    run = AgentRun(
        provider, [MessageTool(outbox)], LoopConfig(model="m"), events.append, origin=ORIGIN
    )

    result = await run.run([], [])

    tool_result = result.messages[1]
    assert tool_result.is_error
    assert isinstance(tool_result.content[0], TextContent)
    assert expected in tool_result.content[0].text
    assert outbox.sent == []


async def test_media_goes_through_the_media_send_and_the_same_refusals() -> None:
    plain, sent_files = Outbox(), []

    async def send_media(
        target: Target, text: str, media: Sequence[str], scope: RunScope
    ) -> MessageRef:
        sent_files.append((target, text, list(media)))
        return MessageRef(target, "file-1")

    def refusal(target: Target, origin: Target | None) -> str | None:
        return "not listed" if target.chat_id == "elsewhere" else None

    tool = MessageTool(plain, refusal=refusal, send_media=send_media)
    done = await call(tool, action="send", message="a cat", media=["https://x.example/c.png"])
    assert not done.is_error and done.details["message_id"] == "file-1"
    here = Target("slack", "C1", account_id="work", thread_id="T9")
    assert sent_files == [(here, "a cat", ["https://x.example/c.png"])]
    refused = await call(tool, action="send", message="x", to="elsewhere", media=["/a.png"])
    assert refused.is_error and "not listed" in refused.text
    assert len(sent_files) == 1 and plain.sent == []
    without = MessageTool(plain)
    missing = await call(without, action="send", message="x", media=["/a.png"])
    assert missing.is_error and "files cannot be sent" in missing.text
    wrong = await call(tool, action="send", message="x", media="/a.png")
    assert wrong.is_error and "list" in wrong.text


def test_each_run_shares_the_compiled_validator_of_the_tools_arguments() -> None:
    """A run builds its message tool anew; its arguments' schema is the same object for the
    same channels, so the validator compiled for it (after a check against the meta-schema,
    costlier than the rest of a short run) is reused instead of compiled per run."""
    from botd.agent.tools.base import schema_validator

    def schema(*channels: str) -> dict[str, Any]:
        return MessageTool(Outbox(), channels=channels).spec.input_schema

    assert schema("telegram", "slack") is schema("telegram", "slack")
    assert schema_validator(schema("telegram")) is schema_validator(schema("telegram"))
    assert schema("telegram") is not schema("slack")
