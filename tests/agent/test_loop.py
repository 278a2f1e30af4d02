"""The agent loop driven by the scripted provider and small real tools."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from botd.agent.loop import CANCELLED_TEXT, SKIPPED_TEXT, AgentRun, LoopConfig, RunResult
from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.agent.tools.base import ToolContext, ToolOutput
from botd.agent.tools.message.tool import MessageTool
from botd.agent.types import AssistantResult, ModelRequest, ProviderItem, ToolDefinition
from botd.chat import MessageRef, Target
from botd.cluster.fencing import RunScope
from botd.events import (
    AgentEnd,
    AgentEvent,
    AssistantStreamEvent,
    ImageContent,
    Message,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    ToolCallContent,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
)
from botd.media.history import LEFT_OUT_IMAGE
from botd.subscriber import BlockReply, StreamSubscriber, SubscriberConfig
from tests.agent.loop_helpers import EchoTool, Events, assert_well_formed, call, text_of, user
from tests.support.waiting import HANG_GUARD

# --- helpers -------------------------------------------------------------------------------


class RecordingProvider:
    """Wraps a provider and keeps every request it was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        self.requests.append(request)
        stream: AsyncIterator[ProviderItem] = self.inner.stream(request)
        return stream

    async def aclose(self) -> None:
        await self.inner.aclose()


class HookTool:
    """Calls ``hook`` when run, then returns ``ok``."""

    def __init__(self, name: str, hook: Callable[[], None]) -> None:
        self.spec = ToolDefinition(name=name, description="", input_schema={"type": "object"})
        self.timeout: float | None = None
        self.hook = hook
        self.runs = 0

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.runs += 1
        self.hook()
        return ToolOutput(text="ok")


class RaisingTool:
    def __init__(self, error: BaseException) -> None:
        self.spec = ToolDefinition(name="explode", description="", input_schema={"type": "object"})
        self.timeout: float | None = None
        self.error = error

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        raise self.error


class BlockingTool:
    """Waits until cancelled; says when it started and whether it saw the cancellation."""

    def __init__(self, name: str = "wait", timeout: float | None = None) -> None:
        self.spec = ToolDefinition(name=name, description="", input_schema={"type": "object"})
        self.timeout = timeout
        self.started = asyncio.Event()
        self.cancelled = False

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return ToolOutput(text="never")


def make_run(
    provider: Any, tools: list[Any] | None = None, **config: Any
) -> tuple[AgentRun, Events]:
    events = Events()
    run = AgentRun(
        provider,
        tools or [],
        LoopConfig(model="test-model", **config),
        events.append,
        conversation_key="conv-1",
        origin=Target("console", "chat-1"),
    )
    return run, events


async def run_to_end(run: AgentRun, prompt: str = "hello", **kw: Any) -> RunResult:
    history: list[Message] = kw.pop("history", [])
    return await asyncio.wait_for(run.run(history, [user(prompt)]), HANG_GUARD)


# --- event sequences -----------------------------------------------------------------------


async def test_text_only_run_emits_the_contract_sequence() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="Hello world")], chunk_chars=8)
    run, events = make_run(provider)

    result = await run_to_end(run)

    assert events.types() == [
        "agent_start",
        "turn_start",
        "message_start",  # the prompt
        "message_end",
        "message_start",  # the assistant
        "message_update",  # text_start
        "message_update",  # "Hello wo"
        "message_update",  # "rld"
        "message_update",  # text_end
        "message_end",
        "turn_end",
        "agent_end",
    ]
    updates = events.of(MessageUpdate)
    assert [u.assistant_event.type for u in updates] == [
        "text_start",
        "text_delta",
        "text_delta",
        "text_end",
    ]
    assert all(u.message.role == "assistant" and u.message.content == [] for u in updates)
    starts = events.of(MessageStart)
    assert [s.message.role for s in starts] == ["user", "assistant"]
    assert starts[1].message.content == []
    final = events.of(MessageEnd)[-1].message
    assert text_of(final) == "Hello world"
    assert final.stop_reason == "end_turn"
    assert final.model == "test-model" and final.provider == "scripted"

    assert result.stop_reason == "end_turn"
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert result.messages[1] is final
    assert events.of(TurnEnd)[0].message is final
    assert events.of(AgentEnd)[0].messages == result.messages
    assert result.error_message is None
    assert_well_formed(events)


