"""Reading the stream: server-sent events in, botd's stream events and message out."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from ....events import (
    AssistantStreamEvent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)
from ...types import StopReason

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

_LEGACY_FUNCTION_CALL = "function_call"
"""Tool-call key for the pre-``tool_calls`` ``delta.function_call`` form."""


# --- server-sent events ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str
    data: str


class SSEDecoder:
    """Lines of a ``text/event-stream`` in, complete events out (on each blank line)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SSEEvent | None:
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None  # a comment: servers send these as keepalives
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # ``id``, ``retry`` and unknown fields mean nothing for a one-shot stream.
        return None

    def flush(self) -> SSEEvent | None:
        """The pending event, if any data arrived since the last one."""
        event = SSEEvent(self._event or "message", "\n".join(self._data)) if self._data else None
        self._event = ""
        self._data = []
        return event


# --- assembling the message ------------------------------------------------------------------

_BlockKind = Literal["text", "thinking", "tool_call"]
_EVENT_PREFIX: dict[_BlockKind, str] = {
    "text": "text",
    "thinking": "thinking",
    "tool_call": "toolcall",
}


@dataclass(slots=True)
class _Block:
    kind: _BlockKind
    parts: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    finished: bool = False

    @property
    def text(self) -> str:
        return "".join(self.parts)


