"""Tools the agent can call: what a tool is and what it gets and returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..chat import MessageRef, Target
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
    """A tool's result as the model reads it; ``is_error`` marks a failed call."""

    text: str
    is_error: bool = False
    details: dict[str, Any] = field(default_factory=dict)


class Tool(Protocol):
    spec: ToolSpec
    timeout: float | None
    """Seconds before the call is abandoned with an error result (None: the default)."""

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput: ...


SendFunction = Callable[[Target, str], Awaitable[MessageRef]]
"""Posts text to a target through the channel layer."""
