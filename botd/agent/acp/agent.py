"""The ACP agent botd drives (``agent.backend: acp``): its process and its sessions.

``AcpAgent`` runs the command its section (``agent.acp`` or one of ``agent.acp_agents``)
names as one process, started when a turn first needs it, and talks to it over its stdin
and stdout with the ``agent-client-protocol`` SDK (``acp.spawn_agent_process``: the SDK
frames the JSON-RPC). ``initialize`` offers the file methods, and terminals only when the
section says ``terminals: true``. A process that ended (it crashed, it was killed) is
noticed by the turn it fails (``botd.agent.acp.turn``: one line in the chat) and started
again for the next turn; the process's stderr goes to botd's log at DEBUG, its last lines at
WARNING when it ended unasked.

Each botd session (a conversation since its start or its last ``/new``) is one session of the
agent (``session_ids``), working in the conversation's workspace (``botd.workspace``). A turn
opens it: the session this process already has; else the one kept for it, loaded with
``session/load`` when the agent offers that (a restart of botd or of the agent; what the agent
replays of it is not shown again); else a new one, whose first prompt carries the transcript.

The agent's requests go to the turn running in their session: ``session/update`` and
``session/request_permission``; ``fs/read_text_file`` and ``fs/write_text_file`` to the
session's workspace, refused outside it; ``terminal/*`` to the process's ``Terminals``
(``terminals``) when they are on, else refused with the setting to change. A ``/stop`` kills
what the session's terminals run; a session left for another (``/new``) and a process that
ended have theirs released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
from acp.schema import (
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    EnvVariable,
    FileSystemCapabilities,
    Implementation,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)
from acp.transports import default_environment

from ... import __version__
from ...config.schema import AcpAgentSection, WorkspaceSection
from ...delivery import PlanStep
from ...events import AgentEvent
from ...workspace import Refused, Workspace, workspace_dir, workspaces_root
from .session_ids import SessionIds
from .terminals import Terminal, Terminals
from .turn import AcpTurn, Ask, Opened, PromptBlock

__all__ = ["AcpAgent"]

log = logging.getLogger(__name__)

STDERR_LINES_KEPT = 20
"""The agent's last stderr lines logged when it ends unasked."""
FRAME_LIMIT = 64 * 1024 * 1024
"""The longest line (one protocol message) read from the agent."""


@dataclass(eq=False)
class _Process:
    """One run of the agent's process, initialized."""

    conn: Any
    """The SDK's ``ClientSideConnection``."""
    process: asyncio.subprocess.Process
    stack: contextlib.AsyncExitStack
    load_session: bool
    images: bool
    sessions: set[str] = field(default_factory=set)
    """The sessions this process has (created or loaded)."""
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES_KEPT))
    closing: bool = False
    terminals: Terminals = field(default_factory=lambda: Terminals(default_environment()))
    """The terminals run for this process's sessions (none unless they are on)."""

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


