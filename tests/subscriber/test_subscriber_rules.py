"""The subscriber's rules (spec subscriber.md sections 4, 9 and 10.3), one behaviour a test."""

from __future__ import annotations

from botd.events import AgentEnd, AutoCompactionEnd, AutoCompactionStart, TurnStart
from botd.subscriber import StreamSubscriber, SubscriberConfig

from .harness import (
    Recorder,
    chunking,
    delta,
    message_end,
    message_start,
    no_chunking,
    text_end,
    tool_end,
    tool_start,
    update,
)

SEND = {"action": "send", "to": "+1555", "message": "This is the answer."}

# --- 4.1 message_start --------------------------------------------------------------------


def test_message_start_calls_the_typing_signal() -> None:
    starts: list[int] = []
    sub = StreamSubscriber(on_assistant_message_start=lambda: starts.append(1))
    sub.handle(message_start())
    sub.handle(message_start())
    assert starts == [1, 1]


def test_user_and_tool_messages_are_ignored() -> None:
    rec = Recorder(no_chunking())
    user_end = message_end("hello from the user")
    user_end.message.role = "user"
    rec.feed(user_end)
    assert rec.sub.assistant_texts == [] and rec.blocks == []


# --- 4.2 text updates ---------------------------------------------------------------------


def test_text_end_repeating_the_whole_content_adds_nothing() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("Hello "), delta("world"), text_end("Hello world")
    )
    assert rec.texts == ["Hello world"]


def test_text_start_with_full_content_starts_the_buffer() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), update("text_start", content="Hi there"), text_end()
    )
    assert rec.texts == ["Hi there"]


def test_text_end_with_a_stale_prefix_adds_nothing() -> None:
    rec = Recorder(no_chunking()).feed(message_start(), delta("Hello world"), text_end("Hello"))
    assert rec.texts == ["Hello world"]


def test_text_end_with_content_that_never_streamed_is_appended() -> None:
    # A provider that sends a content block's text only at text_end (no deltas).
    rec = Recorder(no_chunking()).feed(message_start(), delta("Hello. "), text_end("Goodbye."))
    assert rec.texts == ["Hello. Goodbye."]


def test_equal_consecutive_blocks_are_both_delivered() -> None:
    rec = Recorder(chunking(1, 20, "newline")).feed(
        message_start(), delta("Yes.\n"), delta("Yes.\n"), delta("No.\n"), text_end()
    )
    assert rec.texts == ["Yes.", "Yes.", "No."]


def test_text_end_delta_wins_over_content() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("Hello"), update("text_end", delta=" there", content="ignored")
    )
    assert rec.texts == ["Hello there"]


def test_text_end_flushes_into_assistant_texts_without_a_block_callback() -> None:
    rec = Recorder(no_chunking(), block_replies_on=False).feed(
        message_start(), delta("Quiet answer"), text_end()
    )
    assert rec.sub.assistant_texts == ["Quiet answer"]


def test_message_end_mode_collects_until_message_end() -> None:
    rec = Recorder(SubscriberConfig(block_break="message_end", chunking=None))
    rec.feed(message_start(), delta("One. "), text_end(), delta("Two."))
    assert rec.texts == []
    rec.feed(message_end("One. Two."))
    assert rec.texts == ["One. Two."]


def test_thinking_and_toolcall_stream_events_are_ignored() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(),
        update("thinking_delta", delta="secret"),
        update("toolcall_delta", delta='{"a":1}'),
        delta("Visible"),
        text_end(),
    )
    assert rec.texts == ["Visible"]


# --- 4.3 the block gate -------------------------------------------------------------------


def test_block_text_keeps_indentation_and_drops_blank_lines_around_it() -> None:
    # The reference kept leading newlines; a chat message gains nothing from them, while
    # the indentation of the first line (code, nested lists) must stay.
    rec = Recorder(no_chunking()).feed(message_start(), delta("\n  indented  \n\n"), text_end())
    assert rec.texts == ["  indented"]


