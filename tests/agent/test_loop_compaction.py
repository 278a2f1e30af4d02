"""A request the model refuses for its length: the loop compacts the history and asks again.

Through the real providers over their loopback fakes, which refuse a request longer than
their context window in the APIs' own words, with botd's real compaction (a summary by the
model) and the real subscriber reading the events; and, for the ways it can go wrong, through
the scripted provider behind a refusal of the same words.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from botd.agent.compaction import SUMMARY_HEADER, compact_transcript, summarizer_for
from botd.agent.loop import AgentRun, Compact, LoopConfig, RunResult, is_context_overflow
from botd.agent.providers.anthropic import AnthropicProvider
from botd.agent.providers.openai import OpenAIProvider
from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.agent.types import AssistantResult, ModelRequest, Provider, ProviderItem
from botd.events import (
    AgentEvent,
    AutoCompactionEnd,
    Message,
    MessageEnd,
    TextContent,
)
from botd.subscriber import StreamSubscriber, SubscriberConfig
from tests.agent.loop_helpers import EchoTool, Events, assert_well_formed, text_of, user
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.openai_api import ChatStream, FakeOpenAI
from tests.support.waiting import HANG_GUARD

API_KEY = "sk-ant-test-key"
TOO_LONG = "Anthropic API error (HTTP 400, invalid_request_error): prompt is too long: 9 > 8"


def long_history(turns: int = 4, size: int = 6000) -> list[Message]:
    """Earlier turns far longer than the fakes' windows below (``size`` characters each)."""
    history: list[Message] = []
    for n in range(turns):
        history.append(user(f"question {n} " + "q" * size))
        history.append(
            Message(role="assistant", content=[TextContent(text=f"answer {n} " + "a" * size)])
        )
    return history


def compactor(provider: Provider, model: str, calls: list[int] | None = None) -> Compact:
    """botd's compaction, summarized by ``provider``: the recent 3,000 tokens kept."""

    async def compact(history: list[Message], added: list[Message]) -> list[Message] | None:
        if calls is not None:
            calls.append(len(added))
        result = await compact_transcript(
            history,
            budget_tokens=0,
            keep_recent_tokens=3000,
            summarize=summarizer_for(provider, model),
        )
        return None if result is None else result.messages

    return compact


def observed(events: Events, subscriber: StreamSubscriber) -> Any:
    def on_event(event: AgentEvent) -> None:
        events.append(event)
        subscriber.handle(event)

    return on_event


def texts_sent(request: dict[str, Any]) -> str:
    return "\n".join(
        block["text"]
        for message in request["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "text"
    )


@pytest.fixture
async def anthropic() -> AsyncIterator[tuple[FakeAnthropicAPI, AnthropicProvider]]:
    async with FakeAnthropicAPI(api_key=API_KEY) as fake:
        provider = AnthropicProvider(api_key=API_KEY, base_url=fake.base_url, max_retry_wait=0)
        try:
            yield fake, provider
        finally:
            await provider.aclose()


async def test_prompt_is_too_long_compacts_the_history_and_asks_once_more(
    anthropic: tuple[FakeAnthropicAPI, AnthropicProvider],
) -> None:
    fake, provider = anthropic
    fake.context_tokens = 8000  # the history alone is about 12,000
    fake.push(stream(text("They compared apples.")), stream(text("Pears ", "are sweeter.")))
    blocks: list[str] = []
    subscriber = StreamSubscriber(
        SubscriberConfig(), on_block_reply=lambda b: blocks.append(b.text)
    )
    events = Events()
    run = AgentRun(
        provider,
        [],
        LoopConfig(model="claude-test"),
        observed(events, subscriber),
        compact=compactor(provider, "claude-test"),
    )

    result = await asyncio.wait_for(run.run(long_history(), [user("and pears?")]), HANG_GUARD)

    assert result.stop_reason == "end_turn"
    assert fake.too_long == [0]  # refused once, with the API's words
    refused, summary, retried = (r.body for r in fake.requests)
    assert "question 0" in texts_sent(summary) and "Summarize" in texts_sent(summary)
    # Asked again with the summary and the recent turns; the prompt as it was.
    sent = texts_sent(retried)
    assert sent.startswith(f"{SUMMARY_HEADER}\nThey compared apples.")
    assert "question 0" not in sent and "answer 3" in sent and sent.endswith("and pears?")
    assert len(texts_sent(retried)) < len(texts_sent(refused)) // 3
    # The refused attempt is reported and the compaction framed by its events ...
    types = events.types()
    start = types.index("auto_compaction_start")
    assert types[start - 1] == "message_end" and types[start + 1] == "auto_compaction_end"
    assert events.of(AutoCompactionEnd) == [AutoCompactionEnd(will_retry=True)]
    ends = [e.message for e in events.of(MessageEnd) if e.message.role == "assistant"]
    assert [m.stop_reason for m in ends] == ["error", "end_turn"]
    assert "prompt is too long" in (ends[0].error_message or "")
    assert_well_formed(events)
    # ... but not kept: the run adds the prompt and its answer.
    assert [text_of(m) for m in result.messages] == ["and pears?", "Pears are sweeter."]
    # The subscriber posted the answer once, and nothing of the refusal is left to post.
    assert blocks == ["Pears are sweeter."]
    assert subscriber.final_replies(block_streaming=True) == []
    assert [r.text for r in subscriber.final_replies(block_streaming=False)] == [
        "Pears are sweeter."
    ]
    assert subscriber.compaction_settled


async def test_an_overflow_after_a_tool_call_keeps_the_runs_own_steps(
    anthropic: tuple[FakeAnthropicAPI, AnthropicProvider],
) -> None:
    fake, provider = anthropic
    fake.push(
        stream(
            text("Let me echo."),
            tool_use("t1", "echo", '{"text": "', 'hi"}'),
            stop_reason="tool_use",
        ),
        stream(text("Summary of the fruit talk.")),
        stream(text("Echoed: hi.")),
    )
    blocks: list[str] = []
    subscriber = StreamSubscriber(
        SubscriberConfig(), on_block_reply=lambda b: blocks.append(b.text)
    )
    events = Events()
    compactions: list[int] = []

    def on_event(event: AgentEvent) -> None:
        events.append(event)
        subscriber.handle(event)
        if event.type == "tool_execution_end":
            fake.context_tokens = 8000  # the tool's turn ends over the window

    run = AgentRun(
        provider,
        [EchoTool()],
        LoopConfig(model="claude-test"),
        on_event,
        compact=compactor(provider, "claude-test", compactions),
    )

    result = await asyncio.wait_for(run.run(long_history(), [user("echo hi")]), HANG_GUARD)

    assert result.stop_reason == "end_turn"
    assert compactions == [3]  # the prompt, the call and its result were given along
    assert fake.too_long == [1]
    retried = fake.requests[-1].body["messages"]
    assert [m["role"] for m in retried[-3:]] == ["user", "assistant", "user"]
    assert retried[-1]["content"][0]["type"] == "tool_result"
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]
    # The narration before the tool went out once; the retry does not post it again.
    assert blocks == ["Let me echo.", "Echoed: hi."]
    assert_well_formed(events)