class AcpAgent:
    """The configured ACP agent (see the module docstring); the turns' ``Sessions``."""

    def __init__(
        self,
        section: AcpAgentSection,
        state_dir: Path,
        *,
        key: str = "agent.acp",
        sessions_file: Path | None = None,
        workspaces: WorkspaceSection | None = None,
    ) -> None:
        self._section = section
        self._state_dir = state_dir
        self._workspace_settings = workspaces or WorkspaceSection()
        self.key = key
        """The config key of the agent's section, for what is said about it."""
        self.name = Path(section.command).name
        if section.args:
            self.name = Path(section.args[-1]).name or self.name
        self._ids = SessionIds(sessions_file or state_dir / "acp" / "sessions.json")
        self._process: _Process | None = None
        self._open_in: dict[str, str] = {}
        """The agent session each conversation last opened."""
        self._starting = asyncio.Lock()
        self._turns: dict[str, AcpTurn] = {}
        self._workspaces: dict[str, Workspace] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._client = _Client(self)

    @property
    def pid(self) -> int | None:
        """The agent's process id while it runs (None: not started, or ended)."""
        running = self._process
        return running.process.pid if running is not None and running.alive else None

    def turn(
        self,
        conversation_key: str,
        session_id: str,
        emit: Callable[[AgentEvent], None],
        *,
        on_cancel: Callable[[], None] | None = None,
        ask: Ask | None = None,
        on_plan: Callable[[PlanStep | None], None] | None = None,
    ) -> AcpTurn:
        """A turn of ``conversation_key``'s botd session ``session_id``."""
        return AcpTurn(
            self,
            conversation_key,
            session_id,
            emit,
            on_cancel=on_cancel,
            ask=ask,
            on_plan=on_plan,
            cancel_wait=self._section.cancel_wait,
        )

    async def open(self, conversation_key: str, session_id: str, turn: AcpTurn) -> Opened:
        running = await self._running()
        settings = self._workspace_settings
        where = workspace_dir(
            self._state_dir, conversation_key, root=settings.root, shared=settings.shared
        )
        workspace = Workspace(where)
        cwd = str(workspace.root)
        known = self._ids.get(session_id)
        fresh = False
        agent_session: str | None = None
        if known is not None and known in running.sessions:
            agent_session = known
        else:
            if known is not None and running.load_session:
                self._workspaces[known] = workspace
                try:
                    await running.conn.load_session(cwd=cwd, session_id=known, mcp_servers=[])
                except Exception as exc:
                    log.info("the agent's session %s was not loaded (%s): a new one", known, exc)
                else:
                    agent_session = known
            if agent_session is None:
                created = await running.conn.new_session(cwd=cwd, mcp_servers=[])
                agent_session = created.session_id
                fresh = True
                self._ids.keep(session_id, agent_session)
            running.sessions.add(agent_session)
        opened: str = agent_session
        left = self._open_in.get(conversation_key)
        if left is not None and left != opened:  # /new: the session left is over
            await running.terminals.release_session(left)
        self._open_in[conversation_key] = opened
        self._workspaces[opened] = workspace
        self._turns[opened] = turn

        async def prompt(blocks: list[PromptBlock]) -> str:
            response = await running.conn.prompt(session_id=opened, prompt=blocks)
            return str(response.stop_reason)

        async def cancel() -> None:
            running.terminals.kill_session(opened)  # /stop: what the agent runs stops too
            await running.conn.cancel(session_id=opened)

        def close() -> None:
            if self._turns.get(opened) is turn:
                del self._turns[opened]

        return Opened(opened, fresh, running.images, prompt, cancel, close)

    async def _running(self) -> _Process:
        """The agent's process, started (again) if it is not running."""
        async with self._starting:
            running = self._process
            if running is not None and running.alive:
                return running
            if running is not None:
                self._process = None
                await self._stop(running)
            self._process = await self._start()
            return self._process

    async def _start(self) -> _Process:
        section = self._section
        root = workspaces_root(self._state_dir, self._workspace_settings.root)
        root.mkdir(parents=True, exist_ok=True)
        stack = contextlib.AsyncExitStack()
        try:
            conn, process = await stack.enter_async_context(
                acp.spawn_agent_process(
                    self._client,
                    section.command,
                    *section.args,
                    env=dict(section.env),
                    cwd=root,
                    transport_kwargs={"limit": FRAME_LIMIT},
                )
            )
            started = await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                    terminal=section.terminals,
                ),
                client_info=Implementation(name="botd", title="botd", version=__version__),
            )
        except BaseException:
            await stack.aclose()
            raise
        capabilities = started.agent_capabilities
        prompts = capabilities.prompt_capabilities if capabilities is not None else None
        running = _Process(
            conn,
            process,
            stack,
            load_session=bool(capabilities is not None and capabilities.load_session),
            images=bool(prompts is not None and prompts.image),
        )
        info = started.agent_info
        if info is not None:
            self.name = info.title or info.name or self.name
        log.info("ACP agent %s started (pid %s)", self.name, process.pid)
        self._own(self._watch(running))
        return running

    def _own(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self, running: _Process) -> None:
        """Log the process's stderr; say so when it ends unasked."""
        stderr = running.process.stderr
        if stderr is not None:
            while line := await stderr.readline():
                text = line.decode("utf-8", errors="replace").rstrip()
                running.stderr.append(text)
                log.debug("%s: %s", self.name, text)
        code = await running.process.wait()
        await running.terminals.close()
        if not running.closing:
            log.warning(
                "ACP agent %s ended (exit code %s); it is started again when next needed%s",
                self.name,
                code,
                "".join(f"\n  {line}" for line in running.stderr),
            )

    async def _stop(self, running: _Process) -> None:
        running.closing = True
        try:
            await running.stack.aclose()
        except Exception as exc:
            log.debug("closing the ACP agent %s: %s", self.name, exc)
        await running.terminals.close()

    async def close(self) -> None:
        """Stop the agent's process (asked to end, then terminated, then killed)."""
        running, self._process = self._process, None
        if running is not None:
            await self._stop(running)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- the agent's requests ----------------------------------------------------------------

    def update(self, session_id: str, update: Any) -> None:
        turn = self._turns.get(session_id)
        if turn is not None:
            turn.update(update)

    async def permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        turn = self._turns.get(session_id)
        if turn is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return await turn.permission(tool_call, options)

    def workspace(self, session_id: str) -> Workspace:
        workspace = self._workspaces.get(session_id)
        if workspace is None:
            raise acp.RequestError(-32602, f"unknown session {session_id}")
        return workspace

    def terminals(self) -> Terminals:
        """The running process's terminals; refused when they are off."""
        running = self._process
        if not self._section.terminals:
            raise acp.RequestError(
                -32601, f"terminals are off for this agent (botd's {self.key}.terminals)"
            )
        if running is None:
            raise acp.RequestError(-32603, "the agent's process is not running")
        return running.terminals

    def terminal(self, session_id: str, terminal_id: str) -> Terminal:
        found = self.terminals().get(session_id, terminal_id)
        if found is None:
            raise acp.RequestError(-32002, f"unknown terminal {terminal_id}")
        return found


