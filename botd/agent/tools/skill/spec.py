"""The ``skill`` tool's spec: its skills are ``agent.skills_dir``'s (``botd.skills``), built for
each run over those its chat is offered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _skill(deps: ToolDeps) -> Tool:
    from .tool import SkillTool

    return SkillTool(deps.skills)


SPEC = ToolSpec(name="skill", factory=_skill)
