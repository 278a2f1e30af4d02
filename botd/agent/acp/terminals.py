"""The terminals botd runs for an ACP agent (``terminal/*``), when its section says
``terminals: true``.

A terminal is one command the agent asks botd to run (``terminal/create``): the program
``command`` names with ``args``, or, without ``args``, ``command`` as a line of ``sh`` (what
Claude Code sends: a shell command line, as an editor's terminal would run it); started in the
session's workspace (or a directory beneath it the agent names), with the variables an agent
process inherits from botd (``HOME``, ``PATH``…; not the section's ``env``, whose values are
secrets) plus those the request sets, stdin closed, stdout and stderr
together into one output. It runs in a process group of its own, under the limits the
reading workers set themselves (``botd.media.worker.limit_self``: CPU time, address space,
no core file), and is killed past ``TERMINAL_BUDGET.wall`` seconds.

Its output is kept up to a byte limit (the request's ``outputByteLimit``, at most
``OUTPUT_BYTES``): past it the oldest bytes go, at a character boundary, and the output is
marked truncated, as the protocol says. ``terminal/output`` answers what is kept and the exit
status once there is one; ``terminal/wait_for_exit`` waits for it; ``terminal/kill`` kills
the process group and keeps the terminal; ``terminal/release`` kills it if it still runs and
forgets it.

``Terminals`` holds the terminals of every session of one agent process: ``kill_session``
(``/stop``, ``/new``: what runs in the session is killed), ``release_session`` (the session
is over), ``close`` (the agent process is gone or botd stops).

This is not a sandbox: a terminal's command sees the host's file system and network as the
user botd runs as. Issue 38's bubblewrap ``exec`` will confine them; until then terminals are
off unless configured (docs/acp.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...media.sandbox import READ_MEMORY, Budget
from ...media.worker import limit_self

__all__ = ["OUTPUT_BYTES", "TERMINAL_BUDGET", "ExitStatus", "Terminal", "Terminals"]

log = logging.getLogger(__name__)

OUTPUT_BYTES = 1024 * 1024
"""The most of a terminal's output botd keeps (an agent may ask for less)."""
TERMINAL_BUDGET = Budget(wall=600.0, cpu=600, memory=4 * READ_MEMORY)
"""What one terminal's command may take: ten minutes, of wall clock and of CPU time, and
4 GiB of address space (more than a reading worker's: a compiler or a Node process reserves
more address space than it uses)."""
READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class ExitStatus:
    """How a terminal's command ended: its exit code, or the signal that ended it."""

    exit_code: int | None
    signal: str | None


class Terminal:
    """One command run for the agent (see the module docstring)."""

    def __init__(self, process: asyncio.subprocess.Process, limit: int, wall: float) -> None:
        self._process = process
        self._limit = limit
        self._output = bytearray()
        self.truncated = False
        self._reading = asyncio.ensure_future(self._read())
        self._deadline = asyncio.get_running_loop().call_later(wall, self._past_wall, wall)

    @property
    def running(self) -> bool:
        return self._process.returncode is None

    def output(self) -> str:
        """The output kept so far, decoded (a character cut by the limit is replaced)."""
        return self._output.decode("utf-8", errors="replace")

    def exit_status(self) -> ExitStatus | None:
        """How the command ended (None: it runs, or its output is still being read)."""
        code = self._process.returncode
        if code is None or not self._reading.done():
            return None
        if code < 0:
            return ExitStatus(None, signal.Signals(-code).name)
        return ExitStatus(code, None)

    async def wait(self) -> ExitStatus:
        """Wait for the command to end and its output to be read."""
        await asyncio.shield(self._reading)
        await self._process.wait()
        status = self.exit_status()
        assert status is not None
        return status

    def kill(self) -> None:
        """Kill the command's process group (nothing once it ended and its output closed)."""
        self._deadline.cancel()
        # A child the command left behind may still hold its output: the group is alive
        # (and its id not free for another) while the output is being read.
        if self._process.returncode is None or not self._reading.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)

    async def release(self) -> None:
        """Kill the command if it runs, and wait until it is reaped."""
        self.kill()
        await self._process.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading

    def _past_wall(self, wall: float) -> None:
        log.info("a terminal's command ran past %g s: killed", wall)
        self.kill()

    async def _read(self) -> None:
        stream = self._process.stdout
        assert stream is not None
        while chunk := await stream.read(READ_CHUNK):
            self._output += chunk
            if len(self._output) > self._limit:
                del self._output[: len(self._output) - self._limit]
                # The oldest bytes go, from a character's start: drop a cut character's rest.
                cut = 0
                while cut < len(self._output) and self._output[cut] & 0xC0 == 0x80:
                    cut += 1
                del self._output[:cut]
                self.truncated = True
        await self._process.wait()
        self._deadline.cancel()


class Terminals:
    """The terminals of one agent process, by session and id (see the module docstring)."""

    def __init__(self, environment: Mapping[str, str], budget: Budget = TERMINAL_BUDGET) -> None:
        self._environment = dict(environment)
        self._budget = budget
        self._sessions: dict[str, dict[str, Terminal]] = {}
        self._ids = itertools.count(1)

    async def create(
        self,
        session_id: str,
        cwd: Path,
        command: str,
        args: list[str],
        env: Mapping[str, str],
        output_byte_limit: int | None,
    ) -> str:
        """Start ``command`` in ``cwd``; its terminal's id. Raises ``OSError`` when it cannot
        be started (not found, not executable)."""
        limit = OUTPUT_BYTES if output_byte_limit is None else min(output_byte_limit, OUTPUT_BYTES)
        budget = self._budget
        program = [command, *args] if args else ["/bin/sh", "-c", command]
        process = await asyncio.create_subprocess_exec(
            *program,
            cwd=cwd,
            env={**self._environment, **env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: a kill reaches its children
            preexec_fn=lambda: limit_self(budget.cpu, budget.memory),
        )
        terminal_id = f"term-{next(self._ids)}"
        self._sessions.setdefault(session_id, {})[terminal_id] = Terminal(
            process, limit, budget.wall
        )
        log.info(
            "terminal %s of session %s: %s (pid %s)", terminal_id, session_id, command, process.pid
        )
        return terminal_id

    def get(self, session_id: str, terminal_id: str) -> Terminal | None:
        return self._sessions.get(session_id, {}).get(terminal_id)

    async def release(self, session_id: str, terminal_id: str) -> bool:
        """Kill and forget a terminal (False: the session has no such terminal)."""
        terminal = self._sessions.get(session_id, {}).pop(terminal_id, None)
        if terminal is None:
            return False
        await terminal.release()
        return True

    def kill_session(self, session_id: str) -> None:
        """Kill every command running in ``session_id`` (their terminals stay, until released)."""
        for terminal in self._sessions.get(session_id, {}).values():
            terminal.kill()

    async def release_session(self, session_id: str) -> None:
        """Kill and forget every terminal of ``session_id``."""
        terminals = self._sessions.pop(session_id, {})
        await asyncio.gather(*(t.release() for t in terminals.values()))

    async def close(self) -> None:
        """Kill and forget every terminal."""
        for session_id in list(self._sessions):
            await self.release_session(session_id)
