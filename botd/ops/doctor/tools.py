"""``botd doctor``'s lines about the tools ``agent.tools`` lists that need something of the
host (``ToolSpec.probe``: the ``exec`` tool's bubblewrap and user namespaces): ``✓`` when
the tool can work here, ``✗`` with what it lacks when not (botd still runs; the tool refuses
each call in one line)."""

from __future__ import annotations

import asyncio

from ...agent.tools.registry import host_problems
from ...config import BotdConfig
from .checks import Check, failed, passed

__all__ = ["tool_checks"]


async def tool_checks(config: BotdConfig) -> list[Check]:
    """One line per listed tool that has a probe (see the module docstring)."""
    found = await asyncio.to_thread(host_problems, config)  # a probe runs a program
    return [
        passed(f"tool.{name}", f"tool {name}: works on this host")
        if problem is None
        else failed(f"tool.{name}", problem, "")  # the problem says what to do
        for name, problem in found.items()
    ]
