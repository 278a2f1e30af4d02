"""Transcript compaction: when it happens, where it cuts, and how it summarizes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botd.agent.compaction import (
    SUMMARY_HEADER,
    SummaryError,
    compact_transcript,
    estimate_tokens,
    summarizer_for,
)
from botd.agent.types import AssistantResult, ModelRequest, ProviderItem
from botd.events import (
    AssistantStreamEvent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)

# --- helpers ----------------------------------------------------------------------------------


def user(text: str) -> Message:
    return Message(role="user", content=[TextContent(text=text)])


def assistant(text: str, *calls: str) -> Message:
    calls_blocks = [ToolCallContent(id=call, name="tool", arguments={"id": call}) for call in calls]
    return Message(role="assistant", content=[TextContent(text=text), *calls_blocks])


def result(call: str, text: str = "ok") -> Message:
    return Message(
        role="tool_result", tool_call_id=call, tool_name="tool", content=[TextContent(text=text)]
    )


def conversation(turns: int, size: int = 400) -> list[Message]:
    messages: list[Message] = []
    for n in range(turns):
        messages += [
            user(f"q{n} " + "x" * size),
            assistant("looking", f"t{n}"),
            result(f"t{n}", "y" * size),
            assistant(f"a{n} " + "z" * size),
        ]
    return messages


def pairs_intact(messages: list[Message]) -> bool:
    """Every tool result follows its call, and every tool call has its result."""
    calls: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if message.role == "tool_result":
            if message.tool_call_id not in calls:
                return False
            answered.add(message.tool_call_id or "")
        for block in message.blocks():
            if isinstance(block, ToolCallContent):
                calls.add(block.id)
    return calls == answered


def is_safe_cut(messages: list[Message], cut: int) -> bool:
    """The oracle: both sides of the cut are closed under tool call/result pairing."""
    return 0 < cut < len(messages) and pairs_intact(messages[:cut]) and pairs_intact(messages[cut:])


class Recording:
    """A summarize callable that remembers what it was given."""

    def __init__(self, answer: str = "the gist") -> None:
        self.answer = answer
        self.calls: list[list[Message]] = []

    async def __call__(self, messages: list[Message]) -> str:
        self.calls.append(list(messages))
        return self.answer


# --- when and where ---------------------------------------------------------------------------


def test_token_estimate_is_chars_over_four_plus_overheads() -> None:
    assert estimate_tokens([]) == 0
    text_only = estimate_tokens([user("x" * 400)])
    assert 100 <= text_only <= 110
    with_image = estimate_tokens(
        [Message(role="user", content=[ImageContent(mime_type="image/png", data="A" * 10)])]
    )
    # An image costs a fixed amount, not its base64 length.
    assert with_image > 1_000
    assert estimate_tokens([user("x" * 400)] * 3) == 3 * text_only


async def test_under_budget_is_left_alone() -> None:
    messages = conversation(2)
    summarize = Recording()
    got = await compact_transcript(
        messages,
        budget_tokens=estimate_tokens(messages),
        keep_recent_tokens=100,
        summarize=summarize,
    )
    assert got is None
    assert summarize.calls == []


async def test_over_budget_summarizes_older_and_keeps_recent() -> None:
    messages = conversation(10)
    summarize = Recording("they discussed ten questions")
    got = await compact_transcript(
        messages, budget_tokens=2_000, keep_recent_tokens=700, summarize=summarize
    )
    assert got is not None
    assert got.summarized
    cut = got.compacted_count
    assert summarize.calls == [messages[:cut]]
    assert got.messages[0] == user(f"{SUMMARY_HEADER}\nthey discussed ten questions")
    assert got.summary == f"{SUMMARY_HEADER}\nthey discussed ten questions"
    assert got.kept == messages[cut:]
    assert 0 < estimate_tokens(got.kept) <= 700
    assert got.tokens_before == estimate_tokens(messages)
    assert got.tokens_after == estimate_tokens(got.messages) < got.tokens_before
    assert got.kept[0].role != "tool_result"
    assert pairs_intact(got.kept)


async def test_a_tool_exchange_is_never_split() -> None:
    # One long agent run: the only safe cuts are before an assistant message that starts a
    # new model turn; never between the call and any of its results.
    messages = [
        user("do the thing"),
        assistant("step 1", "a", "b"),
        result("a", "r" * 2_000),
        result("b", "r" * 2_000),
        assistant("step 2", "c"),
        result("c", "r" * 2_000),
        assistant("done"),
    ]
    got = await compact_transcript(
        messages, budget_tokens=1_000, keep_recent_tokens=600, summarize=Recording()
    )
    assert got is not None
    # The last exchange alone is over keep_recent_tokens, so the shortest safe tail is kept.
    assert got.kept == messages[4:]
    assert pairs_intact(got.kept)


async def test_latest_turn_is_kept_even_when_larger_than_keep_recent() -> None:
    messages = [user("old"), assistant("old answer"), user("huge " + "h" * 40_000)]
    got = await compact_transcript(
        messages, budget_tokens=1_000, keep_recent_tokens=100, summarize=Recording()
    )
    assert got is not None
    assert got.kept == [messages[-1]]


async def test_nothing_to_cut_gives_none() -> None:
    single = [user("h" * 40_000)]
    assert (
        await compact_transcript(
            single, budget_tokens=100, keep_recent_tokens=10, summarize=Recording()
        )
        is None
    )
    one_exchange = [assistant("x", "a"), result("a", "r" * 40_000)]
    assert (
        await compact_transcript(
            one_exchange, budget_tokens=100, keep_recent_tokens=10, summarize=Recording()
        )
        is None
    )


async def test_unanswered_tool_call_does_not_block_compaction() -> None:
    # An aborted run can leave a call without a result; it must not wedge compaction.
    messages = [*conversation(4), assistant("about to", "dangling"), user("never mind")]
    got = await compact_transcript(
        messages, budget_tokens=500, keep_recent_tokens=200, summarize=Recording()
    )
    assert got is not None
    assert got.kept == messages[got.compacted_count :]
    assert got.kept[0].role != "tool_result"


# --- the truncation fallback ------------------------------------------------------------------


async def _fails(messages: list[Message]) -> str:
    raise RuntimeError("provider down")


async def _blank(messages: list[Message]) -> str:
    return "  \n"


@pytest.mark.parametrize("summarize", [None, _fails, _blank], ids=["none", "raises", "blank"])
async def test_summarizer_failure_falls_back_to_truncation(summarize: object) -> None:
    messages = conversation(10)
    got = await compact_transcript(
        messages,
        budget_tokens=2_000,
        keep_recent_tokens=700,
        summarize=summarize,  # type: ignore[arg-type]
    )
    assert got is not None
    assert not got.summarized
    cut = got.compacted_count
    assert got.kept == messages[cut:]
    note = got.messages[0]
    assert note.role == "user"
    text = note.blocks()[0]
    assert isinstance(text, TextContent)
    assert text.text.startswith(f"{SUMMARY_HEADER}\n{cut} earlier messages were dropped")
    assert got.summary == text.text


async def test_cancellation_is_not_swallowed() -> None:
    async def cancelled(messages: list[Message]) -> str:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await compact_transcript(
            conversation(10), budget_tokens=2_000, keep_recent_tokens=700, summarize=cancelled
        )


# --- property: tool pairs are never split ---------------------------------------------------


@st.composite
def transcripts(draw: st.DrawFn) -> list[Message]:
    """Random well-formed transcripts: user, assistant and tool-call exchanges, any order."""
    messages: list[Message] = []
    call_numbers = iter(range(10_000))
    for _ in range(draw(st.integers(0, 25))):
        size = draw(st.integers(0, 600))
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "user":
            messages.append(user("u" * size))
        elif kind == "assistant":
            messages.append(assistant("a" * size))
        else:
            calls = [f"call{next(call_numbers)}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(assistant("a" * size, *calls))
            order = draw(st.permutations(calls))
            messages += [result(call, "r" * draw(st.integers(0, 900))) for call in order]
    return messages


@settings(max_examples=300, deadline=None)
@given(
    messages=transcripts(),
    budget=st.integers(0, 3_000),
    keep_recent=st.integers(0, 1_500),
    summarizer_works=st.booleans(),
)
def test_compaction_never_splits_tool_pairs(
    messages: list[Message], budget: int, keep_recent: int, summarizer_works: bool
) -> None:
    summarize = Recording("summary") if summarizer_works else _fails
    got = asyncio.run(
        compact_transcript(
            messages, budget_tokens=budget, keep_recent_tokens=keep_recent, summarize=summarize
        )
    )
    tails = [estimate_tokens(messages[i:]) for i in range(len(messages) + 1)]
    safe = [i for i in range(len(messages)) if is_safe_cut(messages, i)]
    if got is None:
        # Only when within budget or when there is no safe place to cut.
        assert tails[0] <= budget or not safe
        return
    assert tails[0] > budget
    cut = got.compacted_count
    kept = got.messages[1:]
    assert kept == messages[cut:]
    assert got.messages[0].role == "user"
    assert got.summarized == summarizer_works
    # The pairing property, stated on the result: the kept part never starts with a tool
    # result, every result's call is earlier in the kept part, and every call has a result.
    assert kept and kept[0].role != "tool_result"
    assert pairs_intact(kept)
    assert cut in safe
    # The kept tail is the longest safe tail within keep_recent, or the shortest safe tail.
    if tails[cut] <= keep_recent:
        assert all(tails[i] > keep_recent for i in safe if i < cut)
    else:
        assert cut == safe[-1]


# --- summarizer_for ---------------------------------------------------------------------------


class TinyProvider:
    """A provider that answers every request with a fixed final message."""

    name = "tiny"

    def __init__(self, final: Message | None, deltas: tuple[str, ...] = ()) -> None:
        self.final = final
        self.deltas = deltas
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        self.requests.append(request)
        yield AssistantStreamEvent(type="start")
        for delta in self.deltas:
            yield AssistantStreamEvent(type="text_delta", content_index=0, delta=delta)
        if self.final is not None:
            yield AssistantResult(message=self.final)

    async def aclose(self) -> None:
        pass


def answer(*texts: str, stop_reason: str = "end_turn", error: str | None = None) -> Message:
    return Message(
        role="assistant",
        content=[ThinkingContent(thinking="hmm"), *(TextContent(text=t) for t in texts)],
        stop_reason=stop_reason,
        error_message=error,
    )


async def test_summarizer_asks_the_provider_and_returns_its_text() -> None:
    provider = TinyProvider(answer("The user asked ", "about cats."), deltas=("The ",))
    summarize = summarizer_for(provider, "small-model", max_tokens=300)
    messages = [
        user("tell me about cats"),
        Message(
            role="assistant",
            content=[
                ThinkingContent(thinking="secret scratch work", signature="s"),
                ToolCallContent(id="c1", name="wiki_search", arguments={"q": "cats"}),
            ],
        ),
        result("c1", "Cats are small carnivores."),
        assistant("Cats are small carnivores."),
    ]
    assert await summarize(messages) == "The user asked about cats."
    [request] = provider.requests
    assert request.model == "small-model"
    assert request.max_tokens == 300
    assert request.system
    assert request.tools == []
    [prompt] = request.messages
    assert prompt.role == "user"
    text = prompt.blocks()[0]
    assert isinstance(text, TextContent)
    assert "User: tell me about cats" in text.text
    assert "wiki_search" in text.text
    assert "Cats are small carnivores." in text.text
    assert "secret scratch work" not in text.text


@pytest.mark.parametrize(
    ("final", "message"),
    [
        (answer("partial", stop_reason="error", error="overloaded"), "overloaded"),
        (None, "without a result"),
        (answer(), "no summary text"),
    ],
    ids=["error-result", "no-result", "no-text"],
)
async def test_summarizer_raises_when_the_provider_gives_no_summary(
    final: Message | None, message: str
) -> None:
    summarize = summarizer_for(TinyProvider(final), "m")
    with pytest.raises(SummaryError, match=message):
        await summarize([user("hi")])


async def test_provider_error_during_compaction_truncates() -> None:
    provider = TinyProvider(answer(stop_reason="error", error="rate limited"))
    messages = conversation(10)
    got = await compact_transcript(
        messages,
        budget_tokens=2_000,
        keep_recent_tokens=700,
        summarize=summarizer_for(provider, "m"),
    )
    assert got is not None
    assert not got.summarized
    assert len(provider.requests) == 1
    assert got.kept == messages[got.compacted_count :]


async def test_compaction_with_a_working_provider() -> None:
    provider = TinyProvider(answer("Ten questions, all answered."))
    messages = conversation(10)
    got = await compact_transcript(
        messages,
        budget_tokens=2_000,
        keep_recent_tokens=700,
        summarize=summarizer_for(provider, "m"),
    )
    assert got is not None
    assert got.summarized
    assert got.summary == f"{SUMMARY_HEADER}\nTen questions, all answered."
