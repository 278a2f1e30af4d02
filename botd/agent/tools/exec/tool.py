"""The ``exec`` tool: the model runs a command line, sandboxed, in the conversation's
workspace.

The command runs with ``/bin/sh -c`` in bubblewrap (``bubblewrap``): the host read-only or
hidden, the conversation's workspace (``botd.workspace``: the directory the file tools and an
ACP agent of the same conversation reach) its only writable place, no network unless
``agent.exec.network``, within ``agent.exec``'s budgets. The model gets the exit status and
stdout and stderr, each cut at ``max_output_bytes`` with a note of how much more there was,
inside the untrusted marker (``tools.untrusted``).
A command past its time limit is killed with everything it started, and so is one whose run
is stopped (``/stop`` cancels the call). Commands take slots shared fairly between
conversations (``Sandbox.commands``, ``agent.exec.max_concurrent``): one conversation holds at
most all but one, so another's command never waits behind its queue. Where no sandbox can be
set up the call is refused in one line: a command never runs unsandboxed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from ....config.schema import ExecSection, WorkspaceSection
from ....media.slots import FairSlots
from ....workspace import workspace_dir
from ...types import ToolDefinition
from ..base import ToolContext, ToolOutput
from .bubblewrap import WORKSPACE, CommandResult, Limits, SandboxUnavailable, run_sandboxed

log = logging.getLogger(__name__)

_DESCRIPTION = (
    "Run a shell command line (/bin/sh -c) in a sandbox and get its exit status, stdout and "
    f"stderr. The working directory is {WORKSPACE}, this conversation's workspace and the only "
    "place where files can be written and kept; /tmp is fresh for each command. "
)
_NO_NETWORK = "The command has no network access."
_NETWORK = "The command can reach the network."

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {
            "type": "string",
            "minLength": 1,
            "description": "The command line, as /bin/sh -c takes it.",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}

EXTRA_SECONDS = 10.0
"""How much longer than the command's own limit the run waits for the call: killing and
reaping the sandbox takes a moment."""


def limits_of(section: ExecSection) -> Limits:
    """``agent.exec``'s budgets as the sandbox takes them."""
    return Limits(
        wall=section.timeout,
        cpu=section.cpu_seconds,
        memory=section.memory_mb * 2**20,
        processes=section.max_processes,
        file_bytes=section.max_file_mb * 2**20,
        output_bytes=section.max_output_bytes,
    )


def _stream(name: str, data: bytes, dropped: int) -> str:
    text = data.decode(errors="replace").removesuffix("\n")
    if dropped:
        text += f"\n[{name} cut here: {dropped} more bytes were not kept]"
    return f"{name}:\n{text}" if text else f"{name}: (empty)"


def result_text(result: CommandResult, limits: Limits) -> str:
    """What the model reads of a command's end: how it ended, then stdout and stderr."""
    if result.status is None:
        ended = f"killed: the command ran longer than its limit of {limits.wall:g} s"
    elif result.status < 0:
        ended = f"killed by signal {-result.status}"
    else:
        ended = f"exit status {result.status}"
    return "\n".join(
        [
            ended,
            _stream("stdout", result.stdout, result.stdout_dropped),
            _stream("stderr", result.stderr, result.stderr_dropped),
        ]
    )


class ExecTool:
    """The ``exec`` tool (see the module docstring)."""

    untrusted = True
    """What a command prints may come from anywhere (a file, a download): the model reads it
    inside the untrusted marker (``tools.untrusted``)."""

    def __init__(
        self,
        section: ExecSection,
        *,
        state_dir: Path,
        slots: FairSlots | None = None,
        workspace: WorkspaceSection | None = None,
    ) -> None:
        self._section = section
        self._workspace = workspace or WorkspaceSection()
        self._limits = limits_of(section)
        self._state_dir = state_dir
        self._slots = slots or FairSlots(section.max_concurrent)
        # A call may wait for a slot as long as a command may run, then run for as long.
        self.timeout: float | None = 2 * section.timeout + EXTRA_SECONDS
        description = _DESCRIPTION + (_NETWORK if section.network else _NO_NETWORK)
        self.spec = ToolDefinition(name="exec", description=description, input_schema=_SCHEMA)

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        command = str(args.get("command", ""))
        workspace = workspace_dir(
            self._state_dir,
            context.conversation_key,
            root=self._workspace.root,
            shared=self._workspace.shared,
        )
        try:
            async with contextlib.AsyncExitStack() as held:
                try:
                    async with asyncio.timeout(self._section.timeout):
                        await held.enter_async_context(self._slots.slot(context.conversation_key))
                except TimeoutError:
                    text = (
                        f"Not run: every command slot ({self._slots.slots}) stayed busy for "
                        f"{self._section.timeout:g} s; try again later."
                    )
                    return ToolOutput(text=text, is_error=True, details={"status": "busy"})
                result = await run_sandboxed(
                    self._section.bwrap,
                    workspace,
                    command,
                    self._limits,
                    network=self._section.network,
                )
        except SandboxUnavailable as exc:
            log.warning("exec refused: %s", exc)
            text = f"exec is not available here, so the command was not run: {exc}"
            return ToolOutput(text=text, is_error=True, details={"status": "unavailable"})
        failed = result.status != 0
        details: dict[str, Any] = {"status": "killed" if result.status is None else "exited"}
        if result.status is not None:
            details["exit_status"] = result.status
        return ToolOutput(
            text=result_text(result, self._limits),
            is_error=failed,
            details=details,
            untrusted_from="a command's output",
        )
