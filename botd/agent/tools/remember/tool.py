"""The ``remember`` tool: keeps a fact in the run's memory.

Whose memory it reaches is the run's (``botd.memory.memory_owner``: the person in a direct
chat, the group in a group), never the model's choice."""

from __future__ import annotations

from typing import Any

from ....memory import NO_MEMORY, MemoryHere
from ...types import ToolDefinition
from ..base import ToolContext, ToolOutput

_DESCRIPTION = (
    "Keep a short fact for later conversations: in a direct chat about this user (only they "
    "see it), in a group about the group (everyone there sees it). Keep only what the user "
    "asked you to remember or would want remembered; one fact per call."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "minLength": 1, "description": "The fact, in a sentence."}
    },
    "required": ["text"],
    "additionalProperties": False,
}


class RememberTool:
    """The ``remember`` tool over one memory (see the module docstring)."""

    def __init__(self, memory: MemoryHere | None, *, timeout: float | None = 10.0) -> None:
        self._memory = memory
        self.timeout = timeout
        self.spec = ToolDefinition(name="remember", description=_DESCRIPTION, input_schema=_SCHEMA)

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        if self._memory is None:
            return ToolOutput(NO_MEMORY, is_error=True)
        outcome = await self._memory.remember(str(args["text"]))
        return ToolOutput(outcome.text, is_error=outcome.failed)