def test_a_tag_only_block_is_not_delivered_but_its_reply_state_carries() -> None:
    rec = Recorder(chunking(1, 50, "newline")).feed(
        message_start(), delta("[[reply_to:abc]]\nHello there"), text_end()
    )
    assert [(b.text, b.reply_to_id) for b in rec.blocks] == [("Hello there", "abc")]
    assert rec.sub.assistant_texts == ["[[reply_to:abc]]", "Hello there"]


def test_a_silent_block_is_not_delivered() -> None:
    rec = Recorder(no_chunking()).feed(message_start(), delta("NO_REPLY"), text_end())
    assert rec.blocks == []


def test_media_lines_become_media_urls() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("Here you go\nMEDIA: https://example.com/cat.png"), text_end()
    )
    assert rec.blocks[0].text == "Here you go"
    assert rec.blocks[0].media_urls == ["https://example.com/cat.png"]


def test_audio_as_voice_block_with_media_is_delivered() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("[[audio_as_voice]]\nMEDIA: /tmp/voice.ogg"), text_end()
    )
    assert rec.blocks[0].audio_as_voice and rec.blocks[0].media_urls == ["/tmp/voice.ogg"]


# --- 4.4 message_end ----------------------------------------------------------------------


def test_late_text_end_after_message_end_produces_no_second_block() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("Hello"), message_end("Hello"), text_end("Hello")
    )
    assert rec.texts == ["Hello"]


def test_late_text_end_after_chunked_message_end_produces_nothing() -> None:
    # With a chunker the message left as several blocks; a late text_end resending the whole
    # content must not re-chunk it (the reference's last-block guard catches only one block).
    text = "First paragraph here.\n\nSecond paragraph here.\n\nThird paragraph here."
    rec = Recorder(chunking(10, 30))
    rec.feed(message_start(), *[delta(text[i : i + 5]) for i in range(0, len(text), 5)])
    rec.feed(text_end(), message_end(text))
    before = list(rec.texts)
    assert len(before) == 3
    rec.feed(text_end(text), update("text_start", content=text), text_end())
    assert rec.texts == before


def test_repeated_message_end_after_chunked_blocks_is_ignored() -> None:
    text = "First paragraph here.\n\nSecond paragraph here.\n\nThird paragraph here."
    rec = Recorder(SubscriberConfig(block_break="message_end", chunking=chunking(10, 30).chunking))
    rec.feed(message_start(), delta(text), message_end(text))
    first = list(rec.texts)
    rec.feed(message_end(text))
    assert rec.texts == first
    assert rec.sub.assistant_texts == first


def test_text_after_message_end_without_message_start_is_a_new_message() -> None:
    # A runtime that skips message_start must not lose the second message.
    rec = Recorder(no_chunking()).feed(
        delta("First."), text_end(), message_end("First."), delta("Second."), text_end()
    )
    assert rec.texts == ["First.", "Second."]


def test_non_streaming_message_is_pushed_once() -> None:
    rec = Recorder(no_chunking(), block_replies_on=False).feed(message_end("Whole answer"))
    assert rec.sub.assistant_texts == ["Whole answer"]


def test_message_end_in_text_end_mode_emits_unflushed_text() -> None:
    # The provider sent no text_end: message_end delivers the message text.
    rec = Recorder(no_chunking()).feed(message_start(), delta("Hel"), message_end("Hello"))
    assert rec.texts == ["Hello"]


def test_message_end_force_drains_the_chunker() -> None:
    rec = Recorder(chunking(50, 100)).feed(
        message_start(), delta("Short text."), message_end("Short text.")
    )
    assert rec.texts == ["Short text."]


def test_trailing_directive_tail_is_flushed_at_message_end() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("Answer [["), text_end(), message_end("Answer [[")
    )
    assert "".join(rec.texts).replace(" ", "") == "Answer[["


