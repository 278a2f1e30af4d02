"""AnthropicProvider end to end: the real anthropic SDK against the loopback fake API."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from botd.agent.providers.anthropic import AnthropicProvider, to_api_messages
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
from tests.fakes.anthropic_api import (
    FakeAnthropicAPI,
    StreamReply,
    http_error,
    stream,
    text,
    thinking,
    tool_use,
)
from tests.fakes.image_headers import png
from tests.support.waiting import HANG_GUARD

API_KEY = "sk-ant-test-0123456789-secret"
MODEL = "claude-test-1"

ProviderFactory = Callable[..., AnthropicProvider]


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def make_provider(fake: FakeAnthropicAPI) -> AsyncIterator[ProviderFactory]:
    built: list[AnthropicProvider] = []

    def build(**options: Any) -> AnthropicProvider:
        options.setdefault("base_url", fake.base_url)
        provider = AnthropicProvider(api_key=API_KEY, **options)
        built.append(provider)
        return provider

    yield build
    for provider in built:  # the SDK client closes before the fake stops
        await provider.aclose()


def user(content: str) -> Message:
    return Message(role="user", content=content)


def ask(*messages: Message, **options: Any) -> ModelRequest:
    return ModelRequest(model=MODEL, messages=list(messages), **options)


async def run(
    provider: AnthropicProvider, request: ModelRequest
) -> tuple[list[AssistantStreamEvent], Message]:
    """The stream's events, and the message of its final result (which must come last)."""

    async def consume() -> tuple[list[AssistantStreamEvent], Message]:
        items = [item async for item in provider.stream(request)]
        assert items, "the stream yielded nothing"
        *events, last = items
        assert isinstance(last, AssistantResult), f"last item is {last!r}"
        assert all(isinstance(e, AssistantStreamEvent) for e in events)
        return [e for e in events if isinstance(e, AssistantStreamEvent)], last.message

    return await asyncio.wait_for(consume(), HANG_GUARD)


def shape(events: list[AssistantStreamEvent]) -> list[tuple[str, int | None, str | None]]:
    return [
        (e.type, e.content_index, e.delta if e.delta is not None else e.content) for e in events
    ]


async def test_text_streams_in_order_and_ends_with_the_full_message(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    usage = {
        "input_tokens": 30,
        "output_tokens": 5,
        "cache_read_input_tokens": 20,
        "cache_creation_input_tokens": 3,
    }
    fake.push(stream(text("Hello ", "world"), usage=usage))

    events, message = await run(make_provider(), ask(user("hi")))

    assert shape(events) == [
        ("text_start", 0, None),
        ("text_delta", 0, "Hello "),
        ("text_delta", 0, "world"),
        ("text_end", 0, "Hello world"),
    ]
    assert message.role == "assistant"
    assert message.content == [TextContent(text="Hello world")]
    assert message.stop_reason == "end_turn"
    assert message.error_message is None
    assert message.usage == usage
    assert message.model == MODEL
    assert message.provider == "anthropic"

    (sent,) = fake.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.body["stream"] is True
    assert sent.body["model"] == MODEL
    assert sent.body["max_tokens"] == 4096
    assert sent.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert "thinking" not in sent.body
    assert fake.streams[0].completed


async def test_concurrent_requests_each_get_the_reply_made_from_their_body(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    fake.push(stream(text("scripted first")))

    def echo(body: dict[str, Any]) -> StreamReply:
        asked = body["messages"][-1]["content"][0]["text"]
        return stream(text("you asked: ", asked))

    fake.responder = echo
    provider = make_provider()
    first = await run(provider, ask(user("one")))
    answers = await asyncio.gather(*(run(provider, ask(user(f"q{n}"))) for n in range(5)))

    assert first[1].content == [TextContent(text="scripted first")]
    got = [message.content for _, message in answers]
    assert got == [[TextContent(text=f"you asked: q{n}")] for n in range(5)]


async def test_tool_calls_are_parsed_and_their_results_sent_back_merged(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    fake.push(
        stream(
            text("Checking."),
            tool_use("toolu_1", "get_weather", '{"city": ', '"Paris", "days"', ": 2}"),
            tool_use("toolu_2", "get_time", '{"tz": "Europe/Paris"}'),
            stop_reason="tool_use",
        ),
        stream(text("Sunny, 18°C.")),
    )
    provider = make_provider()
    question = user("Weather in Paris?")

    events, first = await run(provider, ask(question))

    assert first.stop_reason == "tool_use"
    assert first.content == [
        TextContent(text="Checking."),
        ToolCallContent(id="toolu_1", name="get_weather", arguments={"city": "Paris", "days": 2}),
        ToolCallContent(id="toolu_2", name="get_time", arguments={"tz": "Europe/Paris"}),
    ]
    tool_events = [e for e in events if e.type.startswith("toolcall") and e.content_index == 1]
    assert [e.type for e in tool_events] == [
        "toolcall_start",
        "toolcall_delta",
        "toolcall_delta",
        "toolcall_delta",
        "toolcall_end",
    ]
    assert "".join(e.delta or "" for e in tool_events) == '{"city": "Paris", "days": 2}'
    assert json.loads(tool_events[-1].content or "") == {"city": "Paris", "days": 2}

    results = [
        Message(
            role="tool_result",
            tool_call_id="toolu_1",
            tool_name="get_weather",
            content=[TextContent(text="18°C, sunny")],
        ),
        Message(
            role="tool_result",
            tool_call_id="toolu_2",
            tool_name="get_time",
            content="unknown timezone",
            is_error=True,
        ),
    ]
    _, second = await run(provider, ask(question, first, *results))

    assert second.content == [TextContent(text="Sunny, 18°C.")]
    sent = fake.requests[1].body["messages"]
    assert len(sent) == 3
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris", "days": 2},
            },
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "get_time",
                "input": {"tz": "Europe/Paris"},
            },
        ],
    }
    assert sent[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "18°C, sunny"}],
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": "unknown timezone",
                "is_error": True,
            },
        ],
    }


