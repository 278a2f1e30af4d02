"""OpenAIProvider against a loopback fake of the chat-completions API (tests/fakes/openai_api)."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from botd.agent.providers.openai import OpenAIProvider, build_request_body
from botd.agent.types import AssistantResult, ModelRequest, ToolDefinition
from botd.events import (
    AssistantStreamEvent,
    ContentBlock,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)
from botd.ops.outages import Reachability
from tests.fakes.image_headers import png
from tests.fakes.openai_api import ChatStream, ErrorReply, FakeOpenAI
from tests.fakes.proxies import Socks5Proxy
from tests.support.waiting import HANG_GUARD

"""Seconds before a test that hangs fails (a guard, never a timing assertion)."""

WEATHER_TOOL = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)

ProviderFactory = Callable[..., OpenAIProvider]


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def make_provider(fake: FakeOpenAI) -> AsyncIterator[ProviderFactory]:
    made: list[OpenAIProvider] = []

    def factory(**options: Any) -> OpenAIProvider:
        options.setdefault("base_url", fake.base_url)
        options.setdefault("max_retry_wait", 0.05)
        provider = OpenAIProvider(**options)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


def ask(text: str = "What's the weather in Paris?", **fields: Any) -> ModelRequest:
    fields.setdefault("model", "fake-model")
    fields.setdefault("system", "You are terse.")
    fields.setdefault("messages", [Message(role="user", content=text)])
    return ModelRequest(**fields)


async def run(
    provider: OpenAIProvider, request: ModelRequest
) -> tuple[list[AssistantStreamEvent], Message]:
    """The stream's events and its final message; checks the stream's shape on the way."""
    async with asyncio.timeout(HANG_GUARD):
        items = [item async for item in provider.stream(request)]
    *events, last = items
    assert isinstance(last, AssistantResult)
    assert all(isinstance(event, AssistantStreamEvent) for event in events)
    return [e for e in events if isinstance(e, AssistantStreamEvent)], last.message


def kinds(events: list[AssistantStreamEvent]) -> list[str]:
    return [event.type for event in events]


# --- streaming ---------------------------------------------------------------------------------


async def test_streams_text_and_usage(fake: FakeOpenAI, make_provider: ProviderFactory) -> None:
    fake.enqueue(ChatStream().role().text("Hel", "lo ", "world").finish("stop").usage(12, 3))
    provider = make_provider()

    events, message = await run(provider, ask(temperature=0.2, max_tokens=256))

    assert kinds(events) == ["text_start", "text_delta", "text_delta", "text_delta", "text_end"]
    assert [e.delta for e in events if e.type == "text_delta"] == ["Hel", "lo ", "world"]
    assert {e.content_index for e in events} == {0}
    assert events[-1].content == "Hello world"
    assert message.role == "assistant"
    assert message.content == [TextContent(text="Hello world")]
    assert message.stop_reason == "end_turn"
    assert message.error_message is None
    assert message.usage == {"input_tokens": 12, "output_tokens": 3}
    assert message.model == "fake-model"
    assert message.provider == "openai"
    assert not fake.stream_closed_early.is_set()

    (recorded,) = fake.requests
    assert recorded.path == "/v1/chat/completions"
    assert recorded.body == {
        "model": "fake-model",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What's the weather in Paris?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 256,
        "temperature": 0.2,
    }


async def test_bearer_header_only_with_a_key(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(ChatStream().text("a").finish("stop"), ChatStream().text("b").finish("stop"))

    await run(make_provider(), ask())
    await run(make_provider(api_key="sk-test-123", extra_headers={"X-Title": "botd"}), ask())

    anonymous, keyed = fake.requests
    assert "authorization" not in anonymous.headers
    assert keyed.headers["authorization"] == "Bearer sk-test-123"
    assert keyed.headers["x-title"] == "botd"


async def test_tool_call_with_split_arguments_then_result_sent_back(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(
        ChatStream()
        .role()
        .text("Let me check.")
        .tool_call("call_1", "get_weather", '{"ci', 'ty": "Par', 'is"}')
        .finish("tool_calls")
        .usage(40, 20),
        ChatStream().text("Sunny, 18°C.").finish("stop"),
    )
    provider = make_provider()
    first = ask(tools=[WEATHER_TOOL])

    events, assistant = await run(provider, first)

    assert kinds(events) == [
        "text_start",
        "text_delta",
        "text_end",
        "toolcall_start",
        "toolcall_delta",
        "toolcall_delta",
        "toolcall_delta",
        "toolcall_end",
    ]
    tool_events = [e for e in events if e.type.startswith("toolcall")]
    assert {e.content_index for e in tool_events} == {1}
    assert tool_events[0].content == "get_weather"
    assert tool_events[-1].content == '{"city": "Paris"}'
    assert assistant.stop_reason == "tool_use"
    assert assistant.content == [
        TextContent(text="Let me check."),
        ToolCallContent(id="call_1", name="get_weather", arguments={"city": "Paris"}),
    ]
    assert fake.requests[0].body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER_TOOL.input_schema,
            },
        }
    ]

    result = Message(
        role="tool_result",
        tool_call_id="call_1",
        tool_name="get_weather",
        content=[TextContent(text="18°C, sunny")],
    )
    second = ask(tools=[WEATHER_TOOL], messages=[*first.messages, assistant, result])
    _, final = await run(provider, second)

    assert final.content == [TextContent(text="Sunny, 18°C.")]
    sent = fake.requests[1].body["messages"]
    assert sent[:2] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What's the weather in Paris?"},
    ]
    assistant_sent, tool_sent = sent[2], sent[3]
    assert assistant_sent["role"] == "assistant"
    assert assistant_sent["content"] == "Let me check."
    (call,) = assistant_sent["tool_calls"]
    assert call["id"] == "call_1"
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert tool_sent == {"role": "tool", "tool_call_id": "call_1", "content": "18°C, sunny"}
    assert len(sent) == 4


async def test_two_tool_calls_in_one_reply(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(
        ChatStream()
        .tool_call("call_a", "get_weather", '{"city": ', '"Oslo"}', index=0)
        .tool_call("call_b", "get_weather", '{"city": "Rome"}', index=1)
        .finish("tool_calls")
    )

    events, message = await run(make_provider(), ask(tools=[WEATHER_TOOL]))

    assert [(e.type, e.content_index) for e in events if e.type != "toolcall_delta"] == [
        ("toolcall_start", 0),
        ("toolcall_end", 0),
        ("toolcall_start", 1),
        ("toolcall_end", 1),
    ]
    assert message.content == [
        ToolCallContent(id="call_a", name="get_weather", arguments={"city": "Oslo"}),
        ToolCallContent(id="call_b", name="get_weather", arguments={"city": "Rome"}),
    ]


async def test_invalid_tool_arguments_are_kept_raw(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(
        ChatStream().tool_call("call_1", "get_weather", '{"city": Par').finish("tool_calls")
    )

    _, message = await run(make_provider(), ask(tools=[WEATHER_TOOL]))

    assert message.stop_reason == "tool_use"
    assert message.content == [
        ToolCallContent(id="call_1", name="get_weather", arguments={"_raw": '{"city": Par'})
    ]


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
async def test_reasoning_chunks_become_thinking(
    fake: FakeOpenAI, make_provider: ProviderFactory, key: str
) -> None:
    fake.enqueue(
        ChatStream().reasoning("The user ", "wants a number.", key=key).text("42").finish("stop")
    )

    events, message = await run(make_provider(), ask("Pick a number"))

    assert [(e.type, e.content_index) for e in events] == [
        ("thinking_start", 0),
        ("thinking_delta", 0),
        ("thinking_delta", 0),
        ("thinking_end", 0),
        ("text_start", 1),
        ("text_delta", 1),
        ("text_end", 1),
    ]
    assert events[3].content == "The user wants a number."
    assert message.content == [
        ThinkingContent(thinking="The user wants a number."),
        TextContent(text="42"),
    ]


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [("length", "max_tokens"), ("content_filter", "refusal"), ("stop", "end_turn")],
)
async def test_finish_reasons(
    fake: FakeOpenAI, make_provider: ProviderFactory, finish_reason: str, stop_reason: str
) -> None:
    fake.enqueue(ChatStream().text("Once upon").finish(finish_reason))

    _, message = await run(make_provider(), ask())

    assert message.stop_reason == stop_reason
    assert message.content == [TextContent(text="Once upon")]


async def test_multiline_events_and_keepalive_comments(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    pretty = json.dumps(
        {"model": "fake-model", "choices": [{"index": 0, "delta": {"content": "two lines"}}]},
        indent=2,
    )
    fake.enqueue(
        ChatStream()
        .comment("keepalive")
        .text("one, ")
        .comment()
        .data(pretty)  # one event whose data spans several ``data:`` lines
        .finish("stop")
    )

    events, message = await run(make_provider(), ask())

    assert [e.delta for e in events if e.type == "text_delta"] == ["one, ", "two lines"]
    assert message.content == [TextContent(text="one, two lines")]
    assert message.stop_reason == "end_turn"


# --- retries -----------------------------------------------------------------------------------


async def test_429_with_huge_retry_after_waits_at_most_max_retry_wait(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(
        ErrorReply(429, {"error": {"message": "Rate limit reached"}}, {"retry-after": "3600"}),
        ChatStream().text("made it").finish("stop"),
    )

    events, message = await run(make_provider(max_retry_wait=0.2), ask())

    assert message.stop_reason == "end_turn"
    assert message.content == [TextContent(text="made it")]
    assert kinds(events) == ["text_start", "text_delta", "text_end"]
    assert len(fake.requests) == 2


async def test_503_then_success(fake: FakeOpenAI, make_provider: ProviderFactory) -> None:
    fake.enqueue(
        ErrorReply(503, {"error": {"message": "overloaded"}}),
        ChatStream().text("back").finish("stop"),
    )

    _, message = await run(make_provider(), ask())

    assert message.stop_reason == "end_turn"
    assert message.content == [TextContent(text="back")]
    assert len(fake.requests) == 2


async def test_retries_exhausted_end_with_an_error(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(*[ErrorReply(503, {"error": {"message": "model is loading"}})] * 3)

    events, message = await run(make_provider(max_retries=2), ask())

    assert events == []
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "model is loading" in message.error_message
    assert "503" in message.error_message
    assert message.content == []
    assert len(fake.requests) == 3


async def test_400_is_not_retried_and_keeps_the_servers_words(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(
        ErrorReply(
            400,
            {"error": {"message": "model 'nope' not found", "type": "invalid_request_error"}},
        ),
        ChatStream().text("never sent").finish("stop"),
    )

    events, message = await run(make_provider(), ask(model="nope"))

    assert events == []
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "model 'nope' not found" in message.error_message
    assert len(fake.requests) == 1
    assert fake.pending == 1


async def test_plain_string_error_body(fake: FakeOpenAI, make_provider: ProviderFactory) -> None:
    fake.enqueue(ErrorReply(404, {"error": 'model "llama9" not found, try pulling it first'}))

    _, message = await run(make_provider(), ask())

    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert 'model "llama9" not found, try pulling it first' in message.error_message


async def test_connection_refused_retries_then_errors(make_provider: ProviderFactory) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    provider = make_provider(base_url=f"http://127.0.0.1:{closed_port}/v1", max_retries=1)

    events, message = await run(provider, ask())

    assert events == []
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "cannot connect" in message.error_message


async def test_health_counts_what_says_the_server_is_out_not_what_it_refuses(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    health = Reachability("model:openai/fake-model", down_after=3600, after_failures=2)
    provider = make_provider(max_retries=0, health=health)
    fake.enqueue(ErrorReply(400, {"error": {"message": "context too long"}}))
    await run(provider, ask())
    assert not health.failing  # the server answered: this request was refused
    fake.enqueue(ErrorReply(503, {"error": {"message": "model is loading"}}))
    await run(provider, ask())
    assert health.failing and health.outage() is None  # one call: not yet
    fake.enqueue(ErrorReply(401, {"error": {"message": "invalid api key"}}))
    await run(provider, ask())
    outage = health.outage()
    assert outage is not None and outage.failures == 2
    assert outage.error == "HTTP 401: invalid api key"
    fake.enqueue(ChatStream().text("back").finish("stop"))
    await run(provider, ask())
    assert not health.failing and health.outage() is None


# --- failures mid-stream -------------------------------------------------------------------------


async def test_error_chunk_mid_stream_keeps_the_text(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(
        ChatStream().text("Partial ", "answer").error("Upstream provider crashed", code=502)
    )

    events, message = await run(make_provider(), ask())

    assert kinds(events) == ["text_start", "text_delta", "text_delta", "text_end"]
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "Upstream provider crashed" in message.error_message
    assert message.content == [TextContent(text="Partial answer")]
    assert len(fake.requests) == 1


async def test_dropped_connection_mid_stream_keeps_the_text(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(ChatStream().text("Half a ", "sentence").drop_connection())

    events, message = await run(make_provider(), ask())

    assert kinds(events) == ["text_start", "text_delta", "text_delta", "text_end"]
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "connection" in message.error_message
    assert message.content == [TextContent(text="Half a sentence")]
    assert len(fake.requests) == 1


async def test_tool_call_cut_off_mid_arguments_is_dropped(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(
        ChatStream()
        .text("Checking.")
        .tool_call("call_1", "get_weather", '{"city": "Pa')
        .drop_connection()
    )

    events, message = await run(make_provider(), ask(tools=[WEATHER_TOOL]))

    assert kinds(events) == [
        "text_start",
        "text_delta",
        "text_end",
        "toolcall_start",
        "toolcall_delta",
    ]
    assert message.stop_reason == "error"
    assert message.content == [TextContent(text="Checking.")]


async def test_stream_ending_without_finish_is_an_error(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    fake.enqueue(ChatStream().text("cut").without_done())

    _, message = await run(make_provider(), ask())

    assert message.stop_reason == "error"
    assert message.content == [TextContent(text="cut")]


async def test_cancellation_closes_the_connection(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    # Far longer than the hang guard, so only a closed connection lets the fake notice in time.
    fake.enqueue(ChatStream().text(*["word "] * 2000).finish("stop").slow(0.02))
    provider = make_provider()
    first_text = asyncio.Event()
    received: list[AssistantStreamEvent | AssistantResult] = []

    async def consume() -> None:
        async for item in provider.stream(ask()):
            received.append(item)
            if isinstance(item, AssistantStreamEvent) and item.type == "text_delta":
                first_text.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(HANG_GUARD):
        await first_text.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await fake.stream_closed_early.wait()

    assert not any(isinstance(item, AssistantResult) for item in received)


# --- request mapping -----------------------------------------------------------------------------


def test_thinking_is_not_sent_back_and_images_become_parts() -> None:
    request = ModelRequest(
        model="m",
        messages=[
            Message(
                role="user",
                content=[
                    TextContent(text="What is this?"),
                    ImageContent(mime_type="image/png", data="iVBORw0KGgo="),
                ],
            ),
            Message(
                role="assistant",
                content=[ThinkingContent(thinking="hmm"), TextContent(text="A cat.")],
            ),
        ],
    )

    body = build_request_body(request)

    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
        {"role": "assistant", "content": "A cat."},
    ]
    assert "tools" not in body


def test_tool_calls_without_a_result_are_left_out() -> None:
    interrupted = Message(
        role="assistant",
        content=[ToolCallContent(id="call_9", name="get_weather", arguments={"city": "Lima"})],
        stop_reason="tool_use",
    )
    request = ModelRequest(
        model="m",
        messages=[
            Message(role="user", content="weather?"),
            interrupted,
            Message(role="user", content="never mind"),
        ],
    )

    assert build_request_body(request)["messages"] == [
        {"role": "user", "content": "weather?"},
        {"role": "user", "content": "never mind"},
    ]


async def test_a_cancelled_run_stops_as_cancelled_and_closes_the_stream(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    from botd.agent.loop import AgentRun, LoopConfig
    from botd.events import AgentEvent

    fake.enqueue(ChatStream().role().text("partial ", "answer ", "more", "and more").slow(0.05))
    events: list[AgentEvent] = []
    first_delta = asyncio.Event()

    def emit(event: AgentEvent) -> None:
        events.append(event)
        if event.type == "message_update" and event.assistant_event.type == "text_delta":
            first_delta.set()

    agent = AgentRun(make_provider(), [], LoopConfig(model="local-model"), emit)
    task = asyncio.create_task(agent.run([], [Message(role="user", content="hi")]))
    await asyncio.wait_for(first_delta.wait(), HANG_GUARD)
    agent.cancel()
    result = await asyncio.wait_for(task, HANG_GUARD)

    assert result.stop_reason == "cancelled"
    await asyncio.wait_for(fake.stream_closed_early.wait(), HANG_GUARD)
    assert events[-1].type == "agent_end"
    ends = [e for e in events if e.type == "message_end" and e.message.role == "assistant"]
    assert ends and ends[-1].message.stop_reason == "cancelled"


# --- a request refused for an image -------------------------------------------------------


def image_of(width: int, height: int) -> ImageContent:
    return ImageContent(mime_type="image/png", data=base64.b64encode(png(width, height)).decode())


async def final(provider: OpenAIProvider, request: ModelRequest) -> AssistantResult:
    async with asyncio.timeout(HANG_GUARD):
        items = [item async for item in provider.stream(request)]
    assert isinstance(items[-1], AssistantResult)
    return items[-1]


def with_images(*images: ImageContent) -> ModelRequest:
    return ask(
        messages=[
            Message(role="user", content=[TextContent(text="first"), images[0]]),
            Message(role="assistant", content="Seen."),
            Message(role="user", content=[TextContent(text="and these"), *images[1:]]),
        ]
    )


async def test_an_invalid_image_refusal_blames_every_image_of_the_request(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    small, wide = image_of(10, 10), image_of(9000, 100)

    result = await final(make_provider(), with_images(small, wide))

    assert fake.refusals == 1 and len(fake.requests) == 1  # a 400 is not retried
    assert result.refused_images == {small.data, wide.data}  # OpenAI names no place
    assert result.message.stop_reason == "error"
    assert result.message.error_message == "HTTP 400: Invalid image."


async def test_an_image_error_naming_its_place_blames_that_image(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    first, second, third = image_of(10, 10), image_of(11, 11), image_of(12, 12)
    error = {
        "message": "Invalid 'messages[3].content[2].image_url'. Unable to parse the image.",
        "type": "invalid_request_error",
        "param": "messages[3].content[2].image_url",
        "code": "image_parse_error",
    }
    fake.enqueue(ErrorReply(400, {"error": error}))

    # messages[0] is the system prompt; [3] the second user message: text, then two images.
    result = await final(make_provider(), with_images(first, second, third))

    assert result.refused_images == {third.data}


async def test_a_server_saying_only_invalid_image_blames_every_image(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    one, two = image_of(10, 10), image_of(12, 12)
    fake.enqueue(ErrorReply(400, {"error": "image: unknown format"}))  # Ollama's shape

    result = await final(make_provider(), with_images(one, two))

    assert result.refused_images == {one.data, two.data}


@pytest.mark.parametrize(
    ("reply", "with_image"),
    [
        (ErrorReply(400, {"error": {"message": "max_tokens is too large", "code": None}}), True),
        (ErrorReply(400, {"error": {"message": "Invalid image.", "code": "invalid_image"}}), False),
        (ErrorReply(500, {"error": {"message": "image service failed"}}), True),
    ],
)
async def test_other_failures_blame_no_image(
    fake: FakeOpenAI, make_provider: ProviderFactory, reply: ErrorReply, with_image: bool
) -> None:
    fake.enqueue(reply)
    content: list[ContentBlock] = [TextContent(text="hi")]
    if with_image:
        content.append(image_of(10, 10))

    request = ask(messages=[Message(role="user", content=content)])
    result = await final(make_provider(max_retries=0), request)

    assert result.message.stop_reason == "error"
    assert result.refused_images == frozenset()


# --- proxy ---------------------------------------------------------------------------------------


async def test_a_model_proxy_carries_the_stream(
    fake: FakeOpenAI, make_provider: ProviderFactory
) -> None:
    """``model.proxy`` reaches the OpenAI-compatible client (the Anthropic one is tried with
    the daemon, tests/channels/test_proxies.py): a SOCKS5 one here, loopback included."""
    fake.enqueue(ChatStream().role().text("through").finish("stop"))
    async with Socks5Proxy() as proxy:
        provider = make_provider(proxy=proxy.url)
        _, message = await run(provider, ask())
    assert message.content == [TextContent(text="through")]
    assert [path for _, path in proxy.requests] == ["/v1/chat/completions"]
