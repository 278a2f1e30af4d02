"""The final-reply step (contract section 4, points 3 and 4) and partial replies."""

from __future__ import annotations

from botd.channels.registry import target_forms
from botd.events import Message
from botd.subscriber import (
    BlockReply,
    FinalReplyInput,
    MessagingTarget,
    Origin,
    SubscriberConfig,
    ToolError,
    build_final_replies,
    error_text_for,
)

from .harness import Recorder, delta, message_start, text_end

ORIGIN = Origin("telegram", "telegram:42")
HERE = MessagingTarget(tool="message", provider="telegram", to="telegram:42")
ELSEWHERE = MessagingTarget(tool="message", provider="telegram", to="telegram:99")


def finals(**fields: object) -> list[str]:
    fields.setdefault("target_forms", target_forms())
    return [r.text for r in build_final_replies(FinalReplyInput(**fields))]  # type: ignore[arg-type]


# --- what the final replies are ------------------------------------------------------------


def test_assistant_texts_become_final_replies() -> None:
    assert finals(assistant_texts=["One.", "Two."]) == ["One.", "Two."]


def test_fallback_text_when_nothing_was_collected() -> None:
    assert finals(assistant_texts=[], fallback_text="From the message.") == ["From the message."]


def test_silent_and_tag_only_texts_are_dropped() -> None:
    assert finals(assistant_texts=["NO_REPLY", "[[reply_to_current]]", "Real."]) == ["Real."]


def test_substantive_text_ending_with_the_silent_token_is_delivered_without_it() -> None:
    assert finals(assistant_texts=["All done. NO_REPLY"]) == ["All done."]


def test_error_notice_survives_streamed_blocks_and_sends() -> None:
    texts = finals(
        assistant_texts=["Half an answer"],
        error_text="⚠️ The agent stopped with an error: overloaded",
        delivered_blocks=[BlockReply("Half an answer")],
        block_streaming=True,
        sent_to_current=True,
        origin=ORIGIN,
    )
    assert texts == ["⚠️ The agent stopped with an error: overloaded"]


def test_error_text_for_a_failed_message_only() -> None:
    failed = Message(role="assistant", stop_reason="error", error_message="overloaded\ndetails")
    assert error_text_for(failed) == "⚠️ The agent stopped with an error: overloaded"
    assert error_text_for(Message(role="assistant", stop_reason="end_turn")) == ""
    assert error_text_for(None) == ""


def test_error_and_reasoning_lead() -> None:
    texts = finals(
        assistant_texts=["Answer"], error_text="⚠️ failed", reasoning_text="Reasoning:\n_r_"
    )
    assert texts == ["⚠️ failed", "Reasoning:\n_r_", "Answer"]


def test_reply_to_current_resolves_to_the_current_message() -> None:
    (reply,) = build_final_replies(
        FinalReplyInput(assistant_texts=["[[reply_to_current]] Hi"], current_message_id="m1")
    )
    assert (reply.text, reply.reply_to_id, reply.reply_to_current) == ("Hi", "m1", True)


def test_unrecoverable_tool_error_is_reported_when_there_is_no_reply() -> None:
    error = ToolError("exec", "permission denied")
    assert finals(assistant_texts=[], last_tool_error=error) == ["⚠️ exec failed: permission denied"]


def test_recoverable_tool_error_is_not_reported() -> None:
    assert finals(assistant_texts=[], last_tool_error=ToolError("exec", "path is required")) == []


# --- block streaming dedupe (contract 4.4) --------------------------------------------------


def test_finals_dropped_once_blocks_were_delivered() -> None:
    blocks = [BlockReply("Hello")]
    assert finals(assistant_texts=["Hello"], delivered_blocks=blocks, block_streaming=True) == []


def test_after_an_aborted_delivery_only_uncovered_finals_remain() -> None:
    blocks = [BlockReply("Part one."), BlockReply("Part two.")]
    texts = finals(
        assistant_texts=["Part one.\n\nPart two.", "Part three."],
        delivered_blocks=blocks,
        block_streaming=True,
        block_delivery_aborted=True,
    )
    assert texts == ["Part three."]


def test_coverage_ignores_reply_to_id_the_blocks_lacked() -> None:
    blocks = [BlockReply("Hi there")]
    texts = finals(
        assistant_texts=["[[reply_to:7]] Hi there"],
        delivered_blocks=blocks,
        block_streaming=True,
        block_delivery_aborted=True,
    )
    assert texts == []


# --- messaging-tool suppression by route (contract 4.3) ------------------------------------


def test_send_to_this_conversation_drops_every_final() -> None:
    texts = finals(
        assistant_texts=["Something else"],
        sent_texts=["x" * 20],
        sent_targets=[HERE],
        origin=ORIGIN,
    )
    assert texts == []


