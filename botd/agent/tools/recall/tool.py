"""The ``recall`` tool: lists the run's memory, or what in it matches a query.

Whose memory it reaches is the run's (``botd.memory.memory_owner``: the person in a direct
chat, the group in a group), never the model's choice."""

from __future__ import annotations

from typing import Any

from ....memory import NO_MEMORY, MemoryHere
from ...types import ToolDefinition
from ..base import ToolContext, ToolOutput

_DESCRIPTION = (
    "List what you keep in memory here (this user's in a direct chat, the group's in a "
    "group), numbered as forget takes them; with query, only the items sharing a word with it."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Words to look for (empty: every item)."}
    },
    "additionalProperties": False,
}


class RecallTool:
    """The ``recall`` tool over one memory (see the module docstring)."""

    def __init__(self, memory: MemoryHere | None, *, timeout: float | None = 10.0) -> None:
        self._memory = memory
        self.timeout = timeout
        self.spec = ToolDefinition(name="recall", description=_DESCRIPTION, input_schema=_SCHEMA)

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        if self._memory is None:
            return ToolOutput(NO_MEMORY, is_error=True)
        outcome = await self._memory.recall(str(args.get("query", "")))
        return ToolOutput(outcome.text, is_error=outcome.failed)
