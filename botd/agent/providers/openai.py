"""A provider for any OpenAI-compatible chat-completions endpoint, over httpx with SSE streaming.

Ollama, vLLM, OpenRouter, LM Studio and OpenAI itself all speak ``POST {base_url}/chat/completions``
with ``stream: true``. This module maps botd's messages and tools to that wire format, reads the
server-sent events itself (no SDK), and turns the chunks into the provider stream described in
``botd.agent.types``:

- ``delta.content`` becomes ``text_start`` / ``text_delta`` / ``text_end``;
- ``delta.reasoning_content`` (or ``delta.reasoning``) becomes ``thinking_*`` events;
- ``delta.tool_calls[i]`` becomes ``toolcall_start`` (``content`` = tool name),
  ``toolcall_delta`` (``delta`` = a fragment of the JSON arguments) and ``toolcall_end``
  (``content`` = the whole arguments text);
- ``*_end`` events carry the block's complete text in ``content``; ``content_index`` is the
  block's position in the final message's ``content``.

The stream always ends with one ``AssistantResult``. Failures (an HTTP error, an error chunk in the
stream, a dropped connection) end it with ``stop_reason="error"`` and the server's own words in
``error_message``, keeping whatever had already streamed (except a tool call whose arguments were
cut off, which gets no ``toolcall_end`` and is left out). Requests that fail before anything was
streamed are retried on 429, 5xx and connection errors. Only cancellation is raised.

``ModelRequest.thinking_budget`` is not sent: the compatible servers disagree on how to ask for
reasoning, and those that reason do so by default (the reasoning they stream is still read).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from ...events import (
    AssistantStreamEvent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)
from ...retry import Backoff, retry_after, retry_wait
from ..types import AssistantResult, ModelRequest, ProviderItem, StopReason, ToolSpec
from . import retry_backoff

log = logging.getLogger(__name__)

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

"""Seconds before the first retry when the server gives no retry-after; doubles each time."""

_DETAIL_LIMIT = 1000
"""Characters of a non-JSON error body kept in an error message."""

_LEGACY_FUNCTION_CALL = "function_call"
"""Tool-call key for the pre-``tool_calls`` ``delta.function_call`` form."""


class OpenAIProvider:
    """A ``Provider`` for an OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        timeout: float = 600.0,
        extra_headers: dict[str, str] | None = None,
        name: str = "openai",
    ) -> None:
        self.name = name
        self._base_url = base_url.rstrip("/")
        self._url = f"{self._base_url}/chat/completions"
        self._max_retries = max(0, max_retries)
        self._max_retry_wait = max(0.0, max_retry_wait)
        headers = {"Accept": "text/event-stream", **(extra_headers or {})}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # The read timeout is the longest silence allowed between two chunks of a stream.
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0))
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        body = build_request_body(request)
        attempt = 0
        backoff = retry_backoff()
        while True:
            assembly = _Assembly(model=request.model)
            failure = ""
            wait: float | None = None
            finished = False
            try:
                async with self._client.stream("POST", self._url, json=body) as response:
                    if response.is_success:
                        async for item in self._read_stream(response, assembly):
                            finished = isinstance(item, AssistantResult)
                            yield item
                        return
                    detail = _error_detail(await response.aread(), response.reason_phrase)
                    failure = f"HTTP {response.status_code}: {detail}"
                    if _is_retryable(response.status_code) and attempt < self._max_retries:
                        wait = self._retry_wait(backoff, response.headers)
            except httpx.TransportError as exc:
                if finished:  # closing the response failed after the result: nothing to add
                    return
                failure = self._describe_transport_error(exc, mid_stream=assembly.started)
                if not assembly.started and attempt < self._max_retries:
                    wait = self._retry_wait(backoff, None)
            except Exception as exc:
                if finished:
                    return
                # A surprise (a bug, an odd reply) must still end the turn with a result.
                log.exception("%s: unexpected failure while streaming", self.name)
                failure = f"unexpected error: {type(exc).__name__}: {exc}"

            if wait is not None:
                attempt += 1
                log.warning(
                    "%s: %s; retry %d of %d in %.1fs",
                    self.name,
                    failure,
                    attempt,
                    self._max_retries,
                    wait,
                )
                await asyncio.sleep(wait)
                continue
            if attempt:
                failure = f"{failure} (gave up after {attempt} retries)"
            log.warning("%s: request failed: %s", self.name, failure)
            for event in assembly.close_after_failure():
                yield event
            yield AssistantResult(assembly.message("error", failure))
            return

    async def _read_stream(
        self, response: httpx.Response, assembly: _Assembly
    ) -> AsyncIterator[ProviderItem]:
        """Events for one successful response, ending with its ``AssistantResult``."""
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            # A server that ignored ``stream: true`` (or reports an error with a 200).
            payload = _parse_json_body(await response.aread())
            if not _is_error_payload(payload) and _first_choice(payload.get("choices")) is None:
                payload = {"error": f"a reply without choices: {_shorten(str(payload), 200)}"}
            async for item in self._apply_payload(payload, assembly, whole_reply=True):
                yield item
            if assembly.failed:
                return
        else:
            decoder = _SSEDecoder()
            saw_done = False
            async for line in response.aiter_lines():
                sse = decoder.feed(line)
                if sse is None:
                    continue
                if sse.data.strip() == "[DONE]":
                    saw_done = True
                    break
                async for item in self._apply_sse(sse, assembly):
                    yield item
                if assembly.failed:
                    return
            if not saw_done and (sse := decoder.flush()) is not None:
                # Data after the last blank line: lenient servers end the stream that way.
                async for item in self._apply_sse(sse, assembly):
                    yield item
                if assembly.failed:
                    return
            if not saw_done and assembly.finish_reason is None:
                failure = "the stream ended before the model finished (no finish_reason)"
                log.warning("%s: %s", self.name, failure)
                for event in assembly.close_after_failure():
                    yield event
                yield AssistantResult(assembly.message("error", failure))
                return
        for event in assembly.close_open_block():
            yield event
        yield AssistantResult(assembly.message(assembly.stop_reason()))

    async def _apply_sse(self, sse: _SSEEvent, assembly: _Assembly) -> AsyncIterator[ProviderItem]:
        try:
            payload: Any = json.loads(sse.data)
        except ValueError:
            payload = None
        if sse.event == "error" and not _is_error_payload(payload):
            payload = {"error": payload if payload is not None else sse.data}
        if not isinstance(payload, dict):
            payload = {"error": f"unreadable stream data: {_shorten(sse.data, 200)}"}
        async for item in self._apply_payload(payload, assembly, whole_reply=False):
            yield item

    async def _apply_payload(
        self, payload: Any, assembly: _Assembly, *, whole_reply: bool
    ) -> AsyncIterator[ProviderItem]:
        """Feed one decoded chunk (or a whole non-streamed reply); an error chunk ends the turn."""
        if _is_error_payload(payload):
            failure = _error_text(payload) or "the server reported an error"
            log.warning("%s: error in the stream: %s", self.name, failure)
            assembly.failed = True
            for event in assembly.close_after_failure():
                yield event
            yield AssistantResult(assembly.message("error", failure))
            return
        if not isinstance(payload, dict):
            return
        for event in assembly.apply(payload, whole_reply=whole_reply):
            yield event

    def _retry_wait(self, backoff: Backoff, headers: httpx.Headers | None) -> float:
        return retry_wait(backoff, retry_after(headers), max_wait=self._max_retry_wait)

    def _describe_transport_error(self, exc: httpx.TransportError, *, mid_stream: bool) -> str:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.ConnectError):
            return f"cannot connect to {self._base_url}: {reason}"
        if isinstance(exc, httpx.TimeoutException):
            return f"timed out waiting for {self._base_url} ({type(exc).__name__})"
        if mid_stream:
            return f"the connection was lost mid-stream: {reason}"
        return f"the connection to {self._base_url} failed: {reason}"


