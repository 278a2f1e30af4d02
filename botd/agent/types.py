"""The agent runtime's shared vocabulary: what a provider is asked and what it streams back.

A provider turns a ``ModelRequest`` into a stream of ``ProviderItem``s: the model's
streaming events as ``AssistantStreamEvent``s (the same objects the subscriber receives inside
``message_update``), then exactly one ``AssistantResult`` carrying the finished assistant
message. The result's ``message.stop_reason`` is one of ``STOP_REASONS``; a failure ends with
``stop_reason="error"`` and ``error_message`` set, keeping the text that already streamed,
rather than raising. Cancellation is asyncio's: the caller cancels the task that iterates
the stream, and the provider closes its connection on the way out.

A request the server refused because of an image in it (too large, unreadable, not
accepted by this model) is a failure of its own kind: the result names the images
(``AssistantResult.refused_images``), so the loop can leave them out and ask again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..events import AssistantStreamEvent, Message

StopReason = Literal[
    "end_turn", "tool_use", "max_tokens", "max_turn_requests", "refusal", "cancelled", "error"
]
STOP_REASONS: frozenset[str] = frozenset(
    {"end_turn", "tool_use", "max_tokens", "max_turn_requests", "refusal", "cancelled", "error"}
)


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as the model sees it: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call: everything a provider needs, nothing it must remember."""

    model: str
    messages: list[Message]
    """The conversation so far: user, assistant and tool_result messages, oldest first."""
    system: str = ""
    tools: list[ToolDefinition] = field(default_factory=list)
    max_tokens: int = 4096
    thinking_budget: int | None = None
    """Extended thinking budget in tokens (None: thinking off)."""
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class AssistantResult:
    """The last item of a provider stream: the complete assistant message.

    ``message.content`` holds text, thinking (with its signature) and tool_call blocks in
    order; ``message.stop_reason`` is one of ``STOP_REASONS``; ``message.usage`` has
    ``input_tokens``, ``output_tokens`` and, when the provider reports them,
    ``cache_read_input_tokens`` and ``cache_creation_input_tokens``.
    """

    message: Message
    refused_images: frozenset[str] = frozenset()
    """The base64 ``data`` of the images the server refused the request for (the message
    then ends with ``stop_reason="error"``): the one its error named, or every image of the
    request when it named none. Empty for any other outcome, a refusal that names an image
    of a request holding none included."""


ProviderItem = AssistantStreamEvent | AssistantResult


class Provider(Protocol):
    """A model backend (see the module docstring for the stream's shape)."""

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]: ...

    async def aclose(self) -> None:
        """Release connections (called once at shutdown)."""
        ...


class ProviderError(Exception):
    """A provider that cannot be used at all (bad configuration, unknown name)."""