async def test_the_openai_compatible_provider_context_length_exceeded_compacts_too() -> None:
    async with FakeOpenAI() as fake:
        fake.context_tokens = 8000
        fake.enqueue(
            ChatStream().text("They compared apples.").finish("stop"),
            ChatStream().text("Pears.").finish("stop"),
        )
        provider = OpenAIProvider(base_url=fake.base_url, max_retry_wait=0)
        try:
            events = Events()
            run = AgentRun(
                provider,
                [],
                LoopConfig(model="fake-model"),
                events.append,
                compact=compactor(provider, "fake-model"),
            )
            result = await asyncio.wait_for(
                run.run(long_history(), [user("and pears?")]), HANG_GUARD
            )
        finally:
            await provider.aclose()

    assert result.stop_reason == "end_turn"
    assert fake.too_long == 1 and len(fake.requests) == 3
    assert text_of(result.messages[-1]) == "Pears."
    ends = [e.message for e in events.of(MessageEnd) if e.message.role == "assistant"]
    assert "maximum context length" in (ends[0].error_message or "")


# --- when it cannot help ----------------------------------------------------------------------


class TooLongProvider:
    """A provider that refuses, as Anthropic does, any request holding more than ``limit``
    characters of text, and passes the others to ``inner``."""

    def __init__(self, inner: Provider, limit: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.limit = limit
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        self.requests.append(request)
        if sum(len(text_of(m)) for m in request.messages) > self.limit:
            return self._refusal()
        stream: AsyncIterator[ProviderItem] = self.inner.stream(request)
        return stream

    async def _refusal(self) -> AsyncIterator[ProviderItem]:
        yield AssistantResult(
            Message(role="assistant", stop_reason="error", error_message=TOO_LONG)
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def short_history() -> list[Message]:
    return [user("earlier"), Message(role="assistant", content=[TextContent(text="Noted.")])]


async def run_with(
    provider: Provider, compact: Compact | None, history: list[Message]
) -> tuple[RunResult, Events]:
    events = Events()
    run = AgentRun(provider, [], LoopConfig(model="m"), events.append, compact=compact)
    result = await asyncio.wait_for(run.run(history, [user("and now?")]), HANG_GUARD)
    return result, events


async def test_without_a_compact_callback_the_refusal_ends_the_run() -> None:
    provider = TooLongProvider(ScriptedProvider([ScriptedTurn(text="never")]), limit=5)

    result, events = await run_with(provider, None, short_history())

    assert result.stop_reason == "error" and result.error_message == TOO_LONG
    assert "auto_compaction_start" not in events.types() and len(provider.requests) == 1


async def test_a_history_that_cannot_be_shortened_ends_the_run_with_the_refusal() -> None:
    provider = TooLongProvider(ScriptedProvider([ScriptedTurn(text="never")]), limit=5)
    asked: list[int] = []

    async def nothing_to_cut(history: list[Message], added: list[Message]) -> list[Message] | None:
        asked.append(len(history))
        return None

    result, events = await run_with(provider, nothing_to_cut, short_history())

    assert asked == [2] and len(provider.requests) == 1
    assert result.stop_reason == "error" and result.error_message == TOO_LONG
    assert events.of(AutoCompactionEnd) == [AutoCompactionEnd(will_retry=False)]
    # The refusal is the run's last message, reported once and kept.
    ends = [e for e in events.of(MessageEnd) if e.message.role == "assistant"]
    assert len(ends) == 1 and result.messages[-1] is ends[0].message
    assert_well_formed(events)


async def test_the_retry_refused_too_ends_the_run_without_a_second_compaction() -> None:
    provider = TooLongProvider(ScriptedProvider([ScriptedTurn(text="never")]), limit=5)
    asked: list[int] = []

    async def barely(history: list[Message], added: list[Message]) -> list[Message] | None:
        asked.append(len(history))
        return history[-1:]  # still too long for the model

    result, events = await run_with(provider, barely, short_history())

    assert asked == [2] and len(provider.requests) == 2
    assert result.stop_reason == "error" and result.error_message == TOO_LONG
    assert events.types().count("auto_compaction_start") == 1
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert_well_formed(events)


async def test_a_failing_compaction_ends_the_run_with_the_refusal() -> None:
    provider = TooLongProvider(ScriptedProvider([ScriptedTurn(text="never")]), limit=5)

    async def broken(history: list[Message], added: list[Message]) -> list[Message] | None:
        raise RuntimeError("the summarizer's disk is full")

    result, events = await run_with(provider, broken, short_history())

    assert result.stop_reason == "error" and result.error_message == TOO_LONG
    assert events.of(AutoCompactionEnd) == [AutoCompactionEnd(will_retry=False)]
    assert_well_formed(events)


async def test_a_run_stopped_while_compacting_ends_cancelled_and_closes_the_compaction() -> None:
    provider = TooLongProvider(ScriptedProvider([ScriptedTurn(text="never")]), limit=5)
    started = asyncio.Event()

    async def slow(history: list[Message], added: list[Message]) -> list[Message] | None:
        started.set()
        await asyncio.Event().wait()
        return None

    events = Events()
    run = AgentRun(provider, [], LoopConfig(model="m"), events.append, compact=slow)
    task = asyncio.create_task(run.run(short_history(), [user("and now?")]))
    await asyncio.wait_for(started.wait(), HANG_GUARD)
    run.cancel()
    result = await asyncio.wait_for(task, HANG_GUARD)

    assert result.stop_reason == "cancelled"
    assert events.of(AutoCompactionEnd) == [AutoCompactionEnd(will_retry=False)]
    assert_well_formed(events)


async def test_other_errors_are_not_compacted() -> None:
    script = [ScriptedTurn(text="x", stop_reason="error")]
    asked: list[int] = []

    async def compact(history: list[Message], added: list[Message]) -> list[Message] | None:
        asked.append(1)
        return history

    result, events = await run_with(ScriptedProvider(script), compact, short_history())

    assert result.stop_reason == "error" and asked == []
    assert "auto_compaction_start" not in events.types()


@pytest.mark.parametrize(
    "error",
    [
        "Anthropic API error (HTTP 400, invalid_request_error): prompt is too long: "
        "215000 tokens > 200000 maximum",
        "Anthropic API error (HTTP 400, invalid_request_error): input length and `max_tokens` "
        "exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens`",
        "HTTP 400: This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 130542 tokens. Please reduce the length of the messages.",
        'HTTP 400: {"code": "context_length_exceeded", "type": "invalid_request_error"}',
        "HTTP 400: the request exceeds the available context size, try increasing it",
        "every model failed: a/x: Anthropic API error (HTTP 400, invalid_request_error): "
        "prompt is too long: 9 tokens > 8 maximum; b/y: HTTP 503: busy",
    ],
)
def test_context_overflow_is_recognised_in_the_providers_words(error: str) -> None:
    assert is_context_overflow(error)


@pytest.mark.parametrize(
    "error",
    [
        None,
        "",
        "Anthropic API error (HTTP 529, overloaded_error): Overloaded",
        "HTTP 429: Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
        "Limit 30000, Requested 45000. Visit the rate limit page.",
        "HTTP 400: Invalid image.",
    ],
)
def test_other_failures_are_not_an_overflow(error: str | None) -> None:
    assert not is_context_overflow(error)