async def test_tool_run_emits_tool_events_and_a_second_turn() -> None:
    provider = ScriptedProvider(
        [
            ScriptedTurn(text="Checking.", tool_calls=[call("echo", text="ping")]),
            ScriptedTurn(text="Done."),
        ],
        chunk_chars=100,
    )
    echo = EchoTool()
    run, events = make_run(provider, [echo])

    result = await run_to_end(run)

    assert events.types() == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_end",
        # turn 1: text and a tool call
        "message_start",
        "message_update",  # text_start
        "message_update",  # text_delta
        "message_update",  # text_end
        "message_update",  # toolcall_start
        "message_update",  # toolcall_end
        "message_end",
        "tool_execution_start",
        "tool_execution_end",
        "message_start",  # the tool result
        "message_end",
        "turn_end",
        # turn 2: the answer
        "turn_start",
        "message_start",
        "message_update",
        "message_update",
        "message_update",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    start = events.of(ToolExecutionStart)[0]
    assert (start.tool_call_id, start.tool_name, start.args) == ("call_1", "echo", {"text": "ping"})
    end = events.of(ToolExecutionEnd)[0]
    assert end.tool_call_id == "call_1" and end.tool_name == "echo" and end.is_error is False
    assert end.result == {
        "content": [{"type": "text", "text": "echo: ping"}],
        "details": {"length": 4},
    }
    tool_result = result.messages[2]
    assert tool_result.role == "tool_result"
    assert tool_result.tool_call_id == "call_1" and tool_result.tool_name == "echo"
    assert tool_result.is_error is False
    assert text_of(tool_result) == "echo: ping"
    first_turn_end = events.of(TurnEnd)[0]
    assert first_turn_end.tool_results == [tool_result]
    assert first_turn_end.message is result.messages[1]

    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert text_of(result.messages[-1]) == "Done."
    assert result.stop_reason == "end_turn"
    # Usage is the sum of both model calls.
    usages = [m.usage for m in result.messages if m.role == "assistant"]
    assert result.usage["output_tokens"] == sum(u["output_tokens"] for u in usages if u)
    assert result.usage["input_tokens"] == sum(u["input_tokens"] for u in usages if u)

    args, context = echo.calls[0]
    assert args == {"text": "ping"}
    assert context == ToolContext(RunScope("conv-1"), Target("console", "chat-1"), "call_1")
    assert_well_formed(events)


async def test_events_drive_the_real_subscriber_to_block_replies() -> None:
    provider = ScriptedProvider(
        [
            ScriptedTurn(text="Let me check that.", tool_calls=[call("echo", text="x")]),
            ScriptedTurn(text="The answer is 42.\n\nAnything else?"),
        ],
        chunk_chars=5,
    )
    blocks: list[BlockReply] = []
    flushes: list[int] = []
    subscriber = StreamSubscriber(
        SubscriberConfig(chunking=None),
        on_block_reply=blocks.append,
        on_block_flush=lambda: flushes.append(1),
    )
    run = AgentRun(provider, [EchoTool()], LoopConfig(model="m"), subscriber.handle)

    await run_to_end(run)

    assert [b.text for b in blocks] == ["Let me check that.", "The answer is 42.\n\nAnything else?"]
    assert flushes == [1]  # one tool start
    assert subscriber.assistant_texts == [b.text for b in blocks]
    assert subscriber.last_assistant_message is not None
    assert text_of(subscriber.last_assistant_message) == "The answer is 42.\n\nAnything else?"


async def test_a_message_tool_send_is_not_repeated_as_a_block() -> None:
    sent: list[tuple[Target, str]] = []

    async def send(target: Target, text: str, scope: RunScope) -> MessageRef:
        sent.append((target, text))
        return MessageRef(target, "m-1")

    announcement = "The deployment finished without errors."
    provider = ScriptedProvider(
        [
            ScriptedTurn(tool_calls=[call("message", action="send", message=announcement)]),
            ScriptedTurn(text=announcement),
        ]
    )
    blocks: list[BlockReply] = []
    subscriber = StreamSubscriber(SubscriberConfig(chunking=None), on_block_reply=blocks.append)
    run = AgentRun(
        provider,
        [MessageTool(send)],
        LoopConfig(model="m"),
        subscriber.handle,
        origin=Target("telegram", "42"),
    )

    await run_to_end(run)

    assert sent == [(Target("telegram", "42"), announcement)]
    assert subscriber.did_send_via_messaging_tool
    assert subscriber.messaging_tool_sent_texts == [announcement]
    assert subscriber.sent_to_current_conversation
    assert blocks == []  # the same text as the send is not delivered again


# --- what the provider is sent -------------------------------------------------------------


