"""What botd answers to an editor's ACP requests: one ``EditorConnection`` per connection.

* ``initialize``: the protocol version (the client's, at most the SDK's), botd's name and
  version, and its capabilities: images and embedded resources in prompts, ``session/load``,
  ``session/list``.
* ``session/new``: a new session id, a conversation of the channel (``acp:<id>``). The cwd
  is kept with the session; botd's tools work in botd's own workspace, not in it. MCP
  servers the editor offers are not connected (logged): an editor's servers would run inside
  the daemon that answers every other channel too. botd's own ``agent.mcp_servers`` apply.
* ``session/load``: a session botd knows (in memory, or kept in the store after a restart)
  belongs to this connection from now on; an unknown one is ``Resource not found``. Before
  the answer, the conversation is replayed (``replay.py``): each message the user sent as a
  ``user_message_chunk``, each piece botd sent as an ``agent_message_chunk``, in the order
  the chat showed them, as far as the inbox and the outbox still hold them; and among them
  each run's tool calls with their outcome and, when reasoning is shown, its thoughts, from
  the transcript.
* ``session/list``: every session of this channel instance the store keeps (made, loaded or
  prompted, before a restart too), the most recently changed first, ``cwd`` filtering, in
  pages of ``LIST_PAGE`` with an opaque ``nextCursor``; each with its cwd, its title (the
  first line of its first prompt) and when it last changed. The store keeps each session
  when it is made, loaded and prompted.
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

import base64
import json
import logging
import uuid
from datetime import UTC, datetime
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
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SseMcpServer,
)

from ... import __version__
from ...commands import chat_command, command_argument
from ...store import EditorSession
from .replay import replayed
from .updates import PromptBlock, prompt_parts, stop_reason

if TYPE_CHECKING:  # the adapter makes a connection's EditorConnection
    from .adapter import AcpAdapter, AcpSession

log = logging.getLogger(__name__)

__all__ = ["EditorConnection"]

McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio

LIST_PAGE = 50
"""The most sessions one ``session/list`` answer holds (``nextCursor`` gives the next)."""
TITLE_CHARS = 80
"""The longest session title (the start of its first prompt)."""


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
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
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
        await self._adapter.keep(self._adapter.attach(session_id, cwd, self._client))
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
        session = self._adapter.attach(session_id, cwd, self._client)
        await self._adapter.keep(session)
        self._offered(session_id, mcp_servers)
        count = await self._replay(session)
        log.info("acp: session %s loaded (%d update(s) replayed)", session_id, count)
        return LoadSessionResponse()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        kept = self._adapter.kept
        if kept is None:  # no store: the sessions of this process
            return ListSessionsResponse(
                sessions=[
                    SessionInfo(session_id=session.session_id, cwd=session.cwd)
                    for session in self._adapter.sessions()
                    if cwd is None or session.cwd == cwd
                ]
            )
        after = _page_start(cursor) if cursor else None
        page = await kept.editor_sessions(
            self._adapter.name, cwd=cwd, after=after, limit=LIST_PAGE + 1
        )
        more = len(page) > LIST_PAGE
        page = page[:LIST_PAGE]
        return ListSessionsResponse(
            sessions=[_session_info(session) for session in page],
            next_cursor=_cursor(page[-1]) if more else None,
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
        await self._adapter.keep(session, title=_title(parts.text))
        attachments = await self._adapter.keep_files(parts.files)
        message = self._adapter.message(session, parts.text, attachments, self._editor)
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
        stop = self._adapter.message(session, "/stop", sender=self._editor, cancel=True)
        await self._adapter.hand(stop)

    def _session(self, session_id: str) -> AcpSession:
        session = self._adapter.session(session_id)
        if session is None or session.client is not self._client:
            raise RequestError(
                -32002,
                f"no session {session_id} on this connection (session/new or session/load first)",
                {"sessionId": session_id},
            )
        return session

    async def _replay(self, session: AcpSession) -> int:
        """Send the editor what ``session``'s conversation said and did, in order
        (``replay.py``: the user's messages, botd's pieces, each run's thoughts and tool
        calls). Nothing else of the session goes out meanwhile. Returns how many updates
        were sent."""
        kept = self._adapter.kept
        if kept is None:
            return 0
        key = self._adapter.conversation_key(session.session_id)
        async with session.order:
            updates = replayed(
                await kept.conversation_said(key),
                await kept.conversation_runs(key),
                thoughts=self._adapter.thoughts(),
            )
            for update in updates:
                await self._client.session_update(session.session_id, update)
        return len(updates)

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


def _title(text: str) -> str | None:
    """A session's title: the first line of its first prompt, cut to ``TITLE_CHARS``."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not line:
        return None
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def _session_info(session: EditorSession) -> SessionInfo:
    updated = datetime.fromtimestamp(session.updated_at, UTC).isoformat(timespec="seconds")
    return SessionInfo(
        session_id=session.session_id,
        cwd=session.cwd,
        title=session.title,
        updated_at=updated.replace("+00:00", "Z"),
    )


def _cursor(last: EditorSession) -> str:
    """The opaque cursor of the page after ``last``: where it is in the list's order."""
    where = json.dumps([last.updated_at, last.session_id]).encode()
    return base64.urlsafe_b64encode(where).decode()


def _page_start(cursor: str) -> EditorSession:
    """The session a ``cursor`` (``_cursor``'s) says the page starts after."""
    try:
        updated_at, session_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return EditorSession(str(session_id), "", None, float(updated_at))
    except (ValueError, TypeError):
        raise RequestError.invalid_params({"cursor": "not a cursor this agent gave"}) from None
