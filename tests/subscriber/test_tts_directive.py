"""``[[tts]]``: the reply directive asking for an answer to be spoken, found in a whole
reply, in a reply arriving in pieces, and across a run's final replies."""

from __future__ import annotations

import pytest

from botd.subscriber.directives import DirectiveAccumulator, parse_reply_directives
from botd.subscriber.final import FinalReplyInput, build_final_replies


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("[[tts]] Hello there.", "Hello there."),
        ("Hello there. [[TTS]]", "Hello there."),
        ("Hello [[ tts ]] there.", "Hello there."),
        ("[[tts]]\nLine one.\nLine two.", "Line one.\nLine two."),
    ],
)
def test_the_tag_asks_for_speech_and_leaves_the_text(raw: str, text: str) -> None:
    parsed = parse_reply_directives(raw)
    assert parsed.tts
    assert parsed.text == text


def test_a_reply_without_the_tag_is_not_spoken_and_keeps_its_text_as_it_was() -> None:
    parsed = parse_reply_directives("Say  [[tts-ish]] things.")
    assert not parsed.tts
    assert parsed.text == "Say  [[tts-ish]] things."


def test_the_tag_works_with_the_other_directives() -> None:
    parsed = parse_reply_directives(
        "[[reply_to_current]] [[tts]] Done.\nMEDIA: https://x.test/a.png"
    )
    assert parsed.tts and parsed.reply_to_current
    assert parsed.text == "Done."
    assert parsed.media_urls == ["https://x.test/a.png"]


def test_a_reply_that_is_only_the_tag_has_nothing_to_send() -> None:
    parsed = parse_reply_directives("[[tts]]")
    assert parsed.tts and not parsed.renderable


def test_in_pieces_the_tag_speaks_the_rest_of_its_message_until_a_reset() -> None:
    pieces = DirectiveAccumulator()
    assert pieces.consume("Before. ") is not None
    first = pieces.consume("Now [[t")  # the tag cut in two is held back
    assert first is not None and not first.tts and first.text == "Now"
    second = pieces.consume("ts]] spoken.")
    assert second is not None and second.tts and second.text == "spoken."
    third = pieces.consume(" More of it.")
    assert third is not None and third.tts
    pieces.reset()  # the next message
    fourth = pieces.consume("Plain again.")
    assert fourth is not None and not fourth.tts


def test_a_tag_alone_in_a_piece_carries_to_the_next_piece() -> None:
    pieces = DirectiveAccumulator()
    assert pieces.consume("[[tts]]") is None
    later = pieces.consume("Spoken.")
    assert later is not None and later.tts and later.text == "Spoken."


def test_a_tag_in_one_message_speaks_the_whole_answer_but_not_an_error_notice() -> None:
    replies = build_final_replies(
        FinalReplyInput(
            assistant_texts=["Let me look.", "[[tts]] It is sunny."],
            error_text="⚠️ The agent stopped with an error: overloaded",
        )
    )
    assert [(r.text, r.tts) for r in replies] == [
        ("⚠️ The agent stopped with an error: overloaded", False),
        ("Let me look.", True),
        ("It is sunny.", True),
    ]


def test_the_reasoning_leading_a_spoken_answer_is_not_spoken() -> None:
    replies = build_final_replies(
        FinalReplyInput(assistant_texts=["[[tts]] Yes."], reasoning_text="Reasoning: thought.")
    )
    assert [(r.text, r.tts) for r in replies] == [("Reasoning: thought.", False), ("Yes.", True)]


def test_without_the_tag_no_final_reply_is_spoken() -> None:
    replies = build_final_replies(FinalReplyInput(assistant_texts=["One.", "Two."]))
    assert not any(r.tts for r in replies)