async def test_next_request_pairs_tool_calls_with_their_results() -> None:
    provider = RecordingProvider(
        ScriptedProvider(
            [
                ScriptedTurn(tool_calls=[call("echo", text="a"), call("echo", text="b")]),
                ScriptedTurn(text="ok"),
            ]
        )
    )
    history = [user("earlier"), Message(role="assistant", content=[TextContent(text="hi")])]
    run, _ = make_run(provider, [EchoTool()], system="be brief", max_tokens=99)

    await run_to_end(run, "now", history=history)

    assert len(provider.requests) == 2
    first, second = provider.requests
    assert first.model == "test-model" and first.system == "be brief" and first.max_tokens == 99
    assert [t.name for t in first.tools] == ["echo"]
    assert first.messages[:2] == history
    assert text_of(first.messages[2]) == "now" and len(first.messages) == 3

    assistant, result_a, result_b = second.messages[3:]
    calls = [b for b in assistant.blocks() if isinstance(b, ToolCallContent)]
    assert [(c.id, c.arguments) for c in calls] == [
        ("call_1", {"text": "a"}),
        ("call_2", {"text": "b"}),
    ]
    assert (result_a.role, result_a.tool_call_id, text_of(result_a)) == (
        "tool_result",
        "call_1",
        "echo: a",
    )
    assert (result_b.role, result_b.tool_call_id, text_of(result_b)) == (
        "tool_result",
        "call_2",
        "echo: b",
    )
    # The run's own messages never leak into the caller's history list.
    assert len(history) == 2


class ReadingTool:
    """Returns what it read: text with a NUL and half a surrogate pair in it."""

    spec = ToolDefinition(name="read", description="", input_schema={"type": "object"})
    timeout: float | None = None

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput(text="first\x00second \ud800")


async def test_a_tool_result_reaches_the_model_and_the_transcript_storable() -> None:
    provider = RecordingProvider(
        ScriptedProvider([ScriptedTurn(tool_calls=[call("read")]), ScriptedTurn(text="ok")])
    )
    run, events = make_run(provider, [ReadingTool()])
    result = await run_to_end(run)
    [ended] = events.of(ToolExecutionEnd)
    sent = provider.requests[1].messages[-1]
    kept = [m for m in result.messages if m.role == "tool_result"]
    assert [text_of(sent), *map(text_of, kept)] == ["first\ufffdsecond \ufffd"] * 2
    assert ended.result["content"][0]["text"] == "first\ufffdsecond \ufffd"


# --- tool failures become results ----------------------------------------------------------


async def test_invalid_arguments_become_an_error_result_and_the_run_goes_on() -> None:
    echo = EchoTool()
    provider = ScriptedProvider(
        [
            ScriptedTurn(tool_calls=[call("echo", text=5, extra=True)]),
            ScriptedTurn(tool_calls=[call("echo", text="fixed")]),
            ScriptedTurn(text="done"),
        ]
    )
    run, events = make_run(provider, [echo])

    result = await run_to_end(run)

    bad = result.messages[2]
    assert bad.role == "tool_result" and bad.is_error is True
    assert "Invalid arguments for tool 'echo'" in text_of(bad)
    assert "text: 5 is not of type 'string'" in text_of(bad)
    assert "'extra' was unexpected" in text_of(bad)
    assert events.of(ToolExecutionEnd)[0].is_error is True
    assert [args for args, _ in echo.calls] == [{"text": "fixed"}]  # the bad call never ran
    assert result.stop_reason == "end_turn"
    assert text_of(result.messages[-1]) == "done"


async def test_missing_required_argument_is_named() -> None:
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[call("echo")]), ScriptedTurn(text="ok")])
    run, _ = make_run(provider, [EchoTool()])

    result = await run_to_end(run)

    assert "'text' is a required property" in text_of(result.messages[2])


async def test_unknown_tool_names_the_known_tools() -> None:
    provider = ScriptedProvider(
        [ScriptedTurn(tool_calls=[call("search")]), ScriptedTurn(text="ok")]
    )
    run, events = make_run(provider, [EchoTool(), EchoTool("lookup")])

    result = await run_to_end(run)

    message = result.messages[2]
    assert message.is_error is True
    assert "Unknown tool 'search'" in text_of(message)
    assert "echo, lookup" in text_of(message)
    assert result.stop_reason == "end_turn"
    assert_well_formed(events)


