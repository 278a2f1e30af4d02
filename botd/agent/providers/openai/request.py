"""The chat-completions request: botd's transcript and tools in the wire format."""

from __future__ import annotations

import json
import re
from typing import Any

from ....events import ImageContent, Message, TextContent, ToolCallContent
from ...types import ModelRequest, ToolDefinition


def build_request_body(request: ModelRequest) -> dict[str, Any]:
    """The JSON body of a streamed chat-completions request."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": build_messages(request.system, request.messages),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.max_tokens:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [_tool_entry(tool) for tool in request.tools]
    return body


def build_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """botd's transcript as chat-completions messages (thinking is never sent back)."""
    answered = {m.tool_call_id for m in messages if m.role == "tool_result" and m.tool_call_id}
    entries: list[dict[str, Any]] = []
    if system:
        entries.append({"role": "system", "content": system})
    # Tool messages carry text only in this API: the images of a run of tool results follow
    # it as one user message (none may come between an assistant's calls and their results).
    images: list[dict[str, Any]] = []
    for message in messages:
        if message.role != "tool_result" and images:
            entries.append({"role": "user", "content": images})
            images = []
        if message.role == "user":
            entries.append({"role": "user", "content": _user_content(message)})
        elif message.role == "assistant":
            entry = _assistant_entry(message, answered)
            if entry is not None:
                entries.append(entry)
        else:
            entries.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id or "",
                    "content": _tool_result_text(message),
                }
            )
            images.extend(_tool_result_images(message))
    if images:
        entries.append({"role": "user", "content": images})
    return entries


def _tool_entry(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    blocks = message.blocks()
    if not any(isinstance(block, ImageContent) for block in blocks):
        # Plain text is what every compatible server accepts.
        return "".join(block.text for block in blocks if isinstance(block, TextContent))
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            url = f"data:{block.mime_type};base64,{block.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _assistant_entry(message: Message, answered: set[str]) -> dict[str, Any] | None:
    blocks = message.blocks()
    text = "".join(block.text for block in blocks if isinstance(block, TextContent))
    # A call without a result (a run cut short) would make the server refuse the whole
    # conversation, so such calls are left out.
    tool_calls = [
        {
            "id": block.id,
            "type": "function",
            "function": {"name": block.name, "arguments": json.dumps(block.arguments)},
        }
        for block in blocks
        if isinstance(block, ToolCallContent) and block.id in answered
    ]
    if not text and not tool_calls:
        return None
    entry: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        entry["tool_calls"] = tool_calls
    return entry


def _tool_result_text(message: Message) -> str:
    pieces: list[str] = []
    for block in message.blocks():
        if isinstance(block, TextContent):
            pieces.append(block.text)
        elif isinstance(block, ImageContent):
            pieces.append(f"[image {block.mime_type}: shown in the next message]")
    return "\n".join(pieces)


def _tool_result_images(message: Message) -> list[dict[str, Any]]:
    """The images of a tool result as user-message parts, each after a line naming the call."""
    parts: list[dict[str, Any]] = []
    for block in message.blocks():
        if isinstance(block, ImageContent):
            if not parts:
                name = message.tool_name or "a tool"
                parts.append({"type": "text", "text": f"Image(s) returned by {name}:"})
            url = f"data:{block.mime_type};base64,{block.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


_PLACE = re.compile(r"messages\[(\d+)\]\.content\[(\d+)\]")
"""A place in the request as errors name it: ``messages[1].content[1].image_url``."""


def image_data_at(body: dict[str, Any], text: str) -> str | None:
    """The base64 data of the image at the place ``text`` names in the request ``body``,
    if one is there."""
    located = _PLACE.search(text)
    if located is None:
        return None
    try:
        part = body["messages"][int(located[1])]["content"][int(located[2])]
    except (IndexError, KeyError, TypeError):
        return None
    return _data_of(part)


def image_data(body: dict[str, Any]) -> list[str]:
    """The base64 data of every image of the request ``body``."""
    found: list[str] = []
    for entry in body.get("messages", []):
        content = entry.get("content") if isinstance(entry, dict) else None
        for part in content if isinstance(content, list) else ():
            data = _data_of(part)
            if data is not None:
                found.append(data)
    return found


def _data_of(part: Any) -> str | None:
    """The base64 data of an ``image_url`` part holding a data URL (what botd sends)."""
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return None
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    _, separator, data = url.partition(";base64,")
    return data if separator and data else None