class _Client:
    """botd's side of the connection: what the agent may ask of it (the SDK's ``Client``)."""

    def __init__(self, agent: AcpAgent) -> None:
        self._agent = agent

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self._agent.update(session_id, update)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        return await self._agent.permission(session_id, tool_call, options)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        workspace = self._agent.workspace(session_id)
        try:
            text = await asyncio.to_thread(workspace.read_text, path, line, limit)
        except Refused as exc:
            log.info("the agent's read of %s refused: %s", path, exc)
            raise acp.RequestError(-32602, f"refused: {exc}") from None
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        workspace = self._agent.workspace(session_id)
        try:
            await asyncio.to_thread(workspace.write_text, path, content)
        except Refused as exc:
            log.info("the agent's write of %s refused: %s", path, exc)
            raise acp.RequestError(-32602, f"refused: {exc}") from None
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        terminals = self._agent.terminals()
        try:
            directory = self._agent.workspace(session_id).directory(cwd)
        except Refused as exc:
            raise acp.RequestError(-32602, f"refused: {exc}") from None
        variables = {variable.name: variable.value for variable in env or []}
        try:
            terminal_id = await terminals.create(
                session_id, directory, command, args or [], variables, output_byte_limit
            )
        except OSError as exc:
            raise acp.RequestError(-32603, f"{command}: {exc.strerror or exc}") from None
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        terminal = self._agent.terminal(session_id, terminal_id)
        status = terminal.exit_status()
        return TerminalOutputResponse(
            output=terminal.output(),
            truncated=terminal.truncated,
            exit_status=None
            if status is None
            else TerminalExitStatus(exit_code=status.exit_code, signal=status.signal),
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        status = await self._agent.terminal(session_id, terminal_id).wait()
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse:
        self._agent.terminal(session_id, terminal_id).kill()
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        if not await self._agent.terminals().release(session_id, terminal_id):
            raise acp.RequestError(-32002, f"unknown terminal {terminal_id}")
        return ReleaseTerminalResponse()

    async def create_elicitation(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError(-32601, "elicitations are not offered by this client")

    async def complete_elicitation(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise acp.RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None
