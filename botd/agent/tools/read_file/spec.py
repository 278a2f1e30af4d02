"""The ``read_file`` tool's spec: it reads a text file of the conversation's workspace;
its caps are ``agent.workspace`` (the tool itself is in ``tools.workspace_files``, with
the other file tools)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _read_file(deps: ToolDeps) -> Tool:
    from ..workspace_files import ReadFileTool

    return ReadFileTool(deps.config.agent.workspace, state_dir=deps.config.state_dir)


SPEC = ToolSpec(name="read_file", factory=_read_file, section="agent.workspace")
