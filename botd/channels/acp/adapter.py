"""The ACP channel: editors drive botd's agent over the Agent Client Protocol.

The adapter serves ACP (JSON-RPC, one JSON object a line: the ``agent-client-protocol`` SDK's
``AgentSideConnection``) on a Unix socket, ``<state_dir>/acp.sock`` unless ``channels.acp.socket``
names another, created with mode 0600: only botd's own user can connect, and whoever does is
the channel's one user (no access settings, as on the console). ``botd acp`` bridges an
editor's stdio to it (``botd.cli.acp``). Several editors may connect at once; each ACP
session is a conversation of its own (``acp:<session id>``), and belongs to the connection
that created or last loaded it.

What each request does is ``EditorConnection``'s (``sessions.py``). What the delivery sends
to a session goes to its editor as ``session/update``s: every reply block and command answer
is an ``agent_message_chunk`` (blocks after the first of a turn are set apart by a blank
line), and buttons (an approval's Approve / Deny) are a ``session/request_permission`` whose
answer comes back through the sink as the press of the chosen button, so the approvals gate
decides it as it decides a press in a chat. The run's events (``RunFollower``) add the tool
calls and thoughts (``updates.py``), and the run's end answers the turn's ``session/prompt``
with its stop reason. Everything one session is sent goes out in the order it was made.

Each line an editor sends must be one JSON object: any other line is answered with a
JSON-RPC ``Parse error`` (or ``Invalid Request`` for a batch) and the connection goes on.

A session with no editor connected (the editor went away, or the daemon restarted while a run
was answering) sends nothing: the answer stays in botd's inbox and outbox, and
``session/load`` attaches the session to a new connection and replays what the conversation
said and did (``sessions.py``, ``replay.py``). The sessions are kept in the store (``keep``,
``EditorSessions``) so that they are known and listed after a restart; a prompt's files are
kept in the state dir (``prompt_files.py``) so that a run resumed after a restart still
reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from acp import update_agent_message_text
from acp.core import AgentSideConnection
from acp.interfaces import Agent, Client
from acp.schema import (
    AllowedOutcome,
    PermissionOption,
    PermissionOptionKind,
    ToolCallUpdate,
)

from ...chat import (
    Attachment,
    Button,
    Capabilities,
    InboundMessage,
    MessageRef,
    Press,
    Target,
)
from ...events import AgentEvent
from ...store import EditorSessions, StoreError
from ...text.markup import PLAIN
from ..base import ChannelAdapter, InboundSink, SendScope
from ..errors import ChannelStartError
from .prompt_files import PromptFiles
from .targets import acp_conversation_key
from .updates import CANCEL_ID, FAILED_TEXT, STOP_ANSWERS, PromptFile, RunUpdates, failed

log = logging.getLogger(__name__)

PLATFORM = "acp"
MAX_LINE_BYTES = 50 * 1024 * 1024
"""The longest JSON-RPC line read (a prompt with images is large)."""

__all__ = ["PLATFORM", "AcpAdapter", "AcpSession"]


@dataclass(eq=False)
class AcpSession:
    """One ACP session: its conversation, the editor it belongs to now, its open turn."""

    session_id: str
    cwd: str
    client: Client | None = None
    turns: list[asyncio.Future[str]] = field(default_factory=list)
    """The ``session/prompt`` requests waiting for their run's end (one, by the protocol)."""
    command: bool = False
    """The open turn is a chat command (``/new``): its answer ends it, no run follows."""
    shown: bool = False
    """Something of the open turn was sent already (the next block is set apart)."""
    cancelled: bool = False
    """A ``session/cancel`` sent a ``/stop``, whose answer is not shown."""
    updates: RunUpdates = field(default_factory=RunUpdates)
    order: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while something is sent: updates go out in the order they were made."""
    sending: set[asyncio.Task[None]] = field(default_factory=set)
    """The run's updates on their way (the turn ends after them)."""

    def open_turn(self, *, command: bool) -> asyncio.Future[str]:
        turn: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.turns.append(turn)
        self.command, self.shown, self.cancelled = command, False, False
        return turn

    def end_turns(self, outcome: str) -> None:
        for turn in self.turns:
            if not turn.done():
                turn.set_result(outcome)
        self.turns.clear()
        self.command = False


