"""The ``forget`` tool: drops one item of the run's memory.

Whose memory it reaches is the run's (``botd.memory.memory_owner``: the person in a direct
chat, the group in a group), never the model's choice."""

from __future__ import annotations

from typing import Any

from ....memory import NO_MEMORY, MemoryHere
from ...types import ToolDefinition
from ..base import ToolContext, ToolOutput

_DESCRIPTION = (
    "Drop one item of the memory here, by the number recall (or /memory) shows it under. Use "
    "it when the user asks you to forget something, or when a fact is wrong or outdated."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "number": {"type": "integer", "minimum": 1, "description": "The item's number."}
    },
    "required": ["number"],
    "additionalProperties": False,
}


class ForgetTool:
    """The ``forget`` tool over one memory (see the module docstring)."""

    def __init__(self, memory: MemoryHere | None, *, timeout: float | None = 10.0) -> None:
        self._memory = memory
        self.timeout = timeout
        self.spec = ToolDefinition(name="forget", description=_DESCRIPTION, input_schema=_SCHEMA)

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        if self._memory is None:
            return ToolOutput(NO_MEMORY, is_error=True)
        outcome = await self._memory.forget(int(args["number"]))
        return ToolOutput(outcome.text, is_error=outcome.failed)
