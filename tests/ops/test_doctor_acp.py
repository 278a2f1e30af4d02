"""``botd doctor``'s ACP lines: each ACP agent a chat uses has its command found and, when
it runs on Node.js, Node new enough; the ACP channel's socket has a directory that takes it.

The Node versions are those of stand-in ``node`` scripts on the agent's ``PATH`` (its
``env``), which print a version as ``node --version`` does: a machine with an old Node is
not at hand, and nothing else of Node is asked.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import httpx

from botd.channels.acp.spec import SPEC, AcpSection
from botd.config import BotdConfig
from botd.ops.doctor.acp import NODE_MINIMUM, acp_checks
from botd.ops.doctor.checks import Check


def config(agent: dict[str, Any]) -> BotdConfig:
    return BotdConfig.model_validate({"agent": agent})


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def node_bin(tmp_path: Path, version: str) -> Path:
    """A directory holding ``node`` (answering ``version``) and ``npx``."""
    bin_dir = tmp_path / f"node-{version}" / "bin"
    executable(bin_dir / "node", f"#!/bin/sh\necho v{version}\n")
    executable(bin_dir / "npx", "#!/bin/sh\nexit 0\n")
    return bin_dir


def lines(checks: list[Check]) -> list[tuple[str, str, str]]:
    return [(c.name, c.status, c.detail()) for c in checks]


async def test_a_command_not_on_path_is_one_line_naming_its_key(tmp_path: Path) -> None:
    agents = {
        "backend": "acp:gemini",
        "acp_agents": {"gemini": {"command": "gemini-nowhere", "env": {"PATH": str(tmp_path)}}},
    }
    [(name, status, detail)] = lines(await acp_checks(config(agents)))
    assert (name, status) == ("agent.acp_agents.gemini.command", "fail")
    assert detail.startswith(
        "acp agent agent.acp_agents.gemini: the command 'gemini-nowhere' is not found or not "
        "executable on PATH"
    )


async def test_npx_on_an_old_node_is_refused_with_the_minimum(tmp_path: Path) -> None:
    bin_dir = node_bin(tmp_path, "16.20.2")
    agents = {"backend": "acp", "acp": {"command": "npx", "env": {"PATH": str(bin_dir)}}}
    [(name, status, detail)] = lines(await acp_checks(config(agents)))
    assert (name, status) == ("agent.acp", "fail")
    minimum = ".".join(map(str, NODE_MINIMUM))
    assert detail == (
        f"acp agent agent.acp: Node.js 16.20.2 at {bin_dir / 'node'} is too old: the agent "
        f"needs Node.js {minimum} or later (docs/acp.md)"
    )


async def test_a_node_script_on_a_new_enough_node_passes(tmp_path: Path) -> None:
    bin_dir = node_bin(tmp_path, "22.3.0")
    agent = executable(bin_dir / "claude-code-acp", "#!/usr/bin/env node\n")
    agents = {"backend": "acp", "acp": {"command": str(agent), "env": {"PATH": str(bin_dir)}}}
    [(name, status, detail)] = lines(await acp_checks(config(agents)))
    assert (name, status) == ("agent.acp", "ok")
    assert detail == f"acp agent agent.acp: {agent} found, Node.js 22.3.0"


async def test_an_agent_no_chat_uses_is_not_checked(tmp_path: Path) -> None:
    agents = {"acp": {"command": "nowhere-to-be-found"}}  # backend: model everywhere
    assert lines(await acp_checks(config(agents))) == [
        ("agent.acp", "ok", "acp agent agent.acp: no chat uses it, not checked")
    ]


async def test_the_acp_socket_needs_a_directory_that_takes_it(tmp_path: Path) -> None:
    probe = SPEC.probe
    assert probe is not None
    async with httpx.AsyncClient() as client:
        missing = await probe(client, AcpSection(socket=str(tmp_path / "no" / "acp.sock")))
        fine = await probe(client, AcpSection(socket=str(tmp_path / "acp.sock")))
        default = await probe(client, AcpSection())
    assert lines(missing) == [
        (
            "acp.socket",
            "fail",
            f"acp socket {tmp_path / 'no' / 'acp.sock'}: its directory {tmp_path / 'no'} does "
            "not exist: create it (owned by botd's user) or choose another channels.acp.socket",
        )
    ]
    assert [c.status for c in fine + default] == ["ok", "ok"]
