"""The ACP channel's mapping (``botd.channels.acp.updates``), with the Python SDK's schema
types: a run's events as session updates, an ACP prompt as botd's message, a run's outcome
as the turn's stop reason."""

from __future__ import annotations

import base64

import pytest
from acp.schema import (
    AgentThoughtChunk,
    BlobResourceContents,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
    ToolCallProgress,
    ToolCallStart,
)

from botd.acp_mapping import tool_kind
from botd.channels.acp.updates import RunUpdates, prompt_parts, stop_reason
from botd.events import (
    AssistantStreamEvent,
    Message,
    MessageEnd,
    MessageUpdate,
    TextContent,
    ToolCallContent,
    ToolExecutionEnd,
    ToolExecutionStart,
)


def test_a_tool_call_goes_pending_in_progress_then_completed_or_failed() -> None:
    updates = RunUpdates()
    calls = [ToolCallContent(id="c1", name="web_fetch", arguments={"url": "http://x"})]
    calls.append(ToolCallContent(id="c2", name="schedule", arguments={}))
    written = Message(role="assistant", content=[TextContent(text="Let me look."), *calls])
    [first, second] = updates.of(MessageEnd(message=written))
    assert isinstance(first, ToolCallStart) and isinstance(second, ToolCallStart)
    assert (first.tool_call_id, first.status, first.kind) == ("c1", "pending", "fetch")
    assert first.raw_input == {"url": "http://x"}

    [running] = updates.of(ToolExecutionStart(tool_call_id="c1", tool_name="web_fetch", args={}))
    assert isinstance(running, ToolCallProgress) and running.status == "in_progress"
    assert updates.current_call == "c1"
    end = ToolExecutionEnd(tool_call_id="c1", tool_name="web_fetch", result="page", is_error=False)
    [done] = updates.of(end)
    assert isinstance(done, ToolCallProgress) and done.status == "completed"
    assert done.content is not None and done.content[0].content.text == "page"
    assert updates.current_call is None

    updates.of(ToolExecutionStart(tool_call_id="c2", tool_name="schedule", args={}))
    refused = {"content": [{"type": "text", "text": "denied"}]}
    end = ToolExecutionEnd(tool_call_id="c2", tool_name="schedule", result=refused, is_error=True)
    [failed] = updates.of(end)
    assert isinstance(failed, ToolCallProgress) and failed.status == "failed"


def test_a_call_resumed_after_a_restart_is_announced_before_it_runs() -> None:
    start = ToolExecutionStart(tool_call_id="c9", tool_name="read_file", args={"path": "a"})
    announced, running = RunUpdates().of(start)
    assert isinstance(announced, ToolCallStart) and announced.status == "pending"
    assert announced.kind == "read"
    assert isinstance(running, ToolCallProgress) and running.status == "in_progress"


def test_thinking_streams_as_thoughts_and_the_answer_text_not_at_all() -> None:
    updates = RunUpdates()
    message = Message(role="assistant")
    thought = AssistantStreamEvent(type="thinking_delta", delta="hmm")
    [chunk] = updates.of(MessageUpdate(message=message, assistant_event=thought))
    assert isinstance(chunk, AgentThoughtChunk) and chunk.content.text == "hmm"
    said = AssistantStreamEvent(type="text_delta", delta="the answer")
    assert updates.of(MessageUpdate(message=message, assistant_event=said)) == []


def test_the_runtimes_stop_reasons_are_acps_and_a_failure_ends_the_turn() -> None:
    for reason in ("end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"):
        assert stop_reason(reason) == reason
    assert stop_reason("error") == "end_turn"
    assert stop_reason("exception") == "end_turn"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("web_fetch", "fetch"),
        ("mcp__files__read_file", "read"),
        ("schedule", "other"),
        ("run_shell", "execute"),
    ],
)
def test_a_tools_kind_is_read_off_its_name(name: str, kind: str) -> None:
    assert tool_kind(name) == kind


def test_a_prompts_blocks_become_one_message_with_its_files() -> None:
    image = base64.b64encode(b"\x89PNG fake").decode()
    blob = base64.b64encode(b"%PDF-1.7").decode()
    parts = prompt_parts(
        [
            TextContentBlock(type="text", text="Look at these."),
            ImageContentBlock(type="image", mime_type="image/png", data=image),
            ResourceContentBlock(type="resource_link", name="spec", uri="https://x/spec"),
            EmbeddedResourceContentBlock(
                type="resource",
                resource=TextResourceContents(uri="file:///a.txt", text="alpha"),
            ),
            EmbeddedResourceContentBlock(
                type="resource",
                resource=BlobResourceContents(
                    uri="file:///docs/b.pdf", blob=blob, mime_type="application/pdf"
                ),
            ),
        ]
    )
    assert parts.text == (
        "Look at these.\n\n[spec](https://x/spec)\n\nfile:///a.txt:\n```\nalpha\n```"
    )
    [picture, document] = parts.files
    assert (picture.attachment.kind, picture.attachment.mime_type) == ("image", "image/png")
    assert picture.data == b"\x89PNG fake"
    assert (document.attachment.kind, document.attachment.name) == ("document", "b.pdf")
    assert document.attachment.size == len(b"%PDF-1.7")
    assert picture.attachment.ref != document.attachment.ref


def test_an_image_that_is_not_base64_is_refused() -> None:
    with pytest.raises(ValueError, match="not valid base64"):
        prompt_parts([ImageContentBlock(type="image", mime_type="image/png", data="@@@")])