def test_enforce_final_tag_keeps_only_final_text() -> None:
    config = SubscriberConfig(chunking=None, enforce_final_tag=True)
    rec = Recorder(config).feed(
        message_start(),
        delta("Let me think out loud. <final>The answer"),
        delta(" is 42.</final> trailing"),
        text_end(),
    )
    assert rec.texts == ["The answer is 42."]


def test_enforce_final_tag_without_final_delivers_nothing() -> None:
    config = SubscriberConfig(block_break="message_end", chunking=None, enforce_final_tag=True)
    rec = Recorder(config).feed(message_start(), delta("untagged"), message_end("untagged"))
    assert rec.blocks == []


def test_enforce_final_tag_applies_at_message_end() -> None:
    config = SubscriberConfig(block_break="message_end", chunking=None, enforce_final_tag=True)
    text = "musing <final>Clean answer</final>"
    rec = Recorder(config).feed(message_start(), delta(text), message_end(text))
    assert rec.texts == ["Clean answer"]


def test_thinking_tags_in_inline_code_are_kept_in_blocks() -> None:
    rec = Recorder(no_chunking()).feed(message_start(), delta("Use `<think>` to start"), text_end())
    assert rec.texts == ["Use `<think>` to start"]


def test_thinking_state_carries_across_chunker_blocks() -> None:
    text = "<think>" + "hidden reasoning words " * 6 + "</think>\n\nVisible answer here."
    rec = Recorder(chunking(10, 40, "newline"))
    rec.feed(message_start(), *[delta(text[i : i + 3]) for i in range(0, len(text), 3)])
    rec.feed(text_end())
    assert " ".join(rec.texts).split() == ["Visible", "answer", "here."]


# --- 4.5 / 4.7 tools ----------------------------------------------------------------------


def test_tool_start_flushes_blocks_then_signals() -> None:
    rec = Recorder(chunking(100, 200)).feed(
        message_start(), delta("Before the tool."), tool_start("t1", "exec", {"command": "ls"})
    )
    assert rec.texts == ["Before the tool."]
    assert rec.order == ["block", "flush"]


def test_flush_signal_fires_even_with_nothing_buffered() -> None:
    rec = Recorder(no_chunking()).feed(tool_start("t1", "read", {}), tool_start("t2", "read", {}))
    assert rec.flushes == 2 and rec.blocks == []


def test_committed_send_suppresses_the_same_block() -> None:
    rec = Recorder(no_chunking()).feed(
        tool_start("t1", "message", SEND),
        tool_end("t1", "message"),
        message_start(),
        delta("This is the answer."),
        text_end(),
    )
    assert rec.blocks == []
    assert rec.sub.messaging_tool_sent_texts == ["This is the answer."]
    assert rec.sub.did_send_via_messaging_tool


def test_pending_send_does_not_suppress() -> None:
    rec = Recorder(no_chunking()).feed(
        tool_start("t1", "message", SEND), message_start(), delta("This is the answer."), text_end()
    )
    assert rec.texts == ["This is the answer."]


def test_failed_send_is_discarded_and_never_suppresses() -> None:
    rec = Recorder(no_chunking()).feed(
        tool_start("t1", "message", SEND),
        tool_end("t1", "message", result="network down", is_error=True),
        message_start(),
        delta("This is the answer."),
        text_end(),
    )
    assert rec.texts == ["This is the answer."]
    assert rec.sub.messaging_tool_sent_texts == []
    assert rec.sub.last_tool_error is not None
    assert rec.sub.last_tool_error.error == "network down"


def test_timeout_status_counts_as_failure() -> None:
    rec = Recorder(no_chunking()).feed(
        tool_start("t1", "message", SEND),
        tool_end("t1", "message", result={"details": {"status": " Timeout "}}),
    )
    assert rec.sub.messaging_tool_sent_texts == []


