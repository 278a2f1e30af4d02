"""Tools from MCP servers: ``agent.mcp_servers`` kept running, their tools offered to runs.

``McpManager`` keeps the servers up (``manager``), ``names`` says what the model calls their
tools and how a group's list narrows a run's tools, ``client`` is the one place that talks
to the MCP SDK (the extra ``botd[mcp]``).
"""

from .client import INSTALL_HINT, McpUnavailable, require_sdk
from .manager import McpManager, McpTool
from .names import allowed, narrow, tool_name

__all__ = [
    "INSTALL_HINT",
    "McpManager",
    "McpTool",
    "McpUnavailable",
    "allowed",
    "narrow",
    "require_sdk",
    "tool_name",
]
