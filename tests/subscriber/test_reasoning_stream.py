"""Reasoning ``stream``: a model's native thinking reaches ``on_reasoning`` before its answer,
and it is not repeated in the final replies."""

from __future__ import annotations

from botd.events import AssistantStreamEvent, Message, MessageUpdate

from .harness import Recorder, delta, message_end, message_start, no_chunking, text_end


def thinking(kind: str, index: int, *, delta: str | None = None, content: str | None = None):
    return MessageUpdate(
        message=Message(role="assistant"),
        assistant_event=AssistantStreamEvent(
            type=kind,  # type: ignore[arg-type]
            content_index=index,
            delta=delta,
            content=content,
        ),
    )


ANSWER = [
    {"type": "thinking", "thinking": "First I check.\nThen I answer."},
    {"type": "text", "text": "It is 42."},
]


def test_native_thinking_is_streamed_once_when_its_block_ends_before_the_answer() -> None:
    rec = Recorder(no_chunking(reasoning="stream"))
    rec.feed(
        message_start(),
        thinking("thinking_start", 0),
        thinking("thinking_delta", 0, delta="First I check.\n"),
        thinking("thinking_delta", 0, delta="Then I answer."),
    )
    assert rec.reasoning == []  # not per delta: once the block is whole
    rec.feed(thinking("thinking_end", 0, content="First I check.\nThen I answer."))
    assert rec.reasoning == ["Reasoning:\n_First I check._\n_Then I answer._"]
    assert rec.blocks == []
    rec.feed(delta("It is 42."), text_end(), message_end(content=ANSWER))
    # The answer after the reasoning; message_end's reasoning is the same text: not again.
    assert rec.texts == ["It is 42."]
    assert rec.reasoning == ["Reasoning:\n_First I check._\n_Then I answer._"]


def test_each_thinking_block_of_a_message_adds_to_its_reasoning() -> None:
    rec = Recorder(no_chunking(reasoning="stream"))
    rec.feed(
        message_start(),
        thinking("thinking_start", 0),
        thinking("thinking_delta", 0, delta="One."),
        thinking("thinking_end", 0),
        thinking("thinking_start", 2),
        thinking("thinking_delta", 2, delta="Two."),
        thinking("thinking_end", 2),
    )
    assert rec.reasoning == ["Reasoning:\n_One._", "Reasoning:\n_One._\n_Two._"]
    rec.feed(message_start(), thinking("thinking_end", 0, content="Three."))
    assert rec.reasoning[-1] == "Reasoning:\n_Three._"  # a new message starts afresh


def test_streamed_reasoning_does_not_lead_the_final_replies() -> None:
    # Without blocks (final or edit delivery) the finals are the answer only: the reasoning
    # went to on_reasoning (reasoning "on" is what puts it in the finals).
    rec = Recorder(no_chunking(reasoning="stream"), block_replies_on=False)
    rec.feed(message_start(), delta("It is 42."), text_end(), message_end(content=ANSWER))
    assert rec.reasoning == ["Reasoning:\n_First I check._\n_Then I answer._"]
    assert [r.text for r in rec.sub.final_replies(block_streaming=False)] == ["It is 42."]
