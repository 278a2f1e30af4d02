"""The Anthropic Messages API as a botd ``Provider``, through the official SDK.

``AnthropicProvider.stream`` sends one ``ModelRequest`` with ``client.messages.stream`` and
translates the SDK's *derived* stream events (``text``, ``thinking``, ``signature``,
``input_json``, and the ``content_block_start``/``content_block_stop`` that frame them) into
botd's ``AssistantStreamEvent``s, then ends with one ``AssistantResult``. The raw
``content_block_delta`` events are used only for their block index, never for their
payload: the SDK follows each one with a derived event, so handling both would double
every delta.

Retries are ours, not the SDK's (the client is built with ``max_retries=0``): the SDK
honours any ``retry-after`` up to ~49 days, which would freeze a chat for as long as the
server asks. We retry 429, 5xx (529 included), connection failures and in-stream
overloaded/api errors only while nothing has been streamed to the consumer yet, and never
wait longer than ``max_retry_wait`` at a time. Any other failure ends the stream with
``stop_reason="error"`` and the content received so far; only ``CancelledError`` escapes.

A stream that stays silent for ``idle_timeout`` seconds (not one byte: the API's pings count
as life) is abandoned: the client's read timeout is the idle timeout, so a stalled request
fails with a timeout like any dropped connection. Before anything reached the consumer it is
retried within the same budget. After output it is not: the consumer (a chat) has already
shown that text, and a second attempt would stream a different answer from its start, so the
turn ends with an error instead, keeping what streamed. A call that times out for good ends
with ``NO_ANSWER_IN_TIME`` as its error: the one line the user is shown; the log has details.

A 400 ``invalid_request_error`` about an image ("messages.7.content.2.image.source.base64.data:
At least one of the image dimensions exceed max allowed size: 8000 pixels", "Could not
process image", "image exceeds 5 MB maximum") ends with ``refused_images`` set: the image at
the place the message names (``messages.N.content.M``, or ``….tool_result.content.K`` inside a
tool result), or every image of the request when it names none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import anthropic
import httpx2
from anthropic.types import (
    ContentBlockParam,
    ImageBlockParam,
    MessageParam,
    TextBlockParam,
    ThinkingConfigEnabledParam,
    ToolParam,
    ToolResultBlockParam,
)

from ...events import (
    AssistantStreamEvent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)
from ...net.proxy import httpx_options
from ...net.tls import verified_context
from ...ops.logging import mask_secrets
from ...ops.outages import Reachability
from ...retry import Backoff, retry_after, retry_wait
from ..types import AssistantResult, ModelRequest, ProviderItem, StopReason, ToolDefinition
from .waits import CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, NO_ANSWER_IN_TIME, retry_backoff

log = logging.getLogger(__name__)

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "pause_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    # The output was cut short for want of room, which is what max_tokens means to the loop.
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}

# Error types that, arriving inside an HTTP 200 stream, mean "try again" rather than "your
# request is wrong".
_RETRYABLE_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})

_MISSING_RESULT = "No result was recorded for this tool call."
_ImageMediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


class AnthropicProvider:
    """A ``Provider`` backed by ``anthropic.AsyncAnthropic`` (one client per provider)."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        name: str = "anthropic",
        health: Reachability | None = None,
        proxy: str | None = None,
    ) -> None:
        """``proxy``: ``model.proxy`` (a URL, ``direct``; None: the environment's, as httpx
        reads it)."""
        if idle_timeout <= 0:
            raise ValueError("idle_timeout must be positive")
        self.name = name
        self._health = health
        self._api_key = api_key
        self._max_retries = max(0, max_retries)
        self._max_retry_wait = max(0.0, max_retry_wait)
        self._idle_timeout = idle_timeout
        # Every socket read (the response headers, then each piece of the event stream) may
        # wait at most idle_timeout: that is what makes a silent stream fail.
        timeout = httpx2.Timeout(idle_timeout, connect=min(idle_timeout, CONNECT_TIMEOUT))
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
            # The SDK's own client settings, with botd's shared TLS context.
            http_client=anthropic.DefaultAsyncHttpxClient(
                timeout=timeout, verify=verified_context(), **httpx_options(proxy)
            ),
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        messages = to_api_messages(request.messages)
        retries = 0
        backoff = retry_backoff()
        while True:
            attempt = _Attempt(model=request.model)
            try:
                # aclosing: if our consumer stops early, the SDK stream is closed now, not
                # whenever the inner generator happens to be collected.
                async with contextlib.aclosing(self._attempt(request, messages, attempt)) as events:
                    async for event in events:
                        yield event
                if not attempt.finished:
                    raise _IncompleteStream
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not attempt.streamed and retries < self._max_retries and _is_retryable(exc):
                    wait = self._retry_wait(exc, backoff)
                    retries += 1
                    log.warning(
                        "%s: %s; retry %d of %d in %.2fs",
                        self.name,
                        self._describe(exc),
                        retries,
                        self._max_retries,
                        wait,
                    )
                    await asyncio.sleep(wait)
                    continue
                description = self._describe(exc)
                if retries:
                    plural = "retry" if retries == 1 else "retries"
                    description += f" (gave up after {retries} {plural})"
                if attempt.streamed:
                    description += " (after part of the answer had streamed: not retried)"
                log.error("%s: request failed: %s", self.name, description)
                if self._health is not None and _is_outage(exc):
                    self._health.failed(description)
                if _is_timeout(exc):
                    description = NO_ANSWER_IN_TIME
                refused = frozenset[str]() if attempt.streamed else refused_images(exc, messages)
                yield AssistantResult(attempt.message(self.name, error=description), refused)
                return
            if self._health is not None:
                self._health.answered()
            yield AssistantResult(attempt.message(self.name))
            return

    async def _attempt(
        self, request: ModelRequest, messages: list[MessageParam], attempt: _Attempt
    ) -> AsyncGenerator[AssistantStreamEvent, None]:
        """One HTTP request; leaving it (normally, by error or cancellation) closes the stream."""
        extra_body: dict[str, object] = {}
        if request.temperature is not None and request.thinking_budget is None:
            # The 2.x SDK has no temperature argument, so the API field goes in the body as
            # is. With thinking on the API accepts only its default, so it is left out then.
            extra_body["temperature"] = request.temperature
        thinking: ThinkingConfigEnabledParam | anthropic.Omit = anthropic.omit
        if request.thinking_budget is not None:
            thinking = {"type": "enabled", "budget_tokens": request.thinking_budget}
        system: list[TextBlockParam] | anthropic.Omit = anthropic.omit
        if request.system:
            system = [
                {"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}
            ]
        tools: list[ToolParam] | anthropic.Omit = anthropic.omit
        if request.tools:
            tools = to_api_tools(request.tools)

        async with self._client.messages.stream(
            model=request.model,
            max_tokens=request.max_tokens,
            messages=messages,
            system=system,
            tools=tools,
            thinking=thinking,
            extra_body=extra_body or None,
        ) as sdk_stream:
            async for sdk_event in sdk_stream:
                for event in attempt.handle(sdk_event):
                    attempt.streamed = True
                    yield event

    def _retry_wait(self, exc: Exception, backoff: Backoff) -> float:
        hinted = None
        if isinstance(exc, anthropic.APIStatusError) and exc.status_code != 200:
            hinted = retry_after(exc.response.headers)
        return retry_wait(backoff, hinted, max_wait=self._max_retry_wait)

    def _describe(self, exc: Exception) -> str:
        text = describe_error(exc)
        if _is_timeout(exc):
            text += f" (silent for {self._idle_timeout:g} s, the idle timeout)"
        # Belt and braces: an error body or URL should never echo the key, but if one did,
        # it must not reach a log line or a chat.
        if self._api_key and self._api_key in text:
            text = text.replace(self._api_key, "[redacted]")
        return text


class _IncompleteStream(Exception):
    """The HTTP stream ended without ``message_stop``."""

    def __str__(self) -> str:
        return "the response stream ended before the message was complete"


# --- one attempt's stream ---------------------------------------------------------------


@dataclass
class _Block:
    """A content block being received; ``done`` once its ``content_block_stop`` arrived."""

    kind: Literal["text", "thinking", "tool_call"]
    text: str = ""
    signature: str | None = None
    tool_id: str = ""
    tool_name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    done: bool = False

    def content(self) -> TextContent | ThinkingContent | ToolCallContent:
        if self.kind == "text":
            return TextContent(text=self.text)
        if self.kind == "thinking":
            return ThinkingContent(thinking=self.text, signature=self.signature)
        return ToolCallContent(id=self.tool_id, name=self.tool_name, arguments=self.arguments)


@dataclass
class _Attempt:
    """Accumulates one request's blocks, usage and stop reason from the SDK's events."""

    model: str
    streamed: bool = False
    """True once an event went to the consumer: from then on a retry would repeat output."""
    finished: bool = False
    stop_reason: str | None = None
    blocks: list[_Block] = field(default_factory=list)
    usage: dict[str, int] = field(
        default_factory=lambda: {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
    )
    # API block index -> position in ``blocks``; blocks botd cannot represent (redacted
    # thinking, server tools) are skipped, so the two numberings can differ.
    _positions: dict[int, int] = field(default_factory=dict)
    _delta_index: int | None = None

    def handle(self, event: Any) -> list[AssistantStreamEvent]:
        """botd events for one SDK stream event (often none)."""
        kind: str = event.type
        if kind == "message_start":
            self.model = event.message.model or self.model
            self._take_usage(event.message.usage)
        elif kind == "content_block_start":
            return self._start_block(event.index, event.content_block)
        elif kind == "content_block_delta":
            # Only the index matters here; the derived event that follows carries the payload.
            self._delta_index = event.index
        elif kind == "text":
            return self._append(event.text, "text", "text_delta")
        elif kind == "thinking":
            return self._append(event.thinking, "thinking", "thinking_delta")
        elif kind == "signature":
            position = self._current("thinking")
            if position is not None:
                self.blocks[position].signature = event.signature
        elif kind == "input_json":
            return self._append(event.partial_json, "tool_call", "toolcall_delta")
        elif kind == "content_block_stop":
            return self._stop_block(event.index, event.content_block)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._take_usage(event.usage)
        elif kind == "message_stop":
            self.finished = True
        return []

    def _start_block(self, api_index: int, block: Any) -> list[AssistantStreamEvent]:
        block_type: str = block.type
        if block_type == "text":
            new = _Block(kind="text", text=block.text)
            event_type: Literal["text_start", "thinking_start", "toolcall_start"] = "text_start"
        elif block_type == "thinking":
            new = _Block(kind="thinking", text=block.thinking, signature=block.signature or None)
            event_type = "thinking_start"
        elif block_type == "tool_use":
            new = _Block(kind="tool_call", tool_id=block.id, tool_name=block.name)
            event_type = "toolcall_start"
        else:
            log.debug("skipping a %s content block botd cannot represent", block_type)
            return []
        self._positions[api_index] = len(self.blocks)
        self.blocks.append(new)
        return [AssistantStreamEvent(type=event_type, content_index=len(self.blocks) - 1)]

    def _current(self, kind: str) -> int | None:
        """Position of the block the latest delta belongs to, if it is of this kind."""
        if self._delta_index is None:
            return None
        position = self._positions.get(self._delta_index)
        if position is None or self.blocks[position].kind != kind:
            return None
        return position

    def _append(
        self,
        delta: str,
        kind: Literal["text", "thinking", "tool_call"],
        event_type: Literal["text_delta", "thinking_delta", "toolcall_delta"],
    ) -> list[AssistantStreamEvent]:
        position = self._current(kind)
        if position is None or not delta:
            return []
        if kind != "tool_call":  # tool input is taken whole, parsed, at content_block_stop
            self.blocks[position].text += delta
        return [AssistantStreamEvent(type=event_type, content_index=position, delta=delta)]

    def _stop_block(self, api_index: int, final: Any) -> list[AssistantStreamEvent]:
        position = self._positions.get(api_index)
        if position is None:
            return []
        block = self.blocks[position]
        block.done = True
        if block.kind == "text":
            block.text = final.text
            return [
                AssistantStreamEvent(type="text_end", content_index=position, content=block.text)
            ]
        if block.kind == "thinking":
            block.text = final.thinking
            block.signature = final.signature or None
            return [
                AssistantStreamEvent(
                    type="thinking_end", content_index=position, content=block.text
                )
            ]
        block.arguments = dict(final.input) if isinstance(final.input, Mapping) else {}
        arguments_json = json.dumps(block.arguments, ensure_ascii=False)
        return [
            AssistantStreamEvent(
                type="toolcall_end", content_index=position, content=arguments_json
            )
        ]

    def _take_usage(self, usage: Any) -> None:
        # message_delta counts are cumulative totals; absent (None) ones keep the earlier value.
        for key in self.usage:
            value = getattr(usage, key, None)
            if isinstance(value, int):
                self.usage[key] = value

    def message(self, provider: str, *, error: str | None = None) -> Message:
        if error is None:
            stop_reason: str = _map_stop_reason(self.stop_reason)
            blocks = self.blocks
        else:
            stop_reason = "error"
            # A tool call whose input was cut off must not look runnable.
            blocks = [b for b in self.blocks if b.kind != "tool_call" or b.done]
        return Message(
            role="assistant",
            content=[b.content() for b in blocks],
            stop_reason=stop_reason,
            error_message=error,
            usage=dict(self.usage),
            model=self.model,
            provider=provider,
            timestamp=time.time(),
        )


def _map_stop_reason(api_reason: str | None) -> StopReason:
    if api_reason is None:
        return "end_turn"
    mapped = _STOP_REASONS.get(api_reason)
    if mapped is None:
        log.warning("unknown Anthropic stop_reason %r, treated as end_turn", api_reason)
        return "end_turn"
    return mapped


# --- errors and retries -----------------------------------------------------------------


def _error_fields(body: object) -> tuple[str | None, str | None]:
    """(type, message) from an API error body ``{"type":"error","error":{...}}``."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            err_type, err_message = inner.get("type"), inner.get("message")
            return (
                err_type if isinstance(err_type, str) else None,
                err_message if isinstance(err_message, str) else None,
            )
    return None, None


def _is_retryable(exc: Exception) -> bool:
    if isinstance(exc, anthropic.APIStatusError):
        if exc.status_code == 200:  # an `event: error` frame inside the stream
            return _error_fields(exc.body)[0] in _RETRYABLE_STREAM_ERRORS
        return exc.status_code == 429 or exc.status_code >= 500
    # httpx2 transport errors surface unwrapped when they happen while reading the body.
    return isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError | _IncompleteStream)


def _is_outage(exc: Exception) -> bool:
    """Whether a failed call says the API is not answering (no connection, a timeout, an
    overload, a 5xx, a rate limit, a refused key), rather than refusing this request."""
    if isinstance(exc, anthropic.APIStatusError) and exc.status_code in (401, 403):
        return True
    return _is_retryable(exc)


_IMAGE_AT = re.compile(
    r"messages\.(\d+)\.content\.(\d+)(?:\.(?:tool_result\.)?content\.(\d+))?\.image\b"
)
"""Where an error message places the image it blames: ``messages.N.content.M.image…``, or
``messages.N.content.M.tool_result.content.K.image…`` for one inside a tool result."""
_NAMES_AN_IMAGE = re.compile(r"\bimages?\b", re.IGNORECASE)


def refused_images(exc: Exception, messages: list[MessageParam]) -> frozenset[str]:
    """The images a refusal blames (``AssistantResult.refused_images``): for a 400
    ``invalid_request_error`` about an image, the one at the place it names, else every
    image of ``messages`` (the request as sent). Empty for any other failure."""
    if not isinstance(exc, anthropic.BadRequestError):
        return frozenset()
    error_type, text = _error_fields(exc.body)
    if error_type != "invalid_request_error" or not text:
        return frozenset()
    located = _IMAGE_AT.search(text)
    if located is not None:
        data = _image_data_at(messages, [int(n) for n in located.groups() if n is not None])
        if data is not None:
            return frozenset({data})
    elif not _NAMES_AN_IMAGE.search(text):
        return frozenset()
    return frozenset(_image_data(messages))


def _image_data_at(messages: list[MessageParam], place: list[int]) -> str | None:
    """The base64 data of the image block at ``place`` of the request (message, block, and
    block inside a tool result), if one is there."""
    found: Any = messages
    try:
        for step, index in enumerate(place):
            found = found[index] if step == 0 else found["content"][index]
    except (IndexError, KeyError, TypeError):
        return None
    return _base64_of(found)


def _image_data(messages: list[MessageParam]) -> list[str]:
    """The base64 data of every image of the request, tool results' included."""
    found: list[str] = []
    for message in messages:
        content = message["content"]
        for block in content if isinstance(content, list) else ():
            inner = block.get("content") if isinstance(block, Mapping) else None
            for candidate in [block, *(inner if isinstance(inner, list) else ())]:
                data = _base64_of(candidate)
                if data is not None:
                    found.append(data)
    return found


def _base64_of(block: Any) -> str | None:
    if not isinstance(block, Mapping) or block.get("type") != "image":
        return None
    source = block.get("source")
    data = source.get("data") if isinstance(source, Mapping) else None
    return data if isinstance(data, str) and data else None


def _is_timeout(exc: Exception) -> bool:
    """The server went silent: no response, or no byte of the stream, within the timeout."""
    return isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException)


def _shorten(text: str, limit: int = 300) -> str:
    # Masked before the cut: a secret cut in half would no longer be recognised.
    text = " ".join(mask_secrets(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_error(exc: BaseException) -> str:
    """A short, readable account of a failed request (no secrets, no stack trace)."""
    if isinstance(exc, anthropic.APIStatusError):
        err_type, err_message = _error_fields(exc.body)
        if err_message is None:
            raw = exc.body if isinstance(exc.body, str) else exc.message
            err_message = _shorten(str(raw))
        where = "during the stream" if exc.status_code == 200 else f"HTTP {exc.status_code}"
        label = f"{where}, {err_type}" if err_type else where
        return f"Anthropic API error ({label}): {_shorten(err_message)}"
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        return "Anthropic API request timed out"
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        detail = f": {_shorten(str(cause))}" if cause is not None and str(cause) else ""
        return f"could not reach the Anthropic API{detail}"
    if isinstance(exc, httpx2.TransportError):
        return f"connection to the Anthropic API failed: {_shorten(str(exc) or type(exc).__name__)}"
    if isinstance(exc, _IncompleteStream):
        return f"Anthropic API error: {exc}"
    return f"Anthropic provider error: {type(exc).__name__}: {_shorten(str(exc))}"


# --- botd messages -> Messages API ------------------------------------------------------


def to_api_tools(tools: list[ToolDefinition]) -> list[ToolParam]:
    """Tool definitions; the last carries the cache breakpoint so all of them are cached."""
    api_tools: list[ToolParam] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools
    ]
    if api_tools:
        api_tools[-1]["cache_control"] = {"type": "ephemeral"}
    return api_tools


def _image_block(image: ImageContent) -> ImageBlockParam:
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": cast(_ImageMediaType, image.mime_type),
            "data": image.data,
        },
    }


