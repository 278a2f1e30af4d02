"""botd's run as the ACP session updates an editor is sent, and an ACP prompt as botd's message.

Pure mapping, no connection: the adapter sends what these functions return.

A run's events become updates (``RunUpdates``, one per session):

* a tool call the model finished writing (the assistant message's end) is a ``tool_call``,
  ``pending``; its execution's start is ``in_progress``; its end ``completed`` or ``failed``
  (an error result: refused, timed out, denied), with the result's text as its content
  (``tool_call_written``, ``tool_call_ended``: a ``session/load``'s replay makes the same
  updates from the transcript, ``replay.py``);
* the model's thinking, as it streams, is ``agent_thought_chunk``s (``thought``; the run
  passes on its reasoning events only when ``agent.reasoning`` shows reasoning:
  ``botd.channels.base.thoughts_followed``);
* the answer's text is *not* taken from the events: it reaches the adapter as the blocks the
  subscriber cut and the delivery sent (so the block, directive and dedupe rules hold), and
  the adapter sends each as ``agent_message_chunk``s.

An ACP prompt (``prompt_parts``): text blocks are the message's text; a resource link is a
Markdown link line; an embedded text resource is its text in a fence under its URI; an image,
an audio clip and an embedded binary resource are files of the message (``Attachment``s whose
bytes the adapter writes to the state dir before the message is accepted: ``prompt_files``).

A run's outcome becomes the turn's stop reason (``stop_reason``): the runtime's own reasons
are ACP's (``botd.acp_mapping``, where the tool calls' kinds come from too); a run that
failed (``error``, ``exception``) ends with ``end_turn``, the failure having been told as a
message chunk (see ``FAILED_TEXT``).
"""

from __future__ import annotations

import base64
import binascii
import itertools
from dataclasses import dataclass, field
from typing import Any

from acp import (
    start_tool_call,
    text_block,
    tool_content,
    update_agent_thought_text,
    update_tool_call,
)
from acp.schema import (
    AgentThoughtChunk,
    AudioContentBlock,
    BlobResourceContents,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    ToolCallProgress,
    ToolCallStart,
)

from ...acp_mapping import shared_stop_reason, tool_kind
from ...chat import Attachment, AttachmentKind
from ...events import (
    AgentEvent,
    MessageEnd,
    MessageUpdate,
    ToolCallContent,
    ToolExecutionEnd,
    ToolExecutionStart,
)

__all__ = [
    "CANCEL_ID",
    "FAILED_TEXT",
    "STOP_ANSWERS",
    "PromptBlock",
    "PromptParts",
    "RunUpdates",
    "SessionUpdate",
    "prompt_parts",
    "stop_reason",
    "thought",
    "tool_call_ended",
    "tool_call_written",
]

PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)
SessionUpdate = ToolCallStart | ToolCallProgress | AgentThoughtChunk

STOP_ANSWERS = frozenset({"Stopped.", "Nothing was running."})
"""What ``/stop`` answers: not shown after a ``session/cancel``, whose turn ends by itself."""
CANCEL_ID = "cancel-"
"""How the id of the ``/stop`` a ``session/cancel`` sends begins (a replay leaves it out)."""
FAILED_TEXT = "The run failed before it could answer (botd's log says why)."
"""The message chunk a turn that failed without showing anything ends with."""


def stop_reason(outcome: str) -> StopReason:
    """The ACP stop reason of a run that ended with ``outcome`` (see the module docstring)."""
    return shared_stop_reason(outcome) or "end_turn"


def failed(outcome: str) -> bool:
    """Whether ``outcome`` is a run's failure rather than one of ACP's stop reasons."""
    return shared_stop_reason(outcome) is None