def test_tool_end_without_start_is_harmless() -> None:
    rec = Recorder(no_chunking()).feed(
        tool_end("ghost", "message"), message_start(), delta("Still here."), text_end()
    )
    assert rec.texts == ["Still here."]
    assert rec.sub.messaging_tool_sent_texts == []


def test_short_commentary_inside_a_long_send_is_not_suppressed() -> None:
    long_send = {
        "action": "send",
        "message": "Here is the full report with every detail you asked for. " * 3,
    }
    rec = Recorder(no_chunking()).feed(
        tool_start("t1", "message", long_send),
        tool_end("t1", "message"),
        message_start(),
        delta("every detail you asked"),
        text_end(),
    )
    assert rec.texts == ["every detail you asked"]


def test_send_without_target_is_a_send_to_this_conversation() -> None:
    rec = Recorder(no_chunking()).feed(
        tool_start("t1", "message", {"action": "send", "message": "Posted it."}),
        tool_end("t1", "message"),
    )
    assert rec.sub.sent_to_current_conversation
    assert rec.sub.messaging_tool_sent_targets == []


def test_send_target_is_recorded() -> None:
    rec = Recorder(no_chunking()).feed(
        tool_start("t1", "message", {"action": "send", "channel": "telegram", "to": "123"}),
        tool_end("t1", "message"),
    )
    assert [t.to_dict() for t in rec.sub.messaging_tool_sent_targets] == [
        {"tool": "message", "provider": "telegram", "account_id": None, "to": "telegram:123"}
    ]


def test_sent_texts_are_capped_at_200_oldest_dropped() -> None:
    rec = Recorder(no_chunking())
    for i in range(205):
        args = {"action": "send", "message": f"message number {i:03d}"}
        rec.feed(tool_start(f"t{i}", "message", args), tool_end(f"t{i}", "message"))
    sent = rec.sub.messaging_tool_sent_texts
    assert len(sent) == 200
    assert sent[0] == "message number 005" and sent[-1] == "message number 204"


def test_tool_names_are_normalised() -> None:
    rec = Recorder(no_chunking()).feed(
        tool_start("t1", " Message ", SEND), tool_end("t1", "MESSAGE")
    )
    assert rec.sub.messaging_tool_sent_texts == ["This is the answer."]


# --- 4.6 per-message dedupe ---------------------------------------------------------------


def test_same_text_in_two_messages_is_delivered_twice() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("OK"), text_end(), message_start(), delta("OK"), text_end()
    )
    assert rec.texts == ["OK", "OK"]


def test_two_assistant_messages_in_one_run_each_deliver() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(),
        delta("Let me check."),
        text_end(),
        message_end("Let me check."),
        tool_start("t1", "exec", {"command": "ls"}),
        tool_end("t1", "exec", result={"content": [{"type": "text", "text": "a.txt"}]}),
        message_start(),
        delta("Done."),
        text_end(),
        message_end("Done."),
        AgentEnd(),
    )
    assert rec.texts == ["Let me check.", "Done."]
    assert rec.sub.assistant_texts == ["Let me check.", "Done."]


# --- 4.8 compaction and agent_end ---------------------------------------------------------


def test_compaction_retry_forgets_the_attempt_and_waits_for_agent_end() -> None:
    rec = Recorder(no_chunking())
    rec.feed(
        message_start(),
        delta("draft"),
        text_end(),
        tool_start("t1", "message", SEND),
        tool_end("t1", "message"),
        AutoCompactionStart(),
    )
    assert rec.sub.is_compacting
    rec.feed(AutoCompactionEnd(will_retry=True))
    assert rec.sub.assistant_texts == [] and rec.sub.messaging_tool_sent_texts == []
    assert not rec.sub.compaction_settled
    rec.feed(AgentEnd())
    assert rec.sub.compaction_settled