# --- request -------------------------------------------------------------------------------


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
    for message in messages:
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
    return entries


def _tool_entry(tool: ToolSpec) -> dict[str, Any]:
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
            # Tool messages carry text only in this API.
            pieces.append(f"[image omitted: {block.mime_type}]")
    return "\n".join(pieces)


# --- server-sent events ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _SSEEvent:
    event: str
    data: str


class _SSEDecoder:
    """Lines of a ``text/event-stream`` in, complete events out (on each blank line)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> _SSEEvent | None:
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

    def flush(self) -> _SSEEvent | None:
        """The pending event, if any data arrived since the last one."""
        event = _SSEEvent(self._event or "message", "\n".join(self._data)) if self._data else None
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


class _Assembly:
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
        choice = _first_choice(chunk.get("choices"))
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


def _first_choice(choices: Any) -> dict[str, Any] | None:
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


# --- errors and retries ---------------------------------------------------------------------


def _is_retryable(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def _is_error_payload(payload: Any) -> bool:
    return isinstance(payload, dict) and bool(payload.get("error"))


def _error_text(payload: Any) -> str | None:
    """The server's own description of an error, from the shapes compatible servers use."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
        return json.dumps(error, ensure_ascii=False)
    if isinstance(error, str) and error:
        return error  # Ollama: {"error": "..."}
    for key in ("message", "detail"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
        if value:  # FastAPI-style validation errors (vLLM): a list of objects
            return json.dumps(value, ensure_ascii=False)
    return None


def _error_detail(body: bytes, reason: str) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        message = _error_text(json.loads(text))
    except ValueError:
        message = None
    return message or _shorten(text, _DETAIL_LIMIT) or reason or "no details"


def _parse_json_body(body: bytes) -> dict[str, Any]:
    text = body.decode("utf-8", "replace").strip()
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        return payload
    return {"error": f"unreadable reply: {_shorten(text, 200) or 'empty body'}"}


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