def _user_blocks(message: Message) -> list[ContentBlockParam]:
    blocks: list[ContentBlockParam] = []
    for block in message.blocks():
        if isinstance(block, TextContent) and block.text:
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            blocks.append(_image_block(block))
    return blocks


def _assistant_blocks(message: Message) -> list[ContentBlockParam]:
    blocks: list[ContentBlockParam] = []
    for block in message.blocks():
        if isinstance(block, TextContent) and block.text:  # the API rejects empty text blocks
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingContent) and block.signature:
            # Sent back exactly as received; unsigned thinking (cut off, or from another
            # provider) cannot be verified by the API, so it is left out.
            blocks.append(
                {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
            )
        elif isinstance(block, ToolCallContent):
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}
            )
    return blocks


def _tool_result_block(message: Message) -> ToolResultBlockParam:
    result: ToolResultBlockParam = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id or "",
    }
    if isinstance(message.content, str):
        result["content"] = message.content
    else:
        parts: list[TextBlockParam | ImageBlockParam] = []
        for block in message.content:
            if isinstance(block, TextContent) and block.text:
                parts.append({"type": "text", "text": block.text})
            elif isinstance(block, ImageContent):
                parts.append(_image_block(block))
        if parts:
            result["content"] = parts
    if message.is_error:
        result["is_error"] = True
    return result