def _result_text(result: Any) -> str:
    """The text of a tool's result payload (``ToolOutput.payload``: text or content blocks)."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        content = result.get("content")
        if isinstance(content, list):
            texts = [c.get("text", "") for c in content if isinstance(c, dict)]
            return "\n".join(text for text in texts if text)
        text = result.get("text")
        if isinstance(text, str):
            return text
    return "" if result is None else str(result)


@dataclass
class RunUpdates:
    """The updates of one session's runs, from their events (see the module docstring)."""

    current_call: str | None = None
    """The tool call running now (an approval asked meanwhile is about it)."""
    _started: set[str] = field(default_factory=set)

    def of(self, event: AgentEvent) -> list[SessionUpdate]:
        """The updates ``event`` makes (often none)."""
        if isinstance(event, MessageEnd) and event.message.role == "assistant":
            return [self._pending(call) for call in event.message.tool_calls()]
        if isinstance(event, ToolExecutionStart):
            updates: list[SessionUpdate] = []
            if event.tool_call_id not in self._started:  # a resumed call: no pending seen
                call = ToolCallContent(
                    id=event.tool_call_id, name=event.tool_name, arguments=event.args
                )
                updates.append(self._pending(call))
            updates.append(update_tool_call(event.tool_call_id, status="in_progress"))
            self.current_call = event.tool_call_id
            return updates
        if isinstance(event, ToolExecutionEnd):
            self._started.discard(event.tool_call_id)
            if self.current_call == event.tool_call_id:
                self.current_call = None
            return [tool_call_ended(event.tool_call_id, event.result, is_error=event.is_error)]
        if (
            isinstance(event, MessageUpdate)
            and event.assistant_event.type == "thinking_delta"
            and event.assistant_event.delta
        ):
            return [thought(event.assistant_event.delta)]
        return []

    def _pending(self, call: ToolCallContent) -> ToolCallStart:
        self._started.add(call.id)
        return tool_call_written(call)


def tool_call_written(call: ToolCallContent) -> ToolCallStart:
    """The ``tool_call`` of a call the model wrote: ``pending``, titled by the tool's name,
    its kind read off that name, its arguments as the raw input."""
    return start_tool_call(
        call.id,
        call.name,
        kind=tool_kind(call.name),
        status="pending",
        raw_input=call.arguments,
    )


def tool_call_ended(call_id: str, result: Any, *, is_error: bool) -> ToolCallProgress:
    """The last ``tool_call_update`` of call ``call_id``: ``completed``, or ``failed`` for an
    error result, with the text of ``result`` (a ``ToolOutput.payload``) as its content."""
    text = _result_text(result)
    return update_tool_call(
        call_id,
        status="failed" if is_error else "completed",
        content=[tool_content(text_block(text))] if text else None,
    )


def thought(text: str) -> AgentThoughtChunk:
    """An ``agent_thought_chunk`` saying ``text`` of the model's thinking."""
    return update_agent_thought_text(text)


@dataclass(frozen=True, slots=True)
class PromptFile:
    """A file of a prompt: how the message announces it, and its bytes."""

    attachment: Attachment
    data: bytes


@dataclass(frozen=True, slots=True)
class PromptParts:
    """An ACP prompt as botd's message: its text and its files."""

    text: str
    files: tuple[PromptFile, ...] = ()


_file_numbers = itertools.count(1)


def _file(kind: AttachmentKind, data: str, mime_type: str, name: str) -> PromptFile:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the {kind} {name} is not valid base64".replace("  ", " ")) from None
    ref = f"acp-file-{next(_file_numbers)}"
    return PromptFile(Attachment(kind, ref, name, mime_type, len(raw)), raw)


def _name_of(uri: str) -> str:
    return uri.rstrip("/").rpartition("/")[2] or uri


def prompt_parts(blocks: list[PromptBlock]) -> PromptParts:
    """``blocks`` as botd's message (see the module docstring); raises ``ValueError`` for a
    block whose data is not base64."""
    texts: list[str] = []
    files: list[PromptFile] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            texts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            texts.append(f"[{block.title or block.name}]({block.uri})")
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                texts.append(f"{resource.uri}:\n```\n{resource.text}\n```")
            elif isinstance(resource, BlobResourceContents):
                mime = resource.mime_type or "application/octet-stream"
                kind: AttachmentKind = "image" if mime.startswith("image/") else "document"
                files.append(_file(kind, resource.blob, mime, _name_of(resource.uri)))
        elif isinstance(block, ImageContentBlock):
            name = _name_of(block.uri) if block.uri else ""
            files.append(_file("image", block.data, block.mime_type, name))
        elif isinstance(block, AudioContentBlock):
            files.append(_file("audio", block.data, block.mime_type, ""))
    return PromptParts("\n\n".join(text for text in texts if text), tuple(files))
