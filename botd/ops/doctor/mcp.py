"""``botd doctor``'s MCP lines: each configured server started, its tools listed, stopped.

One line per server: ``✓ mcp server docs: started, 4 tools`` or ``✗`` with why it did not
start. Without the MCP SDK installed, one line per server names the extra to install.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from ...agent.mcp.client import (
    INSTALL_HINT,
    HttpRefusals,
    McpUnavailable,
    connect,
    list_tools,
    require_sdk,
)
from ...agent.mcp.client import describe_error as _describe
from ...config import BotdConfig
from ...config.schema import McpServerSection
from .checks import Check, failed, passed

__all__ = ["mcp_checks"]


async def _probe(name: str, section: McpServerSection, timeout: float) -> Check:
    what = f"mcp server {name}"
    key = f"agent.mcp_servers.{name}"
    refusals = HttpRefusals()
    try:
        async with asyncio.timeout(timeout), AsyncExitStack() as stack:
            client = await connect(stack, section, refusals, name=name)
            tools = await list_tools(client)
    except TimeoutError:
        return failed(key, f"{what}: no answer within {timeout:g}s", _fix(section))
    except Exception as exc:
        why = _describe(exc, refusals)
        return failed(key, f"{what}: did not start: {why}", _fix(section))
    count = len(tools)
    return passed(key, f"{what}: started, {count} tool{'' if count == 1 else 's'}")


def _fix(section: McpServerSection) -> str:
    if section.url is not None:
        return "check its url and headers, and that the server runs"
    return "check its command, args, env and cwd (try running the command yourself)"


async def mcp_checks(config: BotdConfig, timeout: float) -> list[Check]:
    """One check per configured MCP server, all probed side by side."""
    servers = config.agent.mcp_servers
    if not servers:
        return []
    try:
        require_sdk()
    except McpUnavailable:
        return [
            failed(
                f"agent.mcp_servers.{name}",
                f"mcp server {name}: the MCP SDK is not installed",
                INSTALL_HINT,
            )
            for name in servers
        ]
    probes = [_probe(name, section, timeout) for name, section in servers.items()]
    return list(await asyncio.gather(*probes))