def test_two_compaction_retries_need_two_agent_ends() -> None:
    rec = Recorder(no_chunking()).feed(
        AutoCompactionStart(),
        AutoCompactionEnd(will_retry=True),
        AutoCompactionStart(),
        AutoCompactionEnd(will_retry=True),
        AgentEnd(),
    )
    assert not rec.sub.compaction_settled
    rec.feed(AgentEnd())
    assert rec.sub.compaction_settled


def test_agent_end_flushes_what_is_left() -> None:
    rec = Recorder(chunking(100, 200)).feed(message_start(), delta("Left over."), AgentEnd())
    assert rec.texts == ["Left over."]


def test_unknown_lifecycle_events_are_ignored() -> None:
    rec = Recorder(no_chunking()).feed(TurnStart(), message_start(), delta("x y"), text_end())
    assert rec.texts == ["x y"]


# --- 9 reasoning --------------------------------------------------------------------------


def test_reasoning_on_sends_a_separate_block_after_the_answer() -> None:
    config = SubscriberConfig(chunking=None, reasoning="on")
    rec = Recorder(config).feed(
        message_start(),
        delta("Answer"),
        text_end(),
        message_end(
            content=[{"type": "thinking", "thinking": "why"}, {"type": "text", "text": "Answer"}]
        ),
    )
    assert rec.texts == ["Answer", "Reasoning:\n_why_"]


def test_reasoning_on_in_message_end_mode_goes_first() -> None:
    config = SubscriberConfig(block_break="message_end", chunking=None, reasoning="on")
    rec = Recorder(config).feed(
        message_end(
            content=[{"type": "thinking", "thinking": "why"}, {"type": "text", "text": "Answer"}]
        )
    )
    assert rec.texts == ["Reasoning:\n_why_", "Answer"]


def test_reasoning_stream_follows_the_tags_and_never_leaks() -> None:
    config = SubscriberConfig(chunking=None, reasoning="stream")
    rec = Recorder(config).feed(
        message_start(),
        delta("<think>step one"),
        delta(" and two</think>Answer"),
        text_end(),
    )
    assert rec.reasoning[-1] == "Reasoning:\n_step one and two_"
    assert rec.texts == ["Answer"]
    assert all("step" not in p.text for p in rec.partials)


def test_reasoning_off_emits_no_reasoning() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("<think>hidden</think>Answer"), text_end()
    )
    assert rec.reasoning == [] and rec.texts == ["Answer"]


# --- robustness ---------------------------------------------------------------------------


def test_events_before_any_message_start_work() -> None:
    rec = Recorder(no_chunking()).feed(text_end(), delta("late start"), text_end())
    assert rec.texts == ["late start"]


def test_a_failing_callback_does_not_break_the_subscriber() -> None:
    calls: list[str] = []

    def explode(reply: object) -> None:
        calls.append("called")
        raise RuntimeError("delivery bug")

    sub = StreamSubscriber(SubscriberConfig(chunking=None), on_block_reply=explode)
    sub.handle(message_start())
    sub.handle(delta("one"))
    sub.handle(text_end())
    sub.handle(message_start())
    sub.handle(delta("two"))
    sub.handle(text_end())
    assert calls == ["called", "called"]
    assert sub.assistant_texts == ["one", "two"]


def test_reply_directive_split_across_deltas_reaches_the_block() -> None:
    rec = Recorder(no_chunking()).feed(
        message_start(), delta("[[reply_"), delta("to:msg-9]] Sure"), delta(", done."), text_end()
    )
    assert [(b.text, b.reply_to_id, b.reply_to_tag) for b in rec.blocks] == [
        ("Sure, done.", "msg-9", True)
    ]
    assert [p.text for p in rec.partials][-1] == "Sure, done."


def test_reply_directive_split_across_chunker_blocks() -> None:
    rec = Recorder(chunking(1, 30, "newline")).feed(
        message_start(),
        delta("[[reply_to_"),
        delta("current]]\n"),
        delta("First line\n"),
        text_end(),
    )
    assert [(b.text, b.reply_to_current) for b in rec.blocks] == [("First line", True)]