async def test_thinking_keeps_its_signature_and_is_echoed_back_unchanged(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    signature = "EqQBCkYIARgCKkD+/sig=="
    fake.push(
        stream(thinking("Let me ", "think.", signature=signature), text("42")),
        stream(text("Still 42.")),
    )
    provider = make_provider()
    question = user("The answer?")

    events, first = await run(provider, ask(question, thinking_budget=2048, max_tokens=8192))

    assert shape(events) == [
        ("thinking_start", 0, None),
        ("thinking_delta", 0, "Let me "),
        ("thinking_delta", 0, "think."),
        ("thinking_end", 0, "Let me think."),
        ("text_start", 1, None),
        ("text_delta", 1, "42"),
        ("text_end", 1, "42"),
    ]
    assert first.content == [
        ThinkingContent(thinking="Let me think.", signature=signature),
        TextContent(text="42"),
    ]
    assert fake.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert fake.requests[0].body["max_tokens"] == 8192

    await run(provider, ask(question, first, user("Sure?"), thinking_budget=2048))

    echoed = fake.requests[1].body["messages"][1]
    assert echoed["role"] == "assistant"
    assert echoed["content"][0] == {
        "type": "thinking",
        "thinking": "Let me think.",
        "signature": signature,
    }


async def test_system_prompt_and_last_tool_carry_cache_breakpoints(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    fake.push(stream(text("ok")))
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tools = [
        ToolDefinition(name="search", description="Search the web", input_schema=schema),
        ToolDefinition(name="fetch", description="Fetch a URL", input_schema=schema),
    ]

    await run(
        make_provider(), ask(user("hi"), system="You are botd.", tools=tools, temperature=0.3)
    )

    body = fake.requests[0].body
    assert body["temperature"] == 0.3
    assert body["system"] == [
        {"type": "text", "text": "You are botd.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"] == [
        {"name": "search", "description": "Search the web", "input_schema": schema},
        {
            "name": "fetch",
            "description": "Fetch a URL",
            "input_schema": schema,
            "cache_control": {"type": "ephemeral"},
        },
    ]


async def test_overloaded_529_is_retried_then_succeeds(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    fake.push(http_error(529, "overloaded_error", "Overloaded"), stream(text("ok")))

    events, message = await run(make_provider(max_retry_wait=0.05), ask(user("hi")))

    assert len(fake.requests) == 2
    assert message.stop_reason == "end_turn"
    assert message.content == [TextContent(text="ok")]
    assert [e.type for e in events] == ["text_start", "text_delta", "text_end"]


async def test_a_long_retry_after_is_capped_by_max_retry_wait(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory, caplog: pytest.LogCaptureFixture
) -> None:
    fake.push(
        http_error(429, "rate_limit_error", "Slow down", headers={"retry-after": "3600"}),
        stream(text("ok")),
    )
    caplog.set_level(logging.DEBUG)

    _, message = await run(make_provider(max_retry_wait=0.2), ask(user("hi")))

    assert message.stop_reason == "end_turn"
    assert len(fake.requests) == 2
    retry_logs = [r.getMessage() for r in caplog.records if "retry 1 of 3" in r.getMessage()]
    assert len(retry_logs) == 1
    assert "429" in retry_logs[0]
    assert "0.20s" in retry_logs[0]
    assert all(API_KEY not in r.getMessage() for r in caplog.records)


async def test_exhausted_retries_end_with_an_error_naming_the_status(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    fake.push(*[http_error(529, "overloaded_error", "Overloaded")] * 3, stream(text("too late")))

    events, message = await run(make_provider(max_retries=2, max_retry_wait=0.01), ask(user("hi")))

    assert len(fake.requests) == 3
    assert events == []
    assert message.stop_reason == "error"
    assert message.content == []
    assert message.error_message is not None
    assert "529" in message.error_message
    assert "overloaded_error" in message.error_message
    assert "gave up after 2 retries" in message.error_message
    assert API_KEY not in message.error_message


async def test_an_error_mid_stream_keeps_the_text_already_streamed(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    fake.push(
        stream(text("Partial ", "answer"), error=("overloaded_error", "Overloaded")),
        stream(text("must not be requested")),
    )

    events, message = await run(make_provider(max_retry_wait=0.01), ask(user("hi")))

    assert len(fake.requests) == 1  # text reached the consumer, so a retry would repeat it
    assert [e.type for e in events] == ["text_start", "text_delta", "text_delta"]
    assert message.stop_reason == "error"
    assert message.content == [TextContent(text="Partial answer")]
    assert message.error_message is not None
    assert "overloaded_error" in message.error_message
    assert "Overloaded" in message.error_message


async def test_an_in_stream_overload_before_any_output_is_retried(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    fake.push(stream(error=("overloaded_error", "Overloaded")), stream(text("ok")))

    events, message = await run(make_provider(max_retry_wait=0.01), ask(user("hi")))

    assert len(fake.requests) == 2
    assert message.stop_reason == "end_turn"
    assert message.content == [TextContent(text="ok")]
    assert [e.type for e in events] == ["text_start", "text_delta", "text_end"]


async def test_a_400_is_an_error_result_and_not_retried(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    fake.push(
        http_error(400, "invalid_request_error", "max_tokens: must be at most 64000"),
        stream(text("must not be requested")),
    )

    events, message = await run(make_provider(max_retry_wait=0.01), ask(user("hi")))

    assert len(fake.requests) == 1
    assert events == []
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "400" in message.error_message
    assert "invalid_request_error" in message.error_message
    assert "max_tokens: must be at most 64000" in message.error_message


async def test_an_unreachable_server_ends_with_an_error_after_retrying(
    make_provider: ProviderFactory,
) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    provider = make_provider(
        base_url=f"http://127.0.0.1:{closed_port}", max_retries=1, max_retry_wait=0.01
    )

    _, message = await run(provider, ask(user("hi")))

    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "could not reach the Anthropic API" in message.error_message
    assert "gave up after 1 retry" in message.error_message


@pytest.mark.parametrize("cancelled_while", ["awaiting_the_stream", "busy_elsewhere"])
async def test_cancelling_the_consumer_closes_the_http_stream(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory, cancelled_while: str
) -> None:
    fake.push(stream(text("a", "b", "c"), delay=0.02, stall=True))
    provider = make_provider()
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for item in provider.stream(ask(user("hi"))):
            if isinstance(item, AssistantStreamEvent) and item.type == "text_delta":
                first_delta.set()
                if cancelled_while == "busy_elsewhere":
                    # e.g. posting to a chat: the provider sits suspended at its yield
                    await asyncio.Event().wait()  # never set: until cancelled

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), HANG_GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG_GUARD)

    served = await fake.wait_stream_ended(0, timeout=HANG_GUARD)
    assert served.closed_by_client
    assert not served.completed
    assert len(fake.requests) == 1


def test_conversation_mapping_repairs_what_the_api_would_refuse() -> None:
    messages = [
        Message(
            role="user",
            content=[
                TextContent(text="What is this?"),
                ImageContent(mime_type="image/png", data="iVBORw0KGgo="),
            ],
        ),
        Message(
            role="assistant",
            content=[
                ThinkingContent(thinking="cut off", signature=None),
                TextContent(text=""),
                ToolCallContent(id="toolu_a", name="look", arguments={}),
                ToolCallContent(id="toolu_b", name="look", arguments={}),
            ],
        ),
        Message(role="tool_result", tool_call_id="toolu_a", content=[TextContent(text="a cat")]),
        user("and?"),
    ]

    api = to_api_messages(messages)

    assert api[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
        ],
    }
    # Unsigned thinking and empty text are left out; the tool calls stay.
    assert api[1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_a", "name": "look", "input": {}},
            {"type": "tool_use", "id": "toolu_b", "name": "look", "input": {}},
        ],
    }
    # One user turn: the real result, a stand-in for the unanswered call, then the text.
    assert len(api) == 3
    assert api[2]["role"] == "user"
    content = list(api[2]["content"])
    assert [(b["type"], b.get("tool_use_id"), b.get("is_error")) for b in content] == [
        ("tool_result", "toolu_a", None),
        ("tool_result", "toolu_b", True),
        ("text", None, None),
    ]


async def test_a_cancelled_run_stops_as_cancelled_and_closes_the_stream(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    from botd.agent.loop import AgentRun, LoopConfig
    from botd.events import AgentEvent

    fake.push(stream(text("partial ", "answer ", "more"), delay=0.02, stall=True))
    events: list[AgentEvent] = []
    first_delta = asyncio.Event()

    def emit(event: AgentEvent) -> None:
        events.append(event)
        if event.type == "message_update" and event.assistant_event.type == "text_delta":
            first_delta.set()

    agent = AgentRun(make_provider(), [], LoopConfig(model=MODEL), emit)
    task = asyncio.create_task(agent.run([], [user("hi")]))
    await asyncio.wait_for(first_delta.wait(), HANG_GUARD)
    agent.cancel()
    result = await asyncio.wait_for(task, HANG_GUARD)

    assert result.stop_reason == "cancelled"
    served = await fake.wait_stream_ended(0, timeout=HANG_GUARD)
    assert served.closed_by_client and not served.completed
    assert events[-1].type == "agent_end"
    ends = [e for e in events if e.type == "message_end" and e.message.role == "assistant"]
    assert ends and ends[-1].message.stop_reason == "cancelled"
    assert ends[-1].message.error_message is None  # a cancel is not an error


# --- a request refused for an image -------------------------------------------------------


def image_of(width: int, height: int) -> ImageContent:
    return ImageContent(mime_type="image/png", data=base64.b64encode(png(width, height)).decode())


async def final(provider: AnthropicProvider, request: ModelRequest) -> AssistantResult:
    items = await asyncio.wait_for(_items(provider, request), HANG_GUARD)
    last = items[-1]
    assert isinstance(last, AssistantResult)
    return last


async def _items(provider: AnthropicProvider, request: ModelRequest) -> list[Any]:
    return [item async for item in provider.stream(request)]


async def test_an_image_too_large_is_named_as_the_refused_one(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    small, wide = image_of(10, 10), image_of(9000, 100)
    request = ask(
        Message(role="user", content=[TextContent(text="first"), small]),
        Message(role="assistant", content=[TextContent(text="Seen.")]),
        Message(role="user", content=[TextContent(text="and this"), wide]),
    )

    result = await final(make_provider(), request)

    assert result.refused_images == {wide.data}
    assert result.message.stop_reason == "error"
    assert result.message.error_message is not None
    assert "messages.2.content.1.image" in result.message.error_message
    assert "8000 pixels" in result.message.error_message
    assert len(fake.requests) == 1  # a 400 is not retried


async def test_an_image_in_a_tool_result_is_named_by_its_place_inside_it(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    kept, refused = image_of(20, 20), image_of(100, 9000)
    request = ask(
        Message(role="user", content=[TextContent(text="take a screenshot"), kept]),
        Message(role="assistant", content=[ToolCallContent(id="t1", name="shot", arguments={})]),
        Message(
            role="tool_result",
            tool_call_id="t1",
            tool_name="shot",
            content=[TextContent(text="here it is"), refused],
        ),
    )

    result = await final(make_provider(), request)

    assert fake.refusals == [
        "messages.2.content.0.tool_result.content.1.image.source.base64.data: At least one "
        "of the image dimensions exceed max allowed size: 8000 pixels"
    ]
    assert result.refused_images == {refused.data}


async def test_an_image_refusal_naming_no_place_blames_every_image(
    fake: FakeAnthropicAPI, make_provider: ProviderFactory
) -> None:
    one, two = image_of(10, 10), image_of(12, 12)
    fake.push(http_error(400, "invalid_request_error", "Could not process image"))
    request = ask(Message(role="user", content=[one, TextContent(text="both?"), two]))

    result = await final(make_provider(), request)

    assert result.refused_images == {one.data, two.data}
    assert result.message.error_message is not None
    assert "Could not process image" in result.message.error_message


@pytest.mark.parametrize(
    ("status", "error_type", "words", "with_image"),
    [
        (400, "invalid_request_error", "messages: text content blocks must be non-empty", True),
        (400, "invalid_request_error", "Could not process image", False),  # no image sent
        (413, "request_too_large", "Request exceeds the maximum allowed number of bytes", True),
        (529, "overloaded_error", "image processing is overloaded", True),
    ],
)
async def test_other_failures_blame_no_image(
    fake: FakeAnthropicAPI,
    make_provider: ProviderFactory,
    status: int,
    error_type: str,
    words: str,
    with_image: bool,
) -> None:
    fake.push(http_error(status, error_type, words))
    content: list[ContentBlock] = [TextContent(text="hi")]
    if with_image:
        content.append(image_of(10, 10))

    request = ask(Message(role="user", content=content))
    result = await final(make_provider(max_retries=0), request)

    assert result.message.stop_reason == "error"
    assert result.refused_images == frozenset()
