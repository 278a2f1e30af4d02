"""The ``write_file`` tool's spec: it writes a text file in the conversation's workspace;
its caps are ``agent.workspace`` (the tool itself is in ``tools.workspace_files``, with
the other file tools)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _write_file(deps: ToolDeps) -> Tool:
    from ..workspace_files import WriteFileTool

    return WriteFileTool(deps.config.agent.workspace, state_dir=deps.config.state_dir)


SPEC = ToolSpec(name="write_file", factory=_write_file, section="agent.workspace")
