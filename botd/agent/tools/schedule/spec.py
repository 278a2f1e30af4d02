"""The ``schedule`` tool's spec: no settings of its own (the zone is ``scheduler.timezone``,
which the scheduler holds), built for each run over the scheduler."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _schedule(deps: ToolDeps) -> Tool:
    from .tool import ScheduleTool

    return ScheduleTool(deps.reminders)


SPEC = ToolSpec(name="schedule", factory=_schedule)