def to_api_messages(messages: list[Message]) -> list[MessageParam]:
    """The conversation in Messages API form.

    Tool results become ``tool_result`` blocks of a user message; consecutive messages of
    the same API role are merged into one. A tool call that got no result before the
    conversation moved on gets a synthetic error result, since the API refuses a
    ``tool_use`` without its ``tool_result``.
    """
    turns: list[tuple[Literal["user", "assistant"], list[ContentBlockParam]]] = []
    unanswered: list[str] = []  # tool_use ids of the last assistant turn still awaiting results

    def add(role: Literal["user", "assistant"], blocks: list[ContentBlockParam]) -> None:
        if not blocks:
            return
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))

    def close_tool_round() -> None:
        missing: list[ContentBlockParam] = [
            {"type": "tool_result", "tool_use_id": i, "content": _MISSING_RESULT, "is_error": True}
            for i in unanswered
        ]
        unanswered.clear()
        add("user", missing)

    for message in messages:
        if message.role == "tool_result":
            if not message.tool_call_id:
                log.warning("dropping a tool result without tool_call_id")
                continue
            if message.tool_call_id in unanswered:
                unanswered.remove(message.tool_call_id)
            add("user", [_tool_result_block(message)])
            continue
        close_tool_round()
        if message.role == "user":
            add("user", _user_blocks(message))
        else:
            add("assistant", _assistant_blocks(message))
            unanswered.extend(call.id for call in message.tool_calls())
    if turns and turns[-1][0] == "user":
        # The conversation ends in tool results: any call left unanswered is answered now.
        close_tool_round()

    api_messages: list[MessageParam] = []
    for role, blocks in turns:
        if role == "user":
            api_messages.append({"role": "user", "content": blocks})
        else:
            api_messages.append({"role": "assistant", "content": blocks})
    return api_messages
