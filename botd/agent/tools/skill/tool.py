"""The ``skill`` tool: the instructions of a skill the run's chat is offered, or one of that
skill's files.

A skill is the operator's own text (put in ``agent.skills_dir`` by whoever runs botd, as the
system prompt is), so its result is not marked untrusted: it is meant to be followed."""

from __future__ import annotations

from typing import Any

from ....skills import SkillsHere
from ...types import ToolDefinition
from ..base import ToolContext, ToolOutput

_DESCRIPTION = (
    "Load a skill named in the system prompt: returns its instructions, to follow for the "
    "task. With file (a path inside the skill's folder, as its instructions name it), "
    "returns that file's text instead."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The skill's name, as listed."},
        "file": {
            "type": "string",
            "description": "A file of the skill, relative to its folder (references/forms.md).",
        },
    },
    "required": ["name"],
    "additionalProperties": False,
}


class SkillTool:
    """The ``skill`` tool over the skills a run is offered (see the module docstring)."""

    def __init__(self, skills: SkillsHere | None, *, timeout: float | None = 10.0) -> None:
        self._skills = skills or SkillsHere(())
        self.timeout = timeout
        self.spec = ToolDefinition(name="skill", description=_DESCRIPTION, input_schema=_SCHEMA)

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        name = str(args["name"])
        file = args.get("file")
        if file is None:
            loaded = self._skills.body(name)
        else:
            loaded = await self._skills.read(name, str(file))
        return ToolOutput(loaded.text, is_error=loaded.failed)
