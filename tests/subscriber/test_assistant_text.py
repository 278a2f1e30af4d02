"""Assistant text, thinking and reasoning output (botd.subscriber.assistant_text)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from botd.events import Message, TextContent, ThinkingContent, ToolCallContent
from botd.subscriber.assistant_text import (
    CONTEXT_OVERFLOW_REPLY,
    MESSAGE_ORDERING_REPLY,
    OVERLOADED_REPLY,
    RATE_LIMIT_REPLY,
    TIMEOUT_REPLY,
    collapse_repeated_paragraphs,
    extract_assistant_text,
    extract_thinking,
    extract_thinking_from_tags,
    format_reasoning,
    promote_thinking_tags,
    rewrite_provider_error,
    strip_downgraded_tool_text,
    strip_reasoning_tags_strict,
)
from tests.cases import case_ids, load_cases

STRIP_CASES = load_cases("strip_tags")
REASONING_CASES = load_cases("reasoning_format")
# Subscriber cases that pin the in-place promotion of tag-wrapped thinking at message_end.
PROMOTION_CASES = [
    case
    for case in load_cases("subscriber")
    if "messageContentAfterEnd" in case["expect"]
    and any(e["type"] == "message_end" and "text" in e for e in case["events"])
]


def assistant(*texts: str) -> Message:
    return Message(role="assistant", content=[TextContent(text=t) for t in texts])


def content_dicts(message: Message) -> list[dict[str, Any]]:
    return [block.model_dump(exclude_none=True) for block in message.blocks()]


# --- golden cases -------------------------------------------------------------------------


@pytest.mark.parametrize("case", STRIP_CASES, ids=case_ids(STRIP_CASES))
def test_strip_tags_case(case: dict[str, Any]) -> None:
    assert case["input"]["fn"] == "extractAssistantText"
    assert extract_assistant_text(assistant(*case["input"]["textBlocks"])) == case["expect"]


@pytest.mark.parametrize("case", REASONING_CASES, ids=case_ids(REASONING_CASES))
def test_reasoning_format_case(case: dict[str, Any]) -> None:
    assert format_reasoning(case["input"]) == case["expect"]


@pytest.mark.parametrize("case", PROMOTION_CASES, ids=case_ids(PROMOTION_CASES))
def test_promotion_case(case: dict[str, Any]) -> None:
    end = next(e for e in case["events"] if e["type"] == "message_end")
    message = assistant(end["text"])
    promote_thinking_tags(message)
    assert content_dicts(message) == case["expect"]["messageContentAfterEnd"]


# --- extract_assistant_text ---------------------------------------------------------------


def test_plain_text_blocks_are_trimmed_and_joined() -> None:
    assert extract_assistant_text(assistant("  Hello  ", "", "   ", "World\n")) == "Hello\nWorld"


def test_only_text_blocks_count() -> None:
    message = Message(
        role="assistant",
        content=[
            ThinkingContent(thinking="secret"),
            TextContent(text="Visible"),
            ToolCallContent(id="t1", name="exec", arguments={"command": "ls"}),
        ],
    )
    assert extract_assistant_text(message) == "Visible"


def test_string_content() -> None:
    assert extract_assistant_text(Message(role="assistant", content=" Hi ")) == "Hi"


def test_thinking_tags_removed_with_attributes_and_any_case() -> None:
    text = '<Thinking reason="x">plan</Thinking>Answer < / think >'
    assert extract_assistant_text(assistant(text)) == "Answer"


def test_all_thinking_tag_names() -> None:
    for name in ("think", "thinking", "thought", "antthinking"):
        assert extract_assistant_text(assistant(f"<{name}>x</{name}>Done")) == "Done"


def test_unclosed_thinking_drops_rest_but_keeps_before() -> None:
    assert extract_assistant_text(assistant("Before <think>never closed")) == "Before"


def test_strict_strip_is_not_code_aware() -> None:
    text = "Use `<think>` like this</think> ok"
    assert extract_assistant_text(assistant(text)) == "Use ` ok"


def test_similar_tag_names_are_not_reasoning_tags() -> None:
    text = "<thinker>keep</thinker> <thoughts>too</thoughts> <finally>"
    assert extract_assistant_text(assistant(text)) == text


def test_minimax_tool_xml_removed() -> None:
    text = (
        'Let me look.\n<minimax:tool_call>\n<invoke name="read">\n'
        '<parameter name="path">a.txt</parameter>\n</invoke>\n</minimax:tool_call>\nDone.'
    )
    # The XML goes; the newlines around it stay.
    assert extract_assistant_text(assistant(text)) == "Let me look.\n\n\n\nDone."


def test_invoke_without_minimax_marker_is_kept() -> None:
    text = '<invoke name="x">y</invoke>'
    assert extract_assistant_text(assistant(text)) == text


def test_downgraded_tool_call_with_arguments_removed() -> None:
    text = (
        'Checking.\n[Tool Call: read (ID: toolu_1)]\nArguments: {"path": "a}.txt", '
        '"opts": [1, {"x": "\\"]"}]}\nAll good.'
    )
    # The call's own line break goes with it: no blank line between the lines around it.
    assert extract_assistant_text(assistant(text)) == "Checking.\nAll good."


def test_downgraded_tool_call_without_arguments() -> None:
    # The spaces after the marker go with it (the reference's rule), the ones before stay.
    assert extract_assistant_text(assistant("A [Tool Call: exec (ID: 9)] B")) == "A B"


def test_downgraded_arguments_scalar_runs_to_end_of_line() -> None:
    text = "[Tool Call: x (ID: 1)] Arguments: none at all\nReply"
    assert strip_downgraded_tool_text(text) == "Reply"


def test_downgraded_tool_calls_in_a_row_leave_no_blank_lines() -> None:
    text = "A\r\n[Tool Call: x (ID: 1)]\r\n[Tool Call: y (ID: 2)]\r\nArguments: {}\r\nB"
    assert strip_downgraded_tool_text(text) == "A\r\nB"


def test_downgraded_unbalanced_arguments_run_to_end() -> None:
    assert strip_downgraded_tool_text('Hi [Tool Call: x]\nArguments: {"a": 1') == "Hi "


def test_downgraded_tool_result_section_removed() -> None:
    text = "Intro\n[Tool Result for ID toolu_1]\nfile contents\nmore\n[Tool Call: y (ID: 2)]"
    assert strip_downgraded_tool_text(text) == "Intro\n"
    assert extract_assistant_text(assistant(text)) == "Intro"


def test_final_tags_removed_content_kept() -> None:
    assert extract_assistant_text(assistant('<final lang="en">Yes</ final >')) == "Yes"


def test_repeated_paragraphs_collapsed() -> None:
    text = "Same para.\n\nSame   para.\n\n\nOther.\n\nSame para."
    assert extract_assistant_text(assistant(text)) == "Same para.\n\nOther.\n\nSame para."


def test_blocks_are_joined_by_a_newline_not_a_paragraph_break() -> None:
    # Blocks are joined with one newline, which is not a paragraph break.
    assert extract_assistant_text(assistant("Hi there", "Hi there")) == "Hi there\nHi there"
    assert extract_assistant_text(assistant("Hi there\n\n", "\n\nHi there")) == (
        "Hi there\nHi there"
    )
    assert extract_assistant_text(assistant("Hi there\n\nHi there")) == "Hi there"


def test_collapse_without_repeats_keeps_text_exactly() -> None:
    text = "One.\n\n\n\nTwo."
    assert collapse_repeated_paragraphs(text) == text


# --- provider errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Error: messages: roles must alternate between user and assistant",
            MESSAGE_ORDERING_REPLY,
        ),
        (
            '400 {"type":"error","error":{"type":"invalid_request_error",'
            '"message":"prompt is too long: 210000 tokens > 200000 maximum"}}',
            CONTEXT_OVERFLOW_REPLY,
        ),
        ("HTTP 429: Too Many Requests", RATE_LIMIT_REPLY),
        (
            '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            OVERLOADED_REPLY,
        ),
        ("error: request timed out after 600s", TIMEOUT_REPLY),
        (
            '{"error": {"message": "Invalid API key", "type": "auth"}}',
            "The model provider returned an error: Invalid API key",
        ),
    ],
)
def test_raw_provider_errors_are_rewritten(text: str, expected: str) -> None:
    assert rewrite_provider_error(text) == expected
    assert extract_assistant_text(assistant(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "The API said the rate limit was hit, so I waited and retried. It worked.",
        "A timeout happened earlier, but the build is green now.",
        "Error: could not find the file.",  # error-shaped, but not a known kind
        "Error: rate limit hit.\n\nHere is what I did instead: ...",  # a real answer
        "HTTP is a protocol.",
    ],
)
def test_other_texts_are_not_rewritten(text: str) -> None:
    assert rewrite_provider_error(text) is None
    assert extract_assistant_text(assistant(text)) == text


# --- strip_reasoning_tags_strict ----------------------------------------------------------


def test_strict_strip_without_tags_returns_text_unchanged() -> None:
    assert strip_reasoning_tags_strict("  plain  ") == "  plain  "


def test_strict_strip_trims_when_tags_found() -> None:
    assert strip_reasoning_tags_strict("  <think>x</think>  Hello  ") == "Hello"


def test_strict_strip_stray_close_and_reopen() -> None:
    assert strip_reasoning_tags_strict("a</think>b<think>c</think>d<think>e") == "abd"


def test_strict_strip_no_nesting() -> None:
    # The first closing tag ends thinking; the rest is text.
    assert strip_reasoning_tags_strict("<think>a<think>b</think>c</think>d") == "cd"


# --- promote_thinking_tags ----------------------------------------------------------------


def test_promotion_splits_text_and_thinking_in_order() -> None:
    message = assistant("<think> plan A </think>\n  Answer one <thought>\n</thought>tail")
    promote_thinking_tags(message)
    assert content_dicts(message) == [
        {"type": "thinking", "thinking": "plan A"},
        {"type": "text", "text": "Answer one "},
        {"type": "text", "text": "tail"},
    ]


def test_promotion_requires_leading_tag() -> None:
    message = assistant("Intro <think>x</think> rest")
    promote_thinking_tags(message)
    assert content_dicts(message) == [{"type": "text", "text": "Intro <think>x</think> rest"}]


def test_promotion_leaves_unclosed_tag_alone() -> None:
    text = "<think>a</think>Answer<think>still thinking"
    message = assistant(text)
    promote_thinking_tags(message)
    assert content_dicts(message) == [{"type": "text", "text": text}]


def test_promotion_needs_a_closing_tag() -> None:
    message = assistant("<think>never closed")
    promote_thinking_tags(message)
    assert content_dicts(message) == [{"type": "text", "text": "<think>never closed"}]


def test_promotion_with_empty_thinking_leaves_block() -> None:
    message = assistant("<think>  </think>Answer")
    promote_thinking_tags(message)
    assert content_dicts(message) == [{"type": "text", "text": "<think>  </think>Answer"}]


def test_promotion_skipped_when_message_has_thinking_block() -> None:
    message = Message(
        role="assistant",
        content=[ThinkingContent(thinking="real"), TextContent(text="<think>x</think>y")],
    )
    promote_thinking_tags(message)
    assert content_dicts(message) == [
        {"type": "thinking", "thinking": "real"},
        {"type": "text", "text": "<think>x</think>y"},
    ]


def test_promotion_keeps_other_blocks_and_handles_several() -> None:
    call = ToolCallContent(id="t1", name="exec", arguments={})
    message = Message(
        role="assistant",
        content=[
            TextContent(text="<think>one</think>A"),
            call,
            TextContent(text="plain"),
            TextContent(text=" <thinking>two</thinking>"),
        ],
    )
    promote_thinking_tags(message)
    assert content_dicts(message) == [
        {"type": "thinking", "thinking": "one"},
        {"type": "text", "text": "A"},
        {"type": "tool_call", "id": "t1", "name": "exec", "arguments": {}},
        {"type": "text", "text": "plain"},
        {"type": "thinking", "thinking": "two"},
    ]


def test_promotion_of_string_content() -> None:
    message = Message(role="assistant", content="<think>why</think>what")
    promote_thinking_tags(message)
    assert content_dicts(message) == [
        {"type": "thinking", "thinking": "why"},
        {"type": "text", "text": "what"},
    ]


def test_promotion_drops_inner_opening_tag() -> None:
    message = assistant("<think>a<think>b</think>c")
    promote_thinking_tags(message)
    assert content_dicts(message) == [
        {"type": "thinking", "thinking": "ab"},
        {"type": "text", "text": "c"},
    ]


# --- thinking extraction ------------------------------------------------------------------


def test_closed_form() -> None:
    assert extract_thinking_from_tags("<think>\n one \n</think>Answer") == "one"
    assert extract_thinking_from_tags("x<think>a</think>y<thought> b </thought>") == "a\nb"
    assert extract_thinking_from_tags("no tags") == ""


def test_closed_form_ignores_unclosed_section() -> None:
    assert extract_thinking_from_tags("<think>open") == ""
    assert extract_thinking_from_tags("<think>a</think><think>open") == "a"


def test_stream_form_open_section() -> None:
    assert extract_thinking_from_tags("<thinking>\nBecause", streaming=True) == "Because"
    assert extract_thinking_from_tags("Hi <think>", streaming=True) == ""


def test_stream_form_prefers_closed() -> None:
    text = "<think>done</think> text <think>more"
    assert extract_thinking_from_tags(text, streaming=True) == "done"


def test_stream_form_after_close() -> None:
    assert extract_thinking_from_tags("<think></think>Answer", streaming=True) == ""
    assert extract_thinking_from_tags("Answer", streaming=True) == ""


def test_stream_form_stray_close_before_open() -> None:
    assert extract_thinking_from_tags("</think>x<think>now", streaming=True) == "now"


def test_extract_thinking_prefers_blocks() -> None:
    message = Message(
        role="assistant",
        content=[
            ThinkingContent(thinking=" first "),
            TextContent(text="<think>tagged</think>Answer"),
            ThinkingContent(thinking="second\n"),
        ],
    )
    assert extract_thinking(message) == "first \nsecond"


def test_extract_thinking_from_text_tags() -> None:
    message = assistant("<think>a</think>A", "B", "<thought>b</thought>")
    assert extract_thinking(message) == "a\nb"
    assert extract_thinking(assistant("Just text")) == ""


def test_extract_thinking_blank_blocks_fall_back_to_tags() -> None:
    message = Message(
        role="assistant",
        content=[ThinkingContent(thinking="  "), TextContent(text="<think>t</think>x")],
    )
    assert extract_thinking(message) == "t"


# --- format_reasoning ---------------------------------------------------------------------


def test_format_reasoning_blank_lines_stay_empty() -> None:
    assert format_reasoning("A\n\n\nB") == "Reasoning:\n_A_\n\n\n_B_"
    assert format_reasoning("A\n   \nB") == "Reasoning:\n_A_\n\n_B_"


def test_format_reasoning_trims_lines() -> None:
    assert format_reasoning("  - step one  \r\n  - two") == "Reasoning:\n_- step one_\n_- two_"


def test_format_reasoning_blank() -> None:
    assert format_reasoning(" \n\t ") == ""


@given(st.text())
def test_format_reasoning_shape(text: str) -> None:
    formatted = format_reasoning(text)
    if not text.strip():
        assert formatted == ""
        return
    head, *lines = formatted.split("\n")
    assert head == "Reasoning:"
    assert lines
    for line in lines:
        assert line == "" or (line.startswith("_") and line.endswith("_") and len(line) > 2)