async def test_a_raising_tool_becomes_an_error_result() -> None:
    provider = ScriptedProvider(
        [ScriptedTurn(tool_calls=[call("explode")]), ScriptedTurn(text="sorry")]
    )
    run, events = make_run(provider, [RaisingTool(ValueError("disk is full"))])

    result = await run_to_end(run)

    message = result.messages[2]
    assert message.is_error is True and "disk is full" in text_of(message)
    end = events.of(ToolExecutionEnd)[0]
    assert end.is_error is True
    assert "disk is full" in end.result["content"][0]["text"]
    assert result.stop_reason == "end_turn"


async def test_a_tool_past_its_timeout_is_stopped_with_an_error_result() -> None:
    slow = BlockingTool(timeout=0.01)
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[call("wait")]), ScriptedTurn(text="ok")])
    run, _ = make_run(provider, [slow])

    result = await run_to_end(run)

    message = result.messages[2]
    assert message.is_error is True
    assert "timed out after 0.01 s" in text_of(message)
    assert slow.cancelled
    assert result.stop_reason == "end_turn"


async def test_the_configured_timeout_applies_to_tools_without_their_own() -> None:
    slow = BlockingTool(timeout=None)
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[call("wait")]), ScriptedTurn(text="ok")])
    run, _ = make_run(provider, [slow], tool_timeout=0.02)

    result = await run_to_end(run)

    assert "timed out after 0.02 s" in text_of(result.messages[2])


async def test_a_timeout_error_raised_by_the_tool_itself_is_a_plain_failure() -> None:
    provider = ScriptedProvider(
        [ScriptedTurn(tool_calls=[call("explode")]), ScriptedTurn(text="ok")]
    )
    run, _ = make_run(provider, [RaisingTool(TimeoutError("upstream took too long"))])

    result = await run_to_end(run)

    text = text_of(result.messages[2])
    assert "upstream took too long" in text and "timed out after" not in text


# --- limits --------------------------------------------------------------------------------


async def test_max_turn_requests_stops_the_run() -> None:
    provider = ScriptedProvider(
        [ScriptedTurn(tool_calls=[call("echo", text=str(i))]) for i in range(5)]
    )
    run, events = make_run(provider, [EchoTool()], max_turn_requests=2)

    result = await run_to_end(run)

    assert result.stop_reason == "max_turn_requests"
    assert provider.calls == 2
    assert [m.role for m in result.messages] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
    ]
    assert events.types()[-3:] == ["message_end", "turn_end", "agent_end"]
    assert_well_formed(events)


# --- steering ---------------------------------------------------------------------------


async def test_steering_skips_the_remaining_calls_and_goes_in_before_the_next_call() -> None:
    steer_message = user("actually, stop that")
    holder: dict[str, AgentRun] = {}
    first = HookTool("first", lambda: holder["run"].steer(steer_message))
    second = EchoTool()
    provider = RecordingProvider(
        ScriptedProvider(
            [
                ScriptedTurn(tool_calls=[call("first"), call("echo", text="x")]),
                ScriptedTurn(text="ok, stopped"),
            ]
        )
    )
    run, events = make_run(provider, [first, second])
    holder["run"] = run

    result = await run_to_end(run)

    assert first.runs == 1 and second.calls == []
    skipped = result.messages[3]
    assert skipped.tool_call_id == "call_2" and skipped.is_error is True
    assert text_of(skipped) == SKIPPED_TEXT
    # The steering message is the same object, right after the results, before the call.
    assert result.messages[4] is steer_message
    assert provider.requests[1].messages[-1] is steer_message
    assert [m.role for m in provider.requests[1].messages] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "user",
    ]
    types = events.types()
    turn_two = types.index("turn_start", 2)
    assert types[turn_two : turn_two + 4] == [
        "turn_start",
        "message_start",  # the steering message
        "message_end",
        "message_start",  # the assistant
    ]
    assert events.of(MessageStart)[-2].message is steer_message
    # Skipped calls still get start and end events.
    assert [e.tool_call_id for e in events.of(ToolExecutionStart)] == ["call_1", "call_2"]
    assert result.stop_reason == "end_turn"
    assert run._steering == []  # nothing left queued
    assert_well_formed(events)


async def test_steering_after_the_last_call_skips_nothing() -> None:
    holder: dict[str, AgentRun] = {}
    steer_message = user("and one more thing")
    tool = HookTool("only", lambda: holder["run"].steer(steer_message))
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[call("only")])])
    run, _ = make_run(provider, [tool])
    holder["run"] = run

    result = await run_to_end(run)

    assert [m.role for m in result.messages] == [
        "user",
        "assistant",
        "tool_result",
        "user",
        "assistant",
    ]
    assert result.messages[2].is_error is False
    assert text_of(result.messages[-1]) == "You said: and one more thing"