def test_send_without_target_counts_as_this_conversation() -> None:
    texts = finals(
        assistant_texts=["Anything"], sent_texts=["Posted it."], sent_to_current=True, origin=ORIGIN
    )
    assert texts == []


def test_send_to_another_chat_never_swallows_the_reply() -> None:
    same_text = "The report is ready for review."
    texts = finals(
        assistant_texts=[same_text], sent_texts=[same_text], sent_targets=[ELSEWHERE], origin=ORIGIN
    )
    assert texts == [same_text]


def test_send_naming_this_chat_without_a_channel_counts_as_this_conversation() -> None:
    no_channel = MessagingTarget(tool="message", provider="message", to="42")
    origin = Origin("telegram", "42")
    assert finals(assistant_texts=["Reply"], sent_targets=[no_channel], origin=origin) == []


def test_thread_is_part_of_the_target() -> None:
    in_thread = MessagingTarget(tool="message", provider="telegram", to="telegram:42:thread:7")
    assert finals(
        assistant_texts=["Reply"], sent_texts=["x" * 20], sent_targets=[in_thread], origin=ORIGIN
    ) == ["Reply"]


def test_account_mismatch_keeps_the_reply() -> None:
    other_account = MessagingTarget(
        tool="message", provider="telegram", to="telegram:42", account_id="b"
    )
    origin = Origin("telegram", "telegram:42", account_id="a")
    assert finals(assistant_texts=["Reply"], sent_targets=[other_account], origin=origin) == [
        "Reply"
    ]


def test_unknown_origin_still_never_repeats_a_sent_text() -> None:
    sent = "This is the answer."
    assert finals(
        assistant_texts=[sent, "Extra note here."], sent_texts=[sent], sent_targets=[ELSEWHERE]
    ) == ["Extra note here."]


# --- partial replies -------------------------------------------------------------------------


def partials(*deltas: str, **config: object) -> Recorder:
    rec = Recorder(SubscriberConfig(chunking=None, **config))  # type: ignore[arg-type]
    rec.feed(message_start(), *[delta(d) for d in deltas], text_end())
    return rec


def test_partials_carry_deltas_and_the_text_so_far() -> None:
    rec = partials("Hel", "lo ", "world")
    assert [(p.delta, p.text) for p in rec.partials] == [
        ("Hel", "Hel"),
        ("lo", "Hello"),
        (" world", "Hello world"),
    ]


def test_partial_text_stays_readable_after_the_run_moves_on() -> None:
    rec = partials("First ", "part")
    first = rec.partials[0]
    rec.feed(message_start(), delta("another message"))
    assert first.text == "First"


def test_partials_never_show_thinking() -> None:
    rec = partials("<thi", "nk>secret</thi", "nk>Visible")
    assert [p.text for p in rec.partials] == ["Visible"]


def test_partials_do_not_flash_the_silent_token() -> None:
    rec = partials("NO", "_RE", "PLY")
    assert rec.partials == []


def test_partial_with_media_line() -> None:
    rec = partials("MEDIA: https://example.com/a.png")
    assert [(p.text, p.media_urls) for p in rec.partials] == [("", ["https://example.com/a.png"])]


def test_partials_with_a_reply_tag_show_clean_text() -> None:
    rec = partials("[[reply_to_current]] Sure", ", done")
    assert [p.text for p in rec.partials] == ["Sure", "Sure, done"]


def test_partials_off_when_reasoning_on_without_block_replies() -> None:
    rec = Recorder(SubscriberConfig(chunking=None, reasoning="on"), block_replies_on=False)
    rec.feed(message_start(), delta("Hello"), text_end())
    assert rec.partials == []


def test_held_back_tail_is_released_at_text_end() -> None:
    rec = partials("Use ``")
    assert rec.partials[-1].text == "Use ``"


def test_final_replies_lead_with_reasoning_only_when_nothing_streamed_as_blocks() -> None:
    from .harness import message_end

    rec = Recorder(SubscriberConfig(chunking=None, reasoning="on"), block_replies_on=False)
    rec.feed(
        message_start(),
        delta("Answer"),
        text_end(),
        message_end(
            content=[{"type": "thinking", "thinking": "why"}, {"type": "text", "text": "Answer"}]
        ),
    )
    finals = rec.sub.final_replies(block_streaming=False)
    assert [r.text for r in finals] == ["Reasoning:\n_why_", "Answer"]


def test_final_replies_after_streamed_blocks_are_empty() -> None:
    rec = Recorder(SubscriberConfig(chunking=None))
    rec.feed(message_start(), delta("Answer"), text_end())
    assert rec.texts == ["Answer"]
    assert rec.sub.final_replies(block_streaming=True) == []
    assert [r.text for r in rec.sub.final_replies(block_streaming=False)] == ["Answer"]
