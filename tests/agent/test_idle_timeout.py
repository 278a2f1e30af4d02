"""``model.idle_timeout``: a silent model stream is abandoned, retried only before output.

Both providers against their loopback fakes, with real clients (the anthropic SDK, httpx) and
a small idle timeout; the fakes send headers and some frames, then nothing at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from botd.agent.providers.anthropic import AnthropicProvider
from botd.agent.providers.openai import OpenAIProvider
from botd.agent.providers.waits import NO_ANSWER_IN_TIME
from botd.agent.types import AssistantResult, ModelRequest, Provider
from botd.events import AssistantStreamEvent, Message, TextContent
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.openai_api import ChatStream, FakeOpenAI
from tests.support.waiting import HANG_GUARD, until

API_KEY = "sk-ant-test-idle"
IDLE = 0.3
"""The idle timeout under test: small, so a stall is noticed quickly."""


@pytest.fixture
async def anthropic_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def openai_api() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


def ask() -> ModelRequest:
    return ModelRequest(model="m", messages=[Message(role="user", content="hi")])


async def run(provider: Provider) -> tuple[list[AssistantStreamEvent], Message]:
    try:
        async with asyncio.timeout(HANG_GUARD):
            items = [item async for item in provider.stream(ask())]
    finally:
        await provider.aclose()
    *events, last = items
    assert isinstance(last, AssistantResult)
    return [e for e in events if isinstance(e, AssistantStreamEvent)], last.message


def anthropic(fake: FakeAnthropicAPI, **options: Any) -> AnthropicProvider:
    options.setdefault("max_retry_wait", 0.01)
    return AnthropicProvider(api_key=API_KEY, base_url=fake.base_url, idle_timeout=IDLE, **options)


def openai(fake: FakeOpenAI, **options: Any) -> OpenAIProvider:
    options.setdefault("max_retry_wait", 0.01)
    return OpenAIProvider(base_url=fake.base_url, idle_timeout=IDLE, **options)


def streamed_text(events: list[AssistantStreamEvent]) -> str:
    return "".join(e.delta or "" for e in events if e.type == "text_delta")


def message_text(message: Message) -> str:
    return "".join(b.text for b in message.blocks() if isinstance(b, TextContent))


# --- anthropic ----------------------------------------------------------------------------


@pytest.mark.parametrize("frames_before_silence", [0, 1, 2])
async def test_anthropic_stall_before_output_is_retried_and_answered_once(
    anthropic_api: FakeAnthropicAPI, frames_before_silence: int
) -> None:
    # 0: headers only; 1: message_start; 2: message_start and a ping. Nothing for the user yet.
    anthropic_api.push(
        stream(text("never ", "shown"), hang_after=frames_before_silence),
        stream(text("Hello ", "world")),
    )

    events, message = await run(anthropic(anthropic_api))

    assert message.stop_reason == "end_turn"
    assert message.error_message is None
    assert streamed_text(events) == "Hello world"
    assert message_text(message) == "Hello world"
    assert len(anthropic_api.requests) == 2
    assert (await anthropic_api.wait_stream_ended(0, HANG_GUARD)).closed_by_client


async def test_anthropic_stall_mid_answer_ends_with_one_error_and_no_replay(
    anthropic_api: FakeAnthropicAPI,
) -> None:
    # message_start, ping, content_block_start, "Hello ": then silence.
    anthropic_api.push(stream(text("Hello ", "world"), hang_after=4), stream(text("again")))

    events, message = await run(anthropic(anthropic_api))

    assert message.stop_reason == "error"
    assert message.error_message == NO_ANSWER_IN_TIME
    assert streamed_text(events) == "Hello "
    assert message_text(message) == "Hello "
    assert len(anthropic_api.requests) == 1  # not retried: the text would show twice
    assert anthropic_api.pending == 1


async def test_anthropic_every_attempt_stalling_gives_up_with_one_line(
    anthropic_api: FakeAnthropicAPI, caplog: pytest.LogCaptureFixture
) -> None:
    anthropic_api.push(*[stream(text("x"), hang_after=1) for _ in range(3)])

    events, message = await run(anthropic(anthropic_api, max_retries=2))

    assert events == []
    assert message.stop_reason == "error"
    assert message.error_message == NO_ANSWER_IN_TIME
    # Each attempt sent its whole request before it waited; on a busy machine the client can
    # give up on the last one before the fake has read it, so the fake may record it late.
    await until(lambda: len(anthropic_api.requests) >= 3, "the third attempt's request")
    assert len(anthropic_api.requests) == 3
    # The operator's log says what happened; the user's line does not carry it.
    assert "gave up after 2 retries" in caplog.text
    assert "idle timeout" in caplog.text


async def test_anthropic_a_slow_but_steady_stream_is_not_cut(
    anthropic_api: FakeAnthropicAPI,
) -> None:
    # Each frame comes well within the idle timeout, the whole answer takes longer than it.
    anthropic_api.push(stream(text("a", "b", "c", "d", "e", "f"), delay=IDLE / 5))

    events, message = await run(anthropic(anthropic_api))

    assert message.stop_reason == "end_turn"
    assert streamed_text(events) == "abcdef"
    assert len(anthropic_api.requests) == 1


def test_anthropic_idle_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        AnthropicProvider(api_key=API_KEY, idle_timeout=0)


# --- openai-compatible --------------------------------------------------------------------


@pytest.mark.parametrize("with_role_chunk", [False, True])
async def test_openai_stall_before_output_is_retried_and_answered_once(
    openai_api: FakeOpenAI, with_role_chunk: bool
) -> None:
    silent = ChatStream().role().then_hang() if with_role_chunk else ChatStream().then_hang()
    openai_api.enqueue(silent, ChatStream().role().text("Hello ", "world").finish("stop"))

    events, message = await run(openai(openai_api))

    assert message.stop_reason == "end_turn"
    assert streamed_text(events) == "Hello world"
    assert message_text(message) == "Hello world"
    assert len(openai_api.requests) == 2


async def test_openai_stall_mid_answer_ends_with_one_error_and_no_replay(
    openai_api: FakeOpenAI,
) -> None:
    openai_api.enqueue(
        ChatStream().role().text("Hello ").then_hang(),
        ChatStream().role().text("again").finish("stop"),
    )

    events, message = await run(openai(openai_api))

    assert message.stop_reason == "error"
    assert message.error_message == NO_ANSWER_IN_TIME
    assert streamed_text(events) == "Hello "
    assert message_text(message) == "Hello "
    assert len(openai_api.requests) == 1
    assert openai_api.pending == 1


async def test_openai_every_attempt_stalling_gives_up_with_one_line(
    openai_api: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    openai_api.enqueue(*[ChatStream().then_hang() for _ in range(3)])

    events, message = await run(openai(openai_api, max_retries=2))

    assert events == []
    assert message.stop_reason == "error"
    assert message.error_message == NO_ANSWER_IN_TIME
    await until(lambda: len(openai_api.requests) >= 3, "the third attempt's request")
    assert len(openai_api.requests) == 3
    assert "gave up after 2 retries" in caplog.text
    assert "idle timeout" in caplog.text


async def test_openai_a_slow_but_steady_stream_is_not_cut(openai_api: FakeOpenAI) -> None:
    openai_api.enqueue(
        ChatStream().role().text("a", "b", "c", "d", "e").finish("stop").slow(IDLE / 5)
    )

    events, message = await run(openai(openai_api))

    assert message.stop_reason == "end_turn"
    assert streamed_text(events) == "abcde"


def test_openai_idle_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        OpenAIProvider(base_url="http://127.0.0.1:9/v1", idle_timeout=-1)


# --- configuration ------------------------------------------------------------------------


async def test_model_idle_timeout_reaches_the_provider() -> None:
    from botd.config import ConfigError, parse_config
    from botd.wiring import build_provider, provider_settings

    text = "model:\n  provider: openai\n  name: m\n  idle_timeout: 5\n"
    config = parse_config(text, {}, "botd.yaml")
    assert provider_settings(config)["idle_timeout"] == 5
    provider = build_provider(config)  # the provider takes the setting
    assert isinstance(provider, OpenAIProvider)
    await provider.aclose()
    default = parse_config("model:\n  provider: openai\n  name: m\n", {}, "botd.yaml")
    assert provider_settings(default)["idle_timeout"] == 60
    with pytest.raises(ConfigError, match="idle_timeout"):
        parse_config("model:\n  idle_timeout: 0\n", {}, "botd.yaml")
