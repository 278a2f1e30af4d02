"""What botd answers to an editor's ACP requests: one ``EditorConnection`` per connection.

* ``initialize``: the protocol version (the client's, at most the SDK's), botd's name and
  version, and its capabilities: images and embedded resources in prompts, ``session/load``.
* ``session/new``: a new session id, a conversation of the channel (``acp:<id>``). The cwd
  is kept with the session; botd's tools work in botd's own workspace, not in it. MCP
  servers the editor offers are not connected (logged): an editor's servers would run inside
  the daemon that answers every other channel too. botd's own ``agent.mcp_servers`` apply.
* ``session/load``: a session botd knows (in memory, or a conversation in the store after a
  restart) belongs to this connection from now on; an unknown one is ``Resource not found``.
  Its earlier turns are not sent again: the model still has them.
* ``session/list``: the sessions this daemon served since it started.
* ``session/prompt``: the prompt becomes one inbound message (``updates.prompt_parts``) handed
  to the router like any channel's, so it is accepted into the durable inbox before anything
  runs; the request is answered when its run is over, with the run's stop reason. A chat
  command (``/new``, ``/status``) ends its turn with its answer. A message the router does not
  accept ends the turn at once.
* ``session/cancel``: a ``/stop`` for the session, through the router as typed in a chat;
  the run ends ``cancelled`` and its turn with it.

A malformed request (params the schema refuses) is answered ``Invalid params`` and an unknown
method ``Method not found`` by the SDK's router; the connection goes on.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from acp import PROTOCOL_VERSION, RequestError
from acp.interfaces import Client
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    ClientCapabilities,
    HttpMcpServer,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpServerStdio,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionInfo,
    SseMcpServer,
)

from ... import __version__
from ...commands import chat_command, command_argument
from .updates import PromptBlock, prompt_parts, stop_reason

if TYPE_CHECKING:  # the adapter makes a connection's EditorConnection
    from .adapter import AcpAdapter, AcpSession

log = logging.getLogger(__name__)

__all__ = ["EditorConnection"]

McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio


class EditorConnection:
    """The ``acp.Agent`` of one editor's connection (see the module docstring)."""

    def __init__(self, adapter: AcpAdapter, client: Client) -> None:
        self._adapter = adapter
        self._client = client
        self._editor = ""

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self._editor = client_info.name if client_info is not None else ""
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(
                    image=True, embedded_context=True, audio=False
                ),
            ),
            agent_info=Implementation(name="botd", title="botd", version=__version__),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = uuid.uuid4().hex
        self._adapter.attach(session_id, cwd, self._client)
        self._offered(session_id, mcp_servers)
        log.info("acp: new session %s (cwd %s)", session_id, cwd)
        return NewSessionResponse(session_id=session_id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        if not await self._adapter.known(session_id):
            raise RequestError(-32002, f"no session {session_id} here", {"sessionId": session_id})
        self._adapter.attach(session_id, cwd, self._client)
        self._offered(session_id, mcp_servers)
        log.info("acp: session %s loaded", session_id)
        return LoadSessionResponse()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        return ListSessionsResponse(
            sessions=[
                SessionInfo(session_id=session.session_id, cwd=session.cwd)
                for session in self._adapter.sessions()
                if cwd is None or session.cwd == cwd
            ]
        )

    async def prompt(
        self, prompt: list[PromptBlock], session_id: str, **kwargs: Any
    ) -> PromptResponse:
        session = self._session(session_id)
        try:
            parts = prompt_parts(prompt)
        except ValueError as exc:
            raise RequestError.invalid_params({"prompt": str(exc)}) from None
        if not parts.text and not parts.files:
            raise RequestError.invalid_params({"prompt": "the prompt says nothing"})
        message = self._adapter.message(session, parts.text, parts.files, self._editor)
        turn = session.open_turn(command=_command_alone(parts.text) and not parts.files)
        decision = await self._adapter.hand(message)
        if not getattr(decision, "accepted", True):
            reason = getattr(decision, "reason", "")
            log.info("acp: session %s: the prompt was not taken: %s", session_id, reason)
            session.end_turns("end_turn")
        outcome = await turn
        return PromptResponse(stop_reason=stop_reason(outcome))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._adapter.session(session_id)
        if session is None or not session.turns:
            return
        session.cancelled = True
        await self._adapter.hand(self._adapter.message(session, "/stop", sender=self._editor))

    def _session(self, session_id: str) -> AcpSession:
        session = self._adapter.session(session_id)
        if session is None or session.client is not self._client:
            raise RequestError(
                -32002,
                f"no session {session_id} on this connection (session/new or session/load first)",
                {"sessionId": session_id},
            )
        return session

    def _offered(self, session_id: str, servers: list[McpServer] | None) -> None:
        if servers:
            log.info(
                "acp: session %s: the editor offered %d MCP server(s); botd does not connect "
                "an editor's servers (see docs/acp.md)",
                session_id,
                len(servers),
            )


def _command_alone(text: str) -> bool:
    """Whether ``text`` is a chat command answered without a run (``/new <text>`` starts
    over and runs on ``<text>``: its turn ends with that run)."""
    command = chat_command(text)
    if command is None:
        return False
    return not (command in ("/new", "/reset") and command_argument(text))
