"""The specs of the workspace file tools, made alike: each package (``read_file``,
``write_file``, ``edit_file``, ``list_files``, ``search_files``) declares its ``SPEC`` with
``file_tool_spec``. The tools themselves live together in ``tools.workspace_files``, which
a factory imports only when a run is first offered one of them; their caps are
``agent.workspace``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from .base import Tool

__all__ = ["file_tool_spec"]


def file_tool_spec(name: str, tool_class: str) -> ToolSpec:
    """The spec of the file tool ``name``, built by ``workspace_files.<tool_class>``."""

    def build(deps: ToolDeps) -> Tool:
        tools = importlib.import_module(f"{__package__}.workspace_files")
        made: Tool = getattr(tools, tool_class)(
            deps.config.agent.workspace, state_dir=deps.config.state_dir
        )
        return made

    return ToolSpec(name=name, factory=build, section="agent.workspace")
