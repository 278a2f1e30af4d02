"""Agent events and messages: what the runtime emits for one run, and their JSON form.

Each event is a pydantic model told apart by its ``type`` field, with snake_case keys. One
event is one JSON object; a recorded run is one object per line (JSONL).
Unknown event types are not errors: ``parse_event`` returns None for them so a reader can
skip them. A line that is not an object, or an event missing a required key, raises
``EventError`` with a message a person can act on.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .chat import storable


class _Model(BaseModel):
    # Unknown keys are tolerated (newer runtimes may add some) and dropped.
    model_config = ConfigDict(extra="ignore", frozen=False)


# --- content blocks -----------------------------------------------------------------------


class TextContent(_Model):
    type: Literal["text"] = "text"
    text: str


class ThinkingContent(_Model):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class ToolCallContent(_Model):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ImageContent(_Model):
    type: Literal["image"] = "image"
    mime_type: str
    data: str


ContentBlock = Annotated[
    TextContent | ThinkingContent | ToolCallContent | ImageContent,
    Field(discriminator="type"),
]

Role = Literal["user", "assistant", "tool_result"]


class Message(_Model):
    """A user, assistant or tool-result message. ``content`` may be a plain string for users."""

    role: Role
    content: list[ContentBlock] | str = Field(default_factory=list)
    stop_reason: str | None = None
    error_message: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    provider: str | None = None
    timestamp: int | float | str | None = None
    # tool results only
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool | None = None

    def blocks(self) -> list[TextContent | ThinkingContent | ToolCallContent | ImageContent]:
        """The content as blocks (a plain string is one text block)."""
        if isinstance(self.content, str):
            return [TextContent(text=self.content)] if self.content else []
        return list(self.content)

    def tool_calls(self) -> list[ToolCallContent]:
        """The tool calls among the blocks, in order."""
        if isinstance(self.content, str):
            return []
        return [block for block in self.content if isinstance(block, ToolCallContent)]


AssistantEventType = Literal[
    "start",
    "text_start",
    "text_delta",
    "text_end",
    "thinking_start",
    "thinking_delta",
    "thinking_end",
    "toolcall_start",
    "toolcall_delta",
    "toolcall_end",
    "done",
    "error",
]


class AssistantStreamEvent(_Model):
    """One event of the model's stream, carried by ``message_update``."""

    type: AssistantEventType
    content_index: int | None = None
    delta: str | None = None
    content: str | None = None


# --- agent events -------------------------------------------------------------------------


class AgentStart(_Model):
    type: Literal["agent_start"] = "agent_start"


class AgentEnd(_Model):
    type: Literal["agent_end"] = "agent_end"
    messages: list[Message] | None = None


class TurnStart(_Model):
    type: Literal["turn_start"] = "turn_start"


class TurnEnd(_Model):
    type: Literal["turn_end"] = "turn_end"
    message: Message | None = None
    tool_results: list[Message] | None = None


class MessageStart(_Model):
    type: Literal["message_start"] = "message_start"
    message: Message


class MessageUpdate(_Model):
    type: Literal["message_update"] = "message_update"
    message: Message
    assistant_event: AssistantStreamEvent


class MessageEnd(_Model):
    type: Literal["message_end"] = "message_end"
    message: Message


class ToolExecutionStart(_Model):
    type: Literal["tool_execution_start"] = "tool_execution_start"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]


class ToolExecutionUpdate(_Model):
    type: Literal["tool_execution_update"] = "tool_execution_update"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    partial_result: Any


class ToolExecutionEnd(_Model):
    type: Literal["tool_execution_end"] = "tool_execution_end"
    tool_call_id: str
    tool_name: str
    result: Any
    is_error: bool


class AutoCompactionStart(_Model):
    type: Literal["auto_compaction_start"] = "auto_compaction_start"


class AutoCompactionEnd(_Model):
    type: Literal["auto_compaction_end"] = "auto_compaction_end"
    will_retry: bool


AgentEvent = Annotated[
    AgentStart
    | AgentEnd
    | TurnStart
    | TurnEnd
    | MessageStart
    | MessageUpdate
    | MessageEnd
    | ToolExecutionStart
    | ToolExecutionUpdate
    | ToolExecutionEnd
    | AutoCompactionStart
    | AutoCompactionEnd,
    Field(discriminator="type"),
]

EVENT_TYPES: frozenset[str] = frozenset(
    {
        "agent_start",
        "agent_end",
        "turn_start",
        "turn_end",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_end",
        "auto_compaction_start",
        "auto_compaction_end",
    }
)

_EVENT_ADAPTER: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)


class EventError(ValueError):
    """An event that cannot be read; the message says what is wrong with it."""


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        # Drop the union tag pydantic puts first in the location ("message_update").
        loc = [str(p) for p in item["loc"]]
        if loc and loc[0] in EVENT_TYPES:
            loc = loc[1:]
        where = ".".join(loc)
        what = "missing required key" if item["type"] == "missing" else item["msg"]
        parts.append(f"{where}: {what}" if where else what)
    return "; ".join(parts)


def parse_event(data: object) -> AgentEvent | None:
    """An event from its decoded JSON; None for an event type botd does not know."""
    if not isinstance(data, dict):
        raise EventError(f"expected a JSON object, got {type(data).__name__}")
    event_type = data.get("type")
    if not isinstance(event_type, str):
        raise EventError("missing required key 'type'")
    if event_type not in EVENT_TYPES:
        return None
    try:
        return _EVENT_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise EventError(f"{event_type}: {_describe(exc)}") from None


def parse_event_line(line: str) -> AgentEvent | None:
    """An event from one JSONL line; None for an unknown event type."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EventError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    return parse_event(data)


def event_to_dict(event: AgentEvent) -> dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=True)


def event_to_json(event: AgentEvent) -> str:
    return json.dumps(event_to_dict(event), ensure_ascii=False)


def recording_json(event: AgentEvent) -> str:
    """``event`` as a run recording keeps it: the JSON of ``event_to_json`` with each
    image's base64 data left out (an empty ``data`` and a note of its size), so a recording
    stays small and holds no picture a user sent. Replaying needs none of them."""
    return json.dumps(_without_image_data(event_to_dict(event)), ensure_ascii=False)


def _without_image_data(value: Any) -> Any:
    if isinstance(value, dict):
        data = value.get("data")
        if value.get("type") == "image" and isinstance(data, str) and data:
            return {**value, "data": "", "omitted": f"{len(data)} characters of base64"}
        return {key: _without_image_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_image_data(item) for item in value]
    return value


def storable_data(value: Any) -> Any:
    """Decoded JSON ``value`` with every string (keys too) made ``storable``."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable_data(k): storable_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable_data(v) for v in value]
    return value


def storable_message(message: Message) -> Message:
    """``message`` with every text in it ``storable``: itself when it was already."""
    data = message.model_dump(mode="json", exclude_none=True)
    clean = storable_data(data)
    return message if clean == data else Message.model_validate(clean)


def storable_event(event: AssistantStreamEvent) -> AssistantStreamEvent:
    """``event`` with its text ``storable`` (a model may stream half a surrogate pair)."""
    delta = None if event.delta is None else storable(event.delta)
    content = None if event.content is None else storable(event.content)
    if delta is event.delta and content is event.content:
        return event
    return event.model_copy(update={"delta": delta, "content": content})