class AcpAdapter(ChannelAdapter):
    """See the module docstring."""

    capabilities = Capabilities(text_limit=1_000_000, markup=PLAIN, can_edit=False)

    def __init__(
        self,
        *,
        channel: str = PLATFORM,
        socket_path: Path,
        has_conversation: Callable[[str], Awaitable[bool]] | None = None,
        kept: EditorSessions | None = None,
        files_dir: Path | None = None,
        thoughts: Callable[[], bool] = lambda: False,
    ) -> None:
        self.name = channel
        self.socket_path = socket_path
        self._has_conversation = has_conversation
        self.kept = kept
        """Where the sessions are kept across restarts (None: in this process only)."""
        self.thoughts = thoughts
        """Whether editors are shown the model's thinking now (``agent.reasoning`` not
        ``off``): the runs' events bring it live; a replay shows it only then too."""
        self._sink: InboundSink | None = None
        self._server: asyncio.Server | None = None
        self._sessions: dict[str, AcpSession] = {}
        self._files = PromptFiles(files_dir)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count(1)

    # -- the socket ------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        path = self.socket_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # This daemon holds the state dir: a socket left there is a dead daemon's.
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            old = os.umask(0o177)  # created 0600: no moment where others could connect
            try:
                self._server = await asyncio.start_unix_server(
                    self._serve, path=str(path), limit=MAX_LINE_BYTES
                )
            finally:
                os.umask(old)
        except OSError as exc:
            raise ChannelStartError(f"acp: cannot serve on {path}: {exc.strerror or exc}") from exc
        log.info("acp: serving editors on %s", path)
        self._own(self._files.pruning())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from .sessions import EditorConnection

        frames = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        # An EditorConnection has the methods botd serves; the SDK's router answers the
        # others (set_session_mode…) "Method not found" by looking them up.
        connection = AgentSideConnection(
            lambda client: cast(Agent, EditorConnection(self, client)),
            writer,
            frames,
            listening=False,
        )
        checking = asyncio.create_task(_checked_frames(reader, frames, writer))
        try:
            await connection.listen()
        except Exception as exc:
            log.warning("acp: an editor's connection failed: %s", exc)
        finally:
            checking.cancel()
            await asyncio.gather(checking, return_exceptions=True)
            for session in self._sessions.values():
                if session.client is connection:
                    session.client = None
            with contextlib.suppress(Exception):
                await connection.close()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def stop_inbound(self) -> None:
        """No new editor connects; the connected ones still get their answers."""
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        await self.stop_inbound()
        for session in self._sessions.values():
            session.end_turns("cancelled")
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()

    # -- sessions, for EditorConnection -----------------------------------------------------

    def session(self, session_id: str) -> AcpSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[AcpSession]:
        return list(self._sessions.values())

    def attach(self, session_id: str, cwd: str, client: Client) -> AcpSession:
        """The session ``session_id`` (made if new), belonging to ``client`` from now on."""
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = AcpSession(session_id, cwd)
        session.cwd, session.client = cwd, client
        return session

    def conversation_key(self, session_id: str) -> str:
        return acp_conversation_key(self.name, session_id)

    async def known(self, session_id: str) -> bool:
        """Whether botd has a conversation for ``session_id`` (in memory or in the store)."""
        if session_id in self._sessions:
            return True
        if self.kept is not None and await self.kept.editor_session(self.name, session_id):
            return True
        if self._has_conversation is None:
            return False
        return await self._has_conversation(self.conversation_key(session_id))

    async def keep(self, session: AcpSession, title: str | None = None) -> None:
        """Record in the store that ``session`` was made, loaded or prompted now (so that
        ``session/list`` lists it after a restart). A store that fails is logged: the
        session goes on, unlisted (the prompt's own accept says whether the store takes it)."""
        if self.kept is None:
            return
        try:
            await self.kept.keep_editor_session(
                self.name, session.session_id, session.cwd, title=title
            )
        except StoreError as exc:
            log.warning("acp: session %s was not kept: %s", session.session_id, exc)

    async def keep_files(self, files: Sequence[PromptFile]) -> tuple[Attachment, ...]:
        """Write a prompt's ``files`` to the state dir (``prompt_files``): the attachments
        naming them, for the message."""
        return tuple([replace(f.attachment, ref=await self._files.keep(f.data)) for f in files])

    def message(
        self,
        session: AcpSession,
        text: str,
        attachments: Sequence[Attachment] = (),
        sender: str = "",
        *,
        cancel: bool = False,
    ) -> InboundMessage:
        """An inbound message of ``session`` saying ``text`` with ``attachments`` (files
        ``keep_files`` wrote); ``cancel``: the ``/stop`` a ``session/cancel`` sends, which a
        replay leaves out (its id starts with ``CANCEL_ID``)."""
        return InboundMessage(
            channel=self.name,
            chat_id=session.session_id,
            sender_id="editor",
            sender_name=sender,
            text=text,
            # Unique across restarts: never "already seen".
            message_id=(CANCEL_ID if cancel else "") + uuid.uuid4().hex,
            conversation_key=self.conversation_key(session.session_id),
            is_direct=True,
            mentions_bot=True,
            attachments=tuple(attachments),
        )

    async def hand(self, message: InboundMessage) -> object:
        """Hand ``message`` to the sink (the router): what it decided."""
        if self._sink is None:
            raise RuntimeError("acp: the channel is not started")
        return await self._sink(message)

    # -- what the delivery sends ------------------------------------------------------------

    def _ref(self, target: Target) -> MessageRef:
        return MessageRef(target, f"acp-{os.getpid()}-{next(self._ids)}")

    async def _update(self, session: AcpSession, update: Any) -> None:
        """Send ``update`` to ``session``'s editor, after what was made before it."""
        async with session.order:
            client = session.client
            if client is None:
                return
            try:
                await client.session_update(session.session_id, update)
            except Exception as exc:  # the editor went away: nothing to retry
                log.info("acp: session %s: an update was not sent: %s", session.session_id, exc)

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        session = self._sessions.get(target.chat_id)
        if session is not None:
            if session.cancelled and markdown.strip() in STOP_ANSWERS:
                session.cancelled = False
            else:
                text = f"\n\n{markdown}" if session.shown else markdown
                session.shown = True
                await self._update(session, update_agent_message_text(text))
                if session.command:  # a command's answer: its turn is over
                    session.end_turns("end_turn")
        return [self._ref(target)]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """An editor shows chunks as they come: a change is sent as more text."""
        return await self.send(ref.target, markdown, scope=scope)

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        return None

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await self._files.read(attachment.ref, max_bytes)

    # -- buttons: a permission request ------------------------------------------------------

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Ask the editor with ``session/request_permission``: each button an option. The
        choice comes back through the sink as that button's press."""
        ref = self._ref(target)
        session = self._sessions.get(target.chat_id)
        if session is not None and session.client is not None:
            self._own(self._ask(session, ref, markdown, [b for row in rows for b in row]))
        return [ref]

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """The editor closed its permission prompt when it answered: nothing to change."""
        return None

    async def _ask(
        self, session: AcpSession, ref: MessageRef, question: str, buttons: list[Button]
    ) -> None:
        client = session.client
        if client is None:
            return
        options = [
            PermissionOption(option_id=button.value, name=button.label, kind=_option_kind(button))
            for button in buttons
        ]
        call_id = session.updates.current_call or ref.message_id
        try:
            answer = await client.request_permission(
                session_id=session.session_id,
                tool_call=ToolCallUpdate(tool_call_id=call_id, title=question),
                options=options,
            )
        except Exception as exc:
            log.warning("acp: session %s: asking permission failed: %s", session.session_id, exc)
            return
        outcome = answer.outcome
        if not isinstance(outcome, AllowedOutcome):
            return  # cancelled: the turn is being cancelled, the run stops the wait
        chosen = next((b for b in buttons if b.value == outcome.option_id), None)
        if chosen is None:
            log.warning("acp: session %s: the editor chose no option offered", session.session_id)
            return
        press = self.message(session, f"(pressed: {chosen.label})")
        press = _as_press(press, Press(press.message_id, chosen.value, ref.message_id))
        try:
            await self.hand(press)
        except Exception:
            log.exception("acp: session %s: the editor's answer was not taken", session.session_id)

    # -- the run, as it happens (RunFollower) ----------------------------------------------

    def run_event(self, target: Target, event: AgentEvent) -> None:
        session = self._sessions.get(target.chat_id)
        if session is None or session.client is None:
            return
        for update in session.updates.of(event):
            task = self._own(self._update(session, update))
            session.sending.add(task)
            task.add_done_callback(session.sending.discard)

    async def run_over(self, target: Target, outcome: str) -> None:
        session = self._sessions.get(target.chat_id)
        if session is None:
            return
        if session.sending:  # every update the run made goes out before its turn ends
            await asyncio.wait(set(session.sending))
        if failed(outcome) and not session.shown and session.turns:
            await self._update(session, update_agent_message_text(FAILED_TEXT))
        session.end_turns(outcome)

    def _own(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """``work`` as a task this adapter owns (cancelled and awaited by ``stop``)."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


async def _checked_frames(
    reader: asyncio.StreamReader, frames: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Pass each line of ``reader`` that is a JSON object on to ``frames`` (the SDK's input);
    answer any other line with JSON-RPC's ``Parse error`` (a batch, which ACP does not use:
    ``Invalid Request``) naming what was wrong, where the SDK would only log it. The
    connection goes on."""
    try:
        while line := await reader.readline():
            if not line.strip():
                continue
            try:
                frame = json.loads(line)
            except ValueError as exc:
                _refuse(writer, -32700, f"Parse error: not JSON ({exc})")
                continue
            if not isinstance(frame, dict):
                _refuse(writer, -32600, "Invalid Request: a frame is one JSON object (no batches)")
                continue
            frames.feed_data(line if line.endswith(b"\n") else line + b"\n")
    except (ValueError, ConnectionError) as exc:  # a line over the limit, a reset
        log.warning("acp: reading an editor's connection failed: %s", exc)
    finally:
        frames.feed_eof()


def _refuse(writer: asyncio.StreamWriter, code: int, message: str) -> None:
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    writer.write(json.dumps(error).encode() + b"\n")


def _option_kind(button: Button) -> PermissionOptionKind:
    """An approval's Deny is a rejection; any other button allows once."""
    return "reject_once" if button.value.endswith(":deny") else "allow_once"


def _as_press(message: InboundMessage, press: Press) -> InboundMessage:
    return replace(message, press=press, dedupe_keys=(f"press:{press.callback_id}",))
