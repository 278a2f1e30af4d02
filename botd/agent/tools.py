"""Tools the agent can call: what a tool is and what it gets and returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..chat import MessageRef, Target
from ..events import ContentBlock, ImageContent, TextContent
from .types import ToolSpec


def _ignore_progress(partial_result: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool call knows about where it runs."""

    conversation_key: str
    origin: Target | None
    """Where the run's answer goes (None for runs with no chat, such as benchmarks)."""
    call_id: str
    report_progress: Callable[[object], None] = field(default=_ignore_progress, compare=False)
    """Hands a partial result to the run (emitted as ``tool_execution_update``)."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result as the model reads it; ``is_error`` marks a failed call.

    ``images`` go to the model after the text, as image blocks of the tool result."""

    text: str
    is_error: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    images: tuple[ImageContent, ...] = ()

    def content(self) -> list[ContentBlock]:
        """The tool result message's content: the text, then the images."""
        return [TextContent(text=self.text), *self.images]

    def payload(self) -> dict[str, Any]:
        """The result in the JSON shape of ``tool_execution_end``."""
        return {
            "content": [block.model_dump(mode="json") for block in self.content()],
            "details": dict(self.details),
        }


class Tool(Protocol):
    spec: ToolSpec
    timeout: float | None
    """Seconds before the call is abandoned with an error result (None: the default)."""

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput: ...


SendFunction = Callable[[Target, str], Awaitable[MessageRef]]
"""Posts text to a target through the channel layer."""
