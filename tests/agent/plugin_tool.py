"""A tool as another distribution would declare it: ``clock`` (says the time it is told),
its ``ToolSpec`` registered under the entry-point group ``botd.tools`` by the tests."""

from __future__ import annotations

from typing import Any

from botd.agent.tools.base import Tool, ToolContext, ToolOutput
from botd.agent.tools.registry import ToolDeps, ToolSpec
from botd.agent.types import ToolDefinition

NOW = "It is 12:00 in the test."


class ClockTool:
    def __init__(self, channels: list[str]) -> None:
        self.spec = ToolDefinition(
            name="clock",
            description="Says what time it is.",
            input_schema={"type": "object", "properties": {}},
        )
        self.timeout: float | None = None
        self.channels = channels

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput(f"{NOW} (channels: {', '.join(self.channels)})")


def _clock(deps: ToolDeps) -> Tool:
    return ClockTool(deps.config.channels.enabled())


SPEC = ToolSpec(name="clock", factory=_clock)
GATED = ToolSpec(name="gated", factory=_clock, needs_approval=True)
NOT_A_SPEC = "clock"
