"""``botd doctor``'s lines about the ACP agents botd drives (``agent.acp``,
``agent.acp_agents``; docs/acp.md).

For each configured agent a chat uses (``agent.backend``, a channel's or a group's
``backend``): its command is found (on the ``PATH`` the agent gets: its ``env``'s, else
botd's) and executable; and when it runs on Node.js (the command is ``node``, ``npx`` or
``npm``, or a script whose first line names ``node``), the ``node`` beside it on that
``PATH`` is at least ``NODE_MINIMUM``. Nothing is started: the agent's own start would
need its credentials and may download itself (``npx``). An agent no chat uses is named as
not checked. Without the ACP SDK, one line per agent names the extra to install.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

from ...config import BotdConfig
from ...config.extras import installed
from ...config.schema import AcpAgentSection, acp_agent_key
from .checks import Check, failed, passed

__all__ = ["NODE_MINIMUM", "acp_checks"]

NODE_MINIMUM = (18, 0, 0)
"""The oldest Node.js the pinned Claude Code adapter (``@zed-industries/claude-code-acp``
0.16.2) declares through its SDKs (``@anthropic-ai/claude-agent-sdk`` and
``@modelcontextprotocol/sdk``: ``engines.node >=18``; the adapter and the ACP SDK declare
none). Its dependency ``minimatch`` 10.2 says ``20 || >=22``, yet the adapter's tests pass on
Debian bookworm's Node 18.20.4, so 18 is the line drawn."""
NODE_COMMANDS = ("node", "npx", "npm")
VERSION_WAIT = 10.0
"""Seconds ``node --version`` may take."""
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def _spelled(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


def _found(command: str, path: str) -> Path | None:
    """The executable ``command`` names: a path as written, else looked up on ``path``."""
    if os.sep in command:
        candidate = Path(command).expanduser()
        return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None
    located = shutil.which(command, path=path)
    return Path(located) if located is not None else None


def _runs_on_node(command: Path) -> bool:
    """Whether ``command`` is Node itself, its package runner, or a script Node runs."""
    if command.name in NODE_COMMANDS:
        return True
    try:
        with command.open("rb") as script:
            first = script.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"node" in first


async def _node_version(node: Path) -> tuple[int, int, int] | None:
    try:
        process = await asyncio.create_subprocess_exec(
            str(node),
            "--version",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError:
        return None
    try:
        async with asyncio.timeout(VERSION_WAIT):
            out, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        return None
    match = _VERSION.match(out.decode(errors="replace").strip())
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


async def _agent_checks(key: str, section: AcpAgentSection) -> list[Check]:
    what = f"acp agent {key}"
    path = section.env.get("PATH") or os.environ.get("PATH", os.defpath)
    command = _found(section.command, path)
    if command is None:
        return [
            failed(
                f"{key}.command",
                f"{what}: the command {section.command!r} is not found or not executable"
                + ("" if os.sep in section.command else " on PATH"),
                "install the agent, or give the command's full path",
            )
        ]
    if not _runs_on_node(command):
        return [passed(key, f"{what}: {command} found")]
    node = command if command.name == "node" else _found("node", path)
    if node is None:
        return [
            failed(
                key,
                f"{what}: {command} runs on Node.js, and node is not on PATH",
                f"install Node.js {NODE_MINIMUM[0]} or later",
            )
        ]
    version = await _node_version(node)
    if version is None:
        return [failed(key, f"{what}: {node} --version did not answer", "check that Node runs")]
    if version < NODE_MINIMUM:
        return [
            failed(
                key,
                f"{what}: Node.js {_spelled(version)} at {node} is too old",
                f"the agent needs Node.js {_spelled(NODE_MINIMUM)} or later (docs/acp.md)",
            )
        ]
    return [passed(key, f"{what}: {command} found, Node.js {_spelled(version)}")]


async def acp_checks(config: BotdConfig) -> list[Check]:
    """The checks of every configured ACP agent (see the module docstring), side by side."""
    sections = config.agent.acp_sections()
    if not sections:
        return []
    used = set(config.backends().values())
    if not installed("acp"):
        return [
            failed(
                acp_agent_key(backend),
                f"acp agent {acp_agent_key(backend)}: the ACP SDK is not installed",
                "pip install 'botd[acp]'",
            )
            for backend in sections
            if backend in used
        ]
    checks: list[list[Check]] = []
    probes = []
    for backend, section in sections.items():
        key = acp_agent_key(backend)
        if backend in used:
            probes.append(_agent_checks(key, section))
        else:
            checks.append([passed(key, f"acp agent {key}: no chat uses it, not checked")])
    checks.extend(await asyncio.gather(*probes))
    return [check for group in checks for check in group]
