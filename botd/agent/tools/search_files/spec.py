"""The ``search_files`` tool's spec: it finds lines in the files of the conversation's workspace;
its caps are ``agent.workspace`` (the tool itself is in ``tools.workspace_files``, with
the other file tools)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _search_files(deps: ToolDeps) -> Tool:
    from ..workspace_files import SearchFilesTool

    return SearchFilesTool(deps.config.agent.workspace, state_dir=deps.config.state_dir)


SPEC = ToolSpec(name="search_files", factory=_search_files, section="agent.workspace")
