"""A tiny ACP agent over stdio, on the Python SDK's agent side, for the tests of what botd
offers an agent beyond Claude Code's habits: terminals, and several agents at once.

Each prompt's last text is a command (after the ``[sender]`` botd puts before a group
message); the answer is one message chunk:

* ``who``: ``<AGENT_NAME> pid <its pid>`` (``AGENT_NAME`` from its environment);
* ``run LIMIT SHELL``: runs ``sh -c SHELL`` in a terminal (``LIMIT``: its
  ``outputByteLimit``, ``-`` for none), waits for it and answers ``exit <code or signal>
  truncated <bool>`` then its output on the next line;
* ``kill``: starts ``sleep 600`` in a terminal, kills it, answers ``killed <signal>``;
* ``hang SHELL``: runs ``sh -c SHELL`` in a terminal, says ``started``, and waits for it;
  a ``session/cancel`` meanwhile ends the turn ``cancelled`` once the command ended.

A request botd refuses is answered ``error <code>: <message>``.

Run as ``python shell_agent.py``.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any, cast

import acp
from acp.helpers import update_agent_message_text
from acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    TextContentBlock,
)

SENDER = re.compile(r"^\[[^\]]*\]\s*")
"""Who said a group message, as botd writes it before the text."""


class ShellAgent:
    """The agent (see the module docstring)."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._sessions = 0
        self._cancelled: set[str] = set()

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=False),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self._sessions += 1
        return NewSessionResponse(session_id=f"shell-{self._sessions}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self._cancelled.add(session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        texts = [b.text for b in prompt if isinstance(b, TextContentBlock)]
        command = SENDER.sub("", texts[-1].strip()) if texts else ""
        self._cancelled.discard(session_id)
        try:
            answer = await self._answer(session_id, command)
        except acp.RequestError as exc:
            answer = f"error {exc.code}: {exc}"
        if session_id in self._cancelled:
            return PromptResponse(stop_reason="cancelled")
        await self._say(session_id, answer)
        return PromptResponse(stop_reason="end_turn")

    async def _answer(self, session_id: str, command: str) -> str:
        verb, _, rest = command.partition(" ")
        if verb == "who":
            return f"{os.environ.get('AGENT_NAME', 'shell')} pid {os.getpid()}"
        if verb == "run":
            limit, _, shell = rest.partition(" ")
            terminal = await self._conn.create_terminal(
                session_id=session_id,
                command="sh",
                args=["-c", shell],
                output_byte_limit=None if limit == "-" else int(limit),
            )
            return await self._finished(session_id, terminal.terminal_id)
        if verb == "kill":
            terminal = await self._conn.create_terminal(
                session_id=session_id, command="sleep", args=["600"]
            )
            await self._conn.kill_terminal(session_id=session_id, terminal_id=terminal.terminal_id)
            ended = await self._conn.wait_for_terminal_exit(
                session_id=session_id, terminal_id=terminal.terminal_id
            )
            await self._conn.release_terminal(
                session_id=session_id, terminal_id=terminal.terminal_id
            )
            return f"killed {ended.signal}"
        if verb == "hang":
            terminal = await self._conn.create_terminal(
                session_id=session_id, command="sh", args=["-c", rest]
            )
            await self._say(session_id, "started")
            return await self._finished(session_id, terminal.terminal_id)
        return f"unknown command {command!r}"

    async def _finished(self, session_id: str, terminal_id: str) -> str:
        await self._conn.wait_for_terminal_exit(session_id=session_id, terminal_id=terminal_id)
        out = await self._conn.terminal_output(session_id=session_id, terminal_id=terminal_id)
        await self._conn.release_terminal(session_id=session_id, terminal_id=terminal_id)
        status = out.exit_status
        ended = status.signal or status.exit_code if status is not None else "none"
        return f"exit {ended} truncated {out.truncated}\n{out.output}"

    async def _say(self, session_id: str, text: str) -> None:
        await self._conn.session_update(
            session_id=session_id, update=update_agent_message_text(text)
        )


if __name__ == "__main__":
    asyncio.run(acp.run_agent(cast(acp.Agent, ShellAgent())))
