"""The ``read_file`` tool's spec: it reads a text file of the conversation's workspace;
its caps are ``agent.workspace`` (``tools.file_tool_specs``)."""

from __future__ import annotations

from ..file_tool_specs import file_tool_spec

__all__ = ["SPEC"]

SPEC = file_tool_spec("read_file", "ReadFileTool")