async def test_steering_during_a_plain_answer_is_answered_too() -> None:
    steer_message = user("also this")
    holder: dict[str, AgentRun] = {}

    def emit(event: AgentEvent) -> None:
        assistant_update = isinstance(event, MessageUpdate)
        if assistant_update and event.assistant_event.type == "text_end" and not holder.get("done"):
            holder["done"] = holder["run"]
            holder["run"].steer(steer_message)

    provider = ScriptedProvider([ScriptedTurn(text="first answer")])
    run = AgentRun(provider, [], LoopConfig(model="m"), emit)
    holder["run"] = run

    result = await run_to_end(run)

    assert [text_of(m) for m in result.messages] == [
        "hello",
        "first answer",
        "also this",
        "You said: also this",
    ]
    assert result.stop_reason == "end_turn"


# --- cancellation --------------------------------------------------------------------------


async def test_cancel_during_a_slow_stream_keeps_the_partial_text() -> None:
    full_text = "This answer streams very slowly, one small piece at a time."
    provider = ScriptedProvider([ScriptedTurn(text=full_text)], chunk_chars=4, delay=0.01)
    events = Events()
    deltas: list[str] = []
    two_deltas = asyncio.Event()

    def emit(event: AgentEvent) -> None:
        events.append(event)
        if isinstance(event, MessageUpdate) and event.assistant_event.delta:
            deltas.append(event.assistant_event.delta)
            if len(deltas) == 2:
                two_deltas.set()

    run = AgentRun(provider, [], LoopConfig(model="m"), emit)
    task = asyncio.create_task(run.run([], [user("hi")]))
    await asyncio.wait_for(two_deltas.wait(), HANG_GUARD)
    assert run.running
    run.cancel()
    result = await asyncio.wait_for(task, HANG_GUARD)

    assert result.stop_reason == "cancelled"
    assert not run.running
    partial = events.of(MessageEnd)[-1].message
    assert partial.role == "assistant" and partial.stop_reason == "cancelled"
    assert text_of(partial) == "".join(deltas)
    assert full_text.startswith(text_of(partial)) and text_of(partial) != full_text
    assert result.messages[-1] is partial
    assert events.types()[-3:] == ["message_end", "turn_end", "agent_end"]
    assert events.of(TurnEnd)[-1].message is partial
    assert_well_formed(events)


async def test_on_cancel_is_called_once_before_the_closing_events() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="x" * 400)], chunk_chars=4, delay=0.01)
    events = Events()
    seen_at_cancel: list[int] = []
    first_delta = asyncio.Event()

    def emit(event: AgentEvent) -> None:
        events.append(event)
        if isinstance(event, MessageUpdate):
            first_delta.set()

    run = AgentRun(
        provider,
        [],
        LoopConfig(model="m"),
        emit,
        on_cancel=lambda: seen_at_cancel.append(len(events.types())),
    )
    task = asyncio.create_task(run.run([], [user("hi")]))
    await asyncio.wait_for(first_delta.wait(), HANG_GUARD)
    before = len(events.types())
    run.cancel()
    run.cancel()  # a second stop changes nothing
    result = await asyncio.wait_for(task, HANG_GUARD)

    assert result.stop_reason == "cancelled"
    assert seen_at_cancel == [before]  # once, and before the partial message was closed
    assert "agent_end" not in events.types()[:before]


async def test_a_failing_on_cancel_does_not_stop_the_cancel() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="x" * 400)], chunk_chars=4, delay=0.01)

    def boom() -> None:
        raise RuntimeError("boom")

    events = Events()
    first_delta = asyncio.Event()

    def emit(event: AgentEvent) -> None:
        events.append(event)
        if isinstance(event, MessageUpdate):
            first_delta.set()

    run = AgentRun(provider, [], LoopConfig(model="m"), emit, on_cancel=boom)
    task = asyncio.create_task(run.run([], [user("hi")]))
    await asyncio.wait_for(first_delta.wait(), HANG_GUARD)
    run.cancel()
    result = await asyncio.wait_for(task, HANG_GUARD)
    assert result.stop_reason == "cancelled"
    assert_well_formed(events)