class Assembly:
    """The assistant message being streamed: its blocks, and the events that describe them."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.blocks: list[_Block] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.failed = False
        self._open: int | None = None
        self._tool_blocks: dict[int | str, int] = {}
        self._last_tool_key: int | str | None = None

    @property
    def started(self) -> bool:
        """Whether any event was produced (after that, a failure is not retried)."""
        return bool(self.blocks)

    def apply(self, chunk: dict[str, Any], *, whole_reply: bool) -> list[AssistantStreamEvent]:
        """Events for one chunk; ``whole_reply`` reads ``choices[0].message`` instead of a delta."""
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choice = first_choice(chunk.get("choices"))
        if choice is None:
            return []
        delta = choice.get("message" if whole_reply else "delta")
        events: list[AssistantStreamEvent] = []
        if isinstance(delta, dict):
            events.extend(self._apply_delta(delta, whole_reply=whole_reply))
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        return events

    def _apply_delta(
        self, delta: dict[str, Any], *, whole_reply: bool
    ) -> list[AssistantStreamEvent]:
        events: list[AssistantStreamEvent] = []
        # Some servers send both spellings with the same text: take one.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.extend(self._append_text("thinking", reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.extend(self._append_text("text", content))
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for position, call in enumerate(tool_calls):
                if isinstance(call, dict):
                    if whole_reply and "index" not in call:
                        call = {**call, "index": position}
                    events.extend(self._apply_tool_call(call))
        function_call = delta.get("function_call")
        if isinstance(function_call, dict):
            legacy = {"index": _LEGACY_FUNCTION_CALL, "function": function_call}
            events.extend(self._apply_tool_call(legacy))
        return events

    def _append_text(self, kind: _BlockKind, text: str) -> list[AssistantStreamEvent]:
        events: list[AssistantStreamEvent] = []
        if self._open is None or self.blocks[self._open].kind != kind:
            events.extend(self.close_open_block())
            events.append(self._open_block(_Block(kind)))
        assert self._open is not None
        self.blocks[self._open].parts.append(text)
        events.append(_event(f"{kind}_delta", self._open, delta=text))
        return events

    def _apply_tool_call(self, call: dict[str, Any]) -> list[AssistantStreamEvent]:
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        call_id = _str(call.get("id"))
        name = _str(function.get("name"))
        key = self._tool_key(call, call_id)
        events: list[AssistantStreamEvent] = []
        index = self._tool_blocks.get(key)
        if index is None:
            events.extend(self.close_open_block())
            block = _Block(
                "tool_call", call_id=call_id or f"call_{uuid.uuid4().hex[:24]}", name=name
            )
            events.append(self._open_block(block, content=name))
            index = self._tool_blocks[key] = len(self.blocks) - 1
        else:
            block = self.blocks[index]
            block.name = block.name or name
        self._last_tool_key = key

        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a few servers send the arguments already decoded
            arguments = json.dumps(arguments)
        if isinstance(arguments, str) and arguments:
            block.parts.append(arguments)
            events.append(_event("toolcall_delta", index, delta=arguments))
        return events

    def _tool_key(self, call: dict[str, Any], call_id: str) -> int | str:
        """Which tool call a fragment belongs to: by ``index``, else by ``id``, else the last."""
        index = call.get("index")
        if isinstance(index, int | str) and not isinstance(index, bool):
            return index
        if call_id:
            return f"id:{call_id}"
        return self._last_tool_key if self._last_tool_key is not None else 0

    def _open_block(self, block: _Block, content: str | None = None) -> AssistantStreamEvent:
        self.blocks.append(block)
        self._open = len(self.blocks) - 1
        return _event(f"{_EVENT_PREFIX[block.kind]}_start", self._open, content=content)

    def close_open_block(self) -> list[AssistantStreamEvent]:
        """The end event of the block still open, if one is."""
        if self._open is None:
            return []
        index, self._open = self._open, None
        block = self.blocks[index]
        block.finished = True
        return [_event(f"{_EVENT_PREFIX[block.kind]}_end", index, content=block.text)]

    def close_after_failure(self) -> list[AssistantStreamEvent]:
        """Like ``close_open_block``, except that a tool call cut off mid-way gets no end."""
        if self._open is not None and self.blocks[self._open].kind == "tool_call":
            self._open = None
            return []
        return self.close_open_block()

    def stop_reason(self) -> StopReason:
        mapped = _FINISH_REASONS.get(self.finish_reason or "")
        has_tool_calls = any(block.kind == "tool_call" for block in self.blocks)
        # Some servers say "stop" (or nothing) after tool calls; the calls still need running.
        if has_tool_calls and mapped in (None, "end_turn"):
            return "tool_use"
        return mapped or "end_turn"

    def message(self, stop_reason: StopReason, error_message: str | None = None) -> Message:
        content: list[TextContent | ThinkingContent | ToolCallContent] = []
        for block in self.blocks:
            if block.kind == "tool_call" and stop_reason == "error" and not block.finished:
                continue  # arguments cut off: it must not look runnable
            if block.kind == "text":
                content.append(TextContent(text=block.text))
            elif block.kind == "thinking":
                content.append(ThinkingContent(thinking=block.text))
            else:
                content.append(
                    ToolCallContent(
                        id=block.call_id, name=block.name, arguments=_parse_arguments(block.text)
                    )
                )
        return Message(
            role="assistant",
            content=list(content),
            stop_reason=stop_reason,
            error_message=error_message,
            usage=_usage(self.usage),
            model=self.model,
            provider="openai",
            timestamp=int(time.time() * 1000),
        )


def _event(
    kind: str, index: int, *, delta: str | None = None, content: str | None = None
) -> AssistantStreamEvent:
    return AssistantStreamEvent.model_validate(
        {"type": kind, "content_index": index, "delta": delta, "content": content}
    )


def first_choice(choices: Any) -> dict[str, Any] | None:
    """The choice with index 0 (botd never asks for more than one)."""
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


def _parse_arguments(text: str) -> dict[str, Any]:
    """A tool call's arguments; text that is not a JSON object is kept under ``_raw``."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def _usage(raw: dict[str, Any] | None) -> dict[str, Any]:
    """Token counts in botd's names (zeros when the server reported none)."""
    raw = raw or {}
    usage: dict[str, Any] = {
        "input_tokens": _int(raw.get("prompt_tokens")),
        "output_tokens": _int(raw.get("completion_tokens")),
    }
    details = raw.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        usage["cache_read_input_tokens"] = details["cached_tokens"]
    return usage


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
