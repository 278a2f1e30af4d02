"""The ``exec`` tool's spec: its settings are ``agent.exec`` (network, budgets, the bwrap
program, whether progress shows the command). It needs no Python module, but bubblewrap and
user namespaces on the host: ``probe`` says when they are missing (``botd check``, ``botd
doctor``), and the tool then refuses each call in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....config.schema import ExecSection
from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ....config import BotdConfig
    from ..base import Tool

__all__ = ["SPEC"]


def _exec(deps: ToolDeps) -> Tool:
    from .tool import ExecTool

    section = deps.section
    assert isinstance(section, ExecSection)
    config = deps.config
    return ExecTool(
        section,
        state_dir=config.state_dir,
        slots=deps.sandbox.commands,
        workspace=config.agent.workspace,
    )


def _probe(config: BotdConfig) -> str | None:
    from .bubblewrap import sandbox_problem

    problem = sandbox_problem(config.agent.exec.bwrap, network=config.agent.exec.network)
    if problem is None:
        return None
    return f"the exec tool refuses every call (it never runs a command unsandboxed): {problem}"


SPEC = ToolSpec(name="exec", factory=_exec, section="agent.exec", probe=_probe)