async def test_cancel_from_an_event_consumer_stops_the_stream() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="a" * 40)], chunk_chars=4)
    holder: dict[str, AgentRun] = {}
    events = Events()

    def emit(event: AgentEvent) -> None:
        events.append(event)
        if isinstance(event, MessageUpdate) and event.assistant_event.type == "text_delta":
            holder["run"].cancel()

    run = AgentRun(provider, [], LoopConfig(model="m"), emit)
    holder["run"] = run

    result = await run_to_end(run)

    assert result.stop_reason == "cancelled"
    assert text_of(result.messages[-1]) == "aaaa"
    assert_well_formed(events)


async def test_cancel_during_a_slow_tool_cancels_the_tool() -> None:
    slow = BlockingTool()
    provider = ScriptedProvider(
        [ScriptedTurn(tool_calls=[call("wait"), call("echo", text="x")]), ScriptedTurn(text="?")]
    )
    echo = EchoTool()
    run, events = make_run(provider, [slow, echo])
    task = asyncio.create_task(run.run([], [user("hi")]))
    await asyncio.wait_for(slow.started.wait(), HANG_GUARD)
    run.cancel()
    result = await asyncio.wait_for(task, HANG_GUARD)

    assert result.stop_reason == "cancelled"
    assert slow.cancelled
    assert echo.calls == []
    assert provider.calls == 1
    # Both calls have results, so the transcript can go to a model again.
    results = [m for m in result.messages if m.role == "tool_result"]
    assert [(m.tool_call_id, m.is_error, text_of(m)) for m in results] == [
        ("call_1", True, CANCELLED_TEXT),
        ("call_2", True, CANCELLED_TEXT),
    ]
    assert events.of(TurnEnd)[-1].tool_results == results
    assert events.types()[-2:] == ["turn_end", "agent_end"]
    assert_well_formed(events)


async def test_cancel_before_the_run_starts_makes_no_model_call() -> None:
    provider = ScriptedProvider()
    run, events = make_run(provider)
    run.cancel()

    result = await run_to_end(run)

    assert result.stop_reason == "cancelled"
    assert provider.calls == 0
    assert [m.role for m in result.messages] == ["user"]
    assert_well_formed(events)


async def test_external_cancellation_during_the_stream_is_re_raised_after_closing() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="x" * 200)], chunk_chars=2, delay=0.01)
    first_delta = asyncio.Event()
    events = Events()

    def emit(event: AgentEvent) -> None:
        events.append(event)
        if isinstance(event, MessageUpdate) and event.assistant_event.type == "text_delta":
            first_delta.set()

    run = AgentRun(provider, [], LoopConfig(model="m"), emit)
    task = asyncio.create_task(run.run([], [user("hi")]))
    await asyncio.wait_for(first_delta.wait(), HANG_GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG_GUARD)

    assert task.cancelled()
    assert events.types()[-3:] == ["message_end", "turn_end", "agent_end"]
    partial = events.of(MessageEnd)[-1].message
    assert partial.stop_reason == "cancelled" and text_of(partial).startswith("xx")
    assert run.messages[-1] is partial  # still there for persistence
    assert not run.running
    assert_well_formed(events)


async def test_external_cancellation_during_a_tool_cancels_the_tool_and_is_re_raised() -> None:
    slow = BlockingTool()
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[call("wait")])])
    run, events = make_run(provider, [slow])
    task = asyncio.create_task(run.run([], [user("hi")]))
    await asyncio.wait_for(slow.started.wait(), HANG_GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG_GUARD)

    assert slow.cancelled
    assert [m.role for m in run.messages] == ["user", "assistant", "tool_result"]
    assert events.types()[-2:] == ["turn_end", "agent_end"]
    assert_well_formed(events)


# --- provider failures ---------------------------------------------------------------------


class RaisingProvider:
    """Streams one delta, then raises."""

    name = "broken"

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[ProviderItem]:
        yield AssistantStreamEvent(type="text_start", content_index=0)
        yield AssistantStreamEvent(type="text_delta", content_index=0, delta="Par")
        raise ConnectionError("connection reset by peer")

    async def aclose(self) -> None:
        return None


class EndlessProvider:
    """A stream that ends without its result."""

    name = "endless"

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[ProviderItem]:
        yield AssistantStreamEvent(type="text_delta", content_index=0, delta="hm")

    async def aclose(self) -> None:
        return None


async def test_a_raising_provider_ends_the_run_with_an_error() -> None:
    run, events = make_run(RaisingProvider())

    result = await run_to_end(run)

    assert result.stop_reason == "error"
    assert result.error_message == "connection reset by peer"
    message = events.of(MessageEnd)[-1].message
    assert message.stop_reason == "error" and message.error_message == "connection reset by peer"
    assert text_of(message) == "Par"
    assert result.messages[-1] is message
    assert events.types()[-1] == "agent_end"
    assert_well_formed(events)


