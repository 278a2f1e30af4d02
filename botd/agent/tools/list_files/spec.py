"""The ``list_files`` tool's spec: it lists a directory of the conversation's workspace;
its caps are ``agent.workspace`` (the tool itself is in ``tools.workspace_files``, with
the other file tools)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _list_files(deps: ToolDeps) -> Tool:
    from ..workspace_files import ListFilesTool

    return ListFilesTool(deps.config.agent.workspace, state_dir=deps.config.state_dir)


SPEC = ToolSpec(name="list_files", factory=_list_files, section="agent.workspace")
