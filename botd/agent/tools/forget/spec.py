"""The ``forget`` tool's spec: its limits are ``agent.memory`` (``botd.memory``), and it is
built for each run over the memory that run's message reaches (none for a scheduled job)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _forget(deps: ToolDeps) -> Tool:
    from .tool import ForgetTool

    return ForgetTool(deps.memory)


SPEC = ToolSpec(name="forget", factory=_forget, section="agent.memory")