async def test_a_stream_without_a_result_is_an_error() -> None:
    run, events = make_run(EndlessProvider())

    result = await run_to_end(run)

    assert result.stop_reason == "error"
    assert result.error_message is not None and "without a result" in result.error_message
    assert_well_formed(events)


async def test_an_error_stop_from_the_provider_ends_the_run() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="half", stop_reason="error")])
    run, events = make_run(provider)

    result = await run_to_end(run)

    assert result.stop_reason == "error"
    assert result.error_message == "scripted error"
    assert provider.calls == 1
    assert_well_formed(events)


@pytest.mark.parametrize("reason", ["max_tokens", "refusal"])
async def test_other_stop_reasons_end_the_run(reason: str) -> None:
    provider = ScriptedProvider([ScriptedTurn(text="partial", stop_reason=reason)])
    run, _ = make_run(provider)

    result = await run_to_end(run)

    assert result.stop_reason == reason


class FinalOnlyProvider:
    """Answers without streaming events and with no stop reason."""

    name = "plain"

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[ProviderItem]:
        yield AssistantResult(Message(role="assistant", content=[TextContent(text="hi")]))

    async def aclose(self) -> None:
        return None


async def test_a_missing_stop_reason_without_tool_calls_ends_the_turn() -> None:
    run, events = make_run(FinalOnlyProvider())

    result = await run_to_end(run)

    assert result.stop_reason == "end_turn"
    assert events.types().count("message_update") == 0


# --- robustness and misuse -----------------------------------------------------------------


async def test_a_failing_event_consumer_does_not_break_the_run() -> None:
    seen: list[str] = []

    def emit(event: AgentEvent) -> None:
        seen.append(event.type)
        if event.type == "message_update":
            raise RuntimeError("consumer bug")

    run = AgentRun(ScriptedProvider(), [], LoopConfig(model="m"), emit)

    result = await run_to_end(run)

    assert result.stop_reason == "end_turn"
    assert seen[-1] == "agent_end"


async def test_a_run_runs_once() -> None:
    run, _ = make_run(ScriptedProvider())
    await run_to_end(run)
    with pytest.raises(RuntimeError):
        await run_to_end(run)


def test_two_tools_with_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="echo"):
        make_run(ScriptedProvider(), [EchoTool(), EchoTool()])


def test_a_tool_with_an_invalid_schema_is_refused() -> None:
    tool = EchoTool()
    tool.spec = ToolDefinition("bad", "", {"type": "no-such-type"})
    with pytest.raises(ValueError, match="bad"):
        make_run(ScriptedProvider(), [tool])


class ProgressTool:
    """Reports two partial results before it finishes."""

    spec = ToolDefinition("progress", "Works in steps.", {"type": "object", "properties": {}})
    timeout: float | None = None

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        context.report_progress("step 1 of 2")
        context.report_progress({"done": 2, "of": 2})
        return ToolOutput("finished")


async def test_tool_progress_is_emitted_as_tool_execution_updates() -> None:
    from botd.events import ToolExecutionUpdate

    provider = ScriptedProvider(
        [ScriptedTurn(tool_calls=[call("progress")]), ScriptedTurn(text="ok")]
    )
    run, events = make_run(provider, [ProgressTool()])
    await run_to_end(run)
    updates = events.of(ToolExecutionUpdate)
    assert [u.partial_result for u in updates] == ["step 1 of 2", {"done": 2, "of": 2}]
    types = events.types()
    start, end = types.index("tool_execution_start"), types.index("tool_execution_end")
    assert all(start < types.index("tool_execution_update") < end for _ in updates)


# --- images the model refuses --------------------------------------------------------------


class ImageRefusingProvider(RecordingProvider):
    """Refuses every request holding one of the images in ``refuse``, naming them as a
    provider reads them off the server's error (``one_at_a_time``: only the first one held,
    as an error naming a place does); answers the other requests with ``inner``."""

    def __init__(self, inner: Any, refuse: set[str], *, one_at_a_time: bool = False) -> None:
        super().__init__(inner)
        self.refuse = refuse
        self.one_at_a_time = one_at_a_time

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        self.requests.append(request)
        held = [data for data in image_data(request.messages) if data in self.refuse]
        if held:
            return self._refusal(frozenset(held[:1] if self.one_at_a_time else held))
        stream: AsyncIterator[ProviderItem] = self.inner.stream(request)
        return stream

    async def _refusal(self, named: frozenset[str]) -> AsyncIterator[ProviderItem]:
        error = "HTTP 400: image too large"
        message = Message(role="assistant", stop_reason="error", error_message=error)
        yield AssistantResult(message, named)


