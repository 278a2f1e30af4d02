"""FailoverProvider: the real Anthropic SDK and the OpenAI-compatible client over the loopback
fakes, one model taking over a call the other gave up on."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from botd.agent.providers.anthropic import AnthropicProvider
from botd.agent.providers.failover import FailoverProvider, ModelChoice, without_foreign_thinking
from botd.agent.providers.openai import OpenAIProvider
from botd.agent.providers.scripted import ScriptedProvider
from botd.agent.types import AssistantResult, ModelRequest, ProviderItem
from botd.events import ImageContent, Message, TextContent, ThinkingContent, ToolCallContent
from tests.fakes.anthropic_api import FakeAnthropicAPI, http_error, stream, text, thinking
from tests.fakes.image_headers import png
from tests.fakes.openai_api import ChatStream, ErrorReply, FakeOpenAI

API_KEY = "sk-ant-failover-test"
PRIMARY, FALLBACK = "claude-test", "gpt-fake"


@pytest.fixture
async def anthropic_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def openai_api() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def failover(
    anthropic_api: FakeAnthropicAPI, openai_api: FakeOpenAI
) -> AsyncIterator[FailoverProvider]:
    # No waits between retries: the primary gives up at once after its three retries.
    primary = AnthropicProvider(api_key=API_KEY, base_url=anthropic_api.base_url, max_retry_wait=0)
    fallback = OpenAIProvider(base_url=openai_api.base_url, max_retry_wait=0)
    provider = FailoverProvider([ModelChoice(PRIMARY, primary), ModelChoice(FALLBACK, fallback)])
    yield provider
    await provider.aclose()


def _request(*messages: Message, model: str = PRIMARY) -> ModelRequest:
    return ModelRequest(
        model=model, messages=list(messages) or [Message(role="user", content="hi")]
    )


async def _collect(provider: FailoverProvider, request: ModelRequest) -> list[ProviderItem]:
    return [item async for item in provider.stream(request)]


def _text(message: Message) -> str:
    return "".join(b.text for b in message.blocks() if isinstance(b, TextContent))


def _overloaded(times: int = 4) -> list[Any]:
    return [http_error(529, "overloaded_error", "Overloaded")] * times


async def test_an_overloaded_primary_hands_the_call_to_the_fallback(
    failover: FailoverProvider,
    anthropic_api: FakeAnthropicAPI,
    openai_api: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    anthropic_api.push(*_overloaded())
    openai_api.enqueue(ChatStream(FALLBACK).text("Hello ", "there").finish("stop").usage(12, 3))
    with caplog.at_level(logging.WARNING):
        items = await _collect(failover, _request())
    *events, result = items
    assert isinstance(result, AssistantResult)
    assert _text(result.message) == "Hello there"
    assert result.message.stop_reason == "end_turn"
    assert (result.message.model, result.message.provider) == (FALLBACK, "openai")
    assert result.message.usage == {"input_tokens": 12, "output_tokens": 3}
    # Only the fallback's answer streamed: the primary's failed attempts showed nothing.
    assert all(not isinstance(e, AssistantResult) for e in events)
    assert len(anthropic_api.requests) == 4  # the first attempt and three retries
    assert openai_api.requests[0].body["model"] == FALLBACK
    switches = [r.getMessage() for r in caplog.records if "switching to" in r.getMessage()]
    assert len(switches) == 1
    assert f"anthropic/{PRIMARY} failed" in switches[0] and f"openai/{FALLBACK}" in switches[0]
    assert "529" in switches[0] or "verloaded" in switches[0]


async def test_a_refused_key_fails_over_too(
    failover: FailoverProvider, anthropic_api: FakeAnthropicAPI, openai_api: FakeOpenAI
) -> None:
    anthropic_api.push(http_error(401, "authentication_error", "invalid x-api-key"))
    openai_api.enqueue(ChatStream(FALLBACK).text("covered").finish("stop"))
    *_events, result = await _collect(failover, _request())
    assert isinstance(result, AssistantResult)
    assert _text(result.message) == "covered"
    assert len(anthropic_api.requests) == 1  # not retried, handed over


async def test_a_call_that_failed_after_part_of_its_answer_is_not_repeated(
    failover: FailoverProvider, anthropic_api: FakeAnthropicAPI, openai_api: FakeOpenAI
) -> None:
    anthropic_api.push(stream(text("Half an ", "answer"), error=("overloaded_error", "Overloaded")))
    *events, result = await _collect(failover, _request())
    assert isinstance(result, AssistantResult)
    assert result.message.stop_reason == "error"
    assert _text(result.message) == "Half an answer"
    assert events  # the half streamed, once
    assert openai_api.requests == []  # no second answer from the start


async def test_every_model_failing_ends_with_one_line_naming_each(
    failover: FailoverProvider, anthropic_api: FakeAnthropicAPI, openai_api: FakeOpenAI
) -> None:
    anthropic_api.push(*_overloaded())
    openai_api.enqueue(*[ErrorReply(503, {"error": {"message": "busy"}})] * 4)
    items = await _collect(failover, _request())
    assert len(items) == 1
    [result] = items
    assert isinstance(result, AssistantResult)
    error = result.message.error_message or ""
    assert result.message.stop_reason == "error"
    assert "\n" not in error
    assert error.startswith("No model could answer (")
    assert f"anthropic/{PRIMARY}:" in error and f"openai/{FALLBACK}: HTTP 503" in error


async def test_the_conversations_choice_goes_first(
    failover: FailoverProvider, anthropic_api: FakeAnthropicAPI, openai_api: FakeOpenAI
) -> None:
    openai_api.enqueue(ChatStream(FALLBACK).text("chosen").finish("stop"))
    *_events, result = await _collect(failover, _request(model=FALLBACK))
    assert isinstance(result, AssistantResult)
    assert _text(result.message) == "chosen"
    assert anthropic_api.requests == []


async def test_thinking_goes_only_to_the_model_that_wrote_it(
    failover: FailoverProvider, anthropic_api: FakeAnthropicAPI, openai_api: FakeOpenAI
) -> None:
    signed = Message(
        role="assistant",
        content=[
            ThinkingContent(thinking="primary musing", signature="sig-primary"),
            TextContent(text="first answer"),
        ],
        model=PRIMARY,
        provider="anthropic",
    )
    unsigned = Message(
        role="assistant",
        content=[ThinkingContent(thinking="fallback musing"), TextContent(text="second")],
        model=FALLBACK,
        provider="openai",
    )
    history = [
        Message(role="user", content="one"),
        signed,
        Message(role="user", content="two"),
        unsigned,
        Message(role="user", content="three"),
    ]
    # The fallback answers now: none of the primary's thinking reaches it.
    anthropic_api.push(*_overloaded())
    openai_api.enqueue(ChatStream(FALLBACK).text("ok").finish("stop"))
    await _collect(failover, _request(*history))
    sent = json.dumps(openai_api.requests[0].body)
    assert "primary musing" not in sent and "sig-primary" not in sent
    assert "first answer" in sent
    # Back on the primary: its own signed thinking goes, the fallback's does not.
    anthropic_api.push(stream(thinking("hm", signature="sig-2"), text("back")))
    *_events, result = await _collect(failover, _request(*history))
    assert isinstance(result, AssistantResult) and _text(result.message) == "back"
    sent = json.dumps(anthropic_api.requests[-1].body)
    assert "primary musing" in sent and "sig-primary" in sent
    assert "fallback musing" not in sent


def test_without_foreign_thinking_keeps_other_messages_as_they_are() -> None:
    user = Message(role="user", content="hi")
    mine = Message(
        role="assistant",
        content=[ThinkingContent(thinking="a", signature="s"), TextContent(text="x")],
        model="m1",
        provider="anthropic",
    )
    other_model = mine.model_copy(update={"model": "m2"})
    kept = without_foreign_thinking([user, mine, other_model], "anthropic", "m1")
    assert kept[0] is user and kept[1] is mine
    assert kept[2].content == [TextContent(text="x")]
    assert other_model.content != kept[2].content  # the original is not changed


def test_a_tool_loop_stays_with_the_model_that_began_it() -> None:
    one, two = ScriptedProvider(name="anthropic"), ScriptedProvider(name="openai")
    provider = FailoverProvider([ModelChoice(PRIMARY, one), ModelChoice(FALLBACK, two)])
    call = ToolCallContent(id="t1", name="schedule", arguments={})
    asked = Message(role="assistant", content=[call], model=FALLBACK, provider="openai")
    result = Message(role="tool_result", content="done", tool_call_id="t1", tool_name="schedule")
    user = Message(role="user", content="go")
    mid_loop = provider.order(_request(user, asked, result))
    assert [c.name for c in mid_loop] == [FALLBACK, PRIMARY]
    next_turn = provider.order(_request(user, asked, result, Message(role="user", content="more")))
    assert [c.name for c in next_turn] == [PRIMARY, FALLBACK]


class _Broken:
    """A provider that raises before it streams anything (a bug, not an API failure)."""

    name = "broken"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        raise RuntimeError("boom")
        yield  # pragma: no cover - makes this a generator

    async def aclose(self) -> None:
        return None


async def test_a_provider_that_raises_before_streaming_fails_over() -> None:
    provider = FailoverProvider(
        [ModelChoice("b1", _Broken()), ModelChoice("s1", ScriptedProvider(name="scripted"))]
    )
    *_events, result = await _collect(provider, _request(model="b1"))
    assert isinstance(result, AssistantResult)
    assert result.message.stop_reason == "end_turn"
    assert (result.message.model, result.message.provider) == ("s1", "scripted")
    provider = FailoverProvider([ModelChoice("b1", _Broken()), ModelChoice("b2", _Broken())])
    [result] = await _collect(provider, _request(model="b1"))
    assert isinstance(result, AssistantResult)
    assert (
        result.message.error_message == "No model could answer (broken/b1: boom; broken/b2: boom)"
    )


async def test_a_refused_image_is_not_handed_to_the_fallback(
    failover: FailoverProvider, anthropic_api: FakeAnthropicAPI, openai_api: FakeOpenAI
) -> None:
    wide = ImageContent(mime_type="image/png", data=base64.b64encode(png(9000, 10)).decode())
    openai_api.enqueue(ChatStream(FALLBACK).text("must not be asked").finish("stop"))
    request = _request(Message(role="user", content=[TextContent(text="look"), wide]))

    *_events, result = await _collect(failover, request)

    assert isinstance(result, AssistantResult)
    assert result.refused_images == {wide.data}
    assert result.message.stop_reason == "error"
    assert (result.message.model, result.message.provider) == (PRIMARY, "anthropic")
    assert len(anthropic_api.requests) == 1 and openai_api.requests == []