def image_data(messages: list[Message]) -> list[str]:
    return [b.data for m in messages for b in m.blocks() if isinstance(b, ImageContent)]


def with_image(text: str, *data: str) -> Message:
    images = [ImageContent(mime_type="image/png", data=d) for d in data]
    return Message(role="user", content=[TextContent(text=text), *images])


LeftOut = list[tuple[frozenset[str], list[Message]]]


def refusing_run(provider: Any, tools: list[Any] | None = None) -> tuple[AgentRun, Events, LeftOut]:
    events, left_out = Events(), []

    async def leave_out(refused: frozenset[str], held: list[Message]) -> None:
        left_out.append((refused, held))

    run = AgentRun(
        provider,
        tools or [],
        LoopConfig(model="test-model"),
        events.append,
        on_images_left_out=leave_out,
    )
    return run, events, left_out


async def test_a_refused_image_is_left_out_and_the_model_asked_once_more() -> None:
    provider = ImageRefusingProvider(ScriptedProvider([ScriptedTurn(text="Answered.")]), {"BAD"})
    run, events, left_out = refusing_run(provider)
    earlier = [with_image("earlier", "BAD", "GOOD"), Message(role="assistant", content="Seen.")]
    prompt = with_image("and this?", "BAD")

    result = await asyncio.wait_for(run.run(earlier, [prompt]), HANG_GUARD)

    assert result.stop_reason == "end_turn"
    refused, retried = provider.requests
    assert image_data(refused.messages) == ["BAD", "GOOD", "BAD"]
    assert image_data(retried.messages) == ["GOOD"]
    assert text_of(retried.messages[0]) == f"earlier{LEFT_OUT_IMAGE}"
    assert text_of(retried.messages[-1]) == f"and this?{LEFT_OUT_IMAGE}"
    # The caller hears once, with the messages that held the image, before they change.
    [(images, held)] = left_out
    assert images == {"BAD"} and held == [earlier[0], prompt]
    # The refused attempt ends as a message, but the run keeps only the answer.
    ends = [e.message for e in events.of(MessageEnd) if e.message.role == "assistant"]
    assert [m.stop_reason for m in ends] == ["error", "end_turn"]
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert image_data(result.messages) == [] and text_of(result.messages[1]) == "Answered."
    assert events.types().count("turn_start") == 1  # asked again in the same turn
    assert_well_formed(events)


class Screenshot:
    """Returns an image ``X``."""

    spec = ToolDefinition(name="shot", description="", input_schema={"type": "object"})
    timeout: float | None = None

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput(text="here", images=(ImageContent(mime_type="image/png", data="X"),))


async def test_an_image_a_tool_returned_is_left_out_of_the_next_call() -> None:
    script = [ScriptedTurn(tool_calls=[call("shot")]), ScriptedTurn(text="Described.")]
    provider = ImageRefusingProvider(ScriptedProvider(script), {"X"})
    run, _events, left_out = refusing_run(provider, [Screenshot()])

    result = await run_to_end(run)

    assert result.stop_reason == "end_turn"
    assert [image_data(r.messages) for r in provider.requests] == [[], ["X"], []]
    [(_images, [held])] = left_out
    assert held.role == "tool_result"
    tool_result = next(m for m in result.messages if m.role == "tool_result")
    assert image_data([tool_result]) == [] and LEFT_OUT_IMAGE in text_of(tool_result)


async def test_a_second_refusal_ends_the_run_with_its_error_and_leaves_that_image_out() -> None:
    inner = ScriptedProvider([ScriptedTurn(text="never")])
    provider = ImageRefusingProvider(inner, {"A", "B"}, one_at_a_time=True)
    run, _events, left_out = refusing_run(provider)

    result = await asyncio.wait_for(run.run([], [with_image("two", "A", "B")]), HANG_GUARD)

    assert result.stop_reason == "error"
    assert result.error_message == "HTTP 400: image too large"
    assert len(provider.requests) == 2  # asked once more, not again
    assert [images for images, _held in left_out] == [{"A"}, {"B"}]
    # What the run keeps holds neither image: the next run does not meet them.
    assert image_data(result.messages) == []
    assert [m.role for m in result.messages] == ["user", "assistant"]
