"""The session registry: one session per conversation, at most one agent run each, and what
to do with a message that arrives while a run is going.

``SessionManager.submit`` takes an inbound message (already deduplicated, allowed and
addressed to the bot). Chat commands are answered at once (``commands.py``). Anything else
becomes a prompt. While a run is active, the queue mode decides:

* ``collect`` (the default): messages wait and are merged into one follow-up prompt after
  the run. People often send a thought in several short messages; this answers them together
  instead of once per line.
* ``followup``: each waiting message gets its own run afterwards, in order.
* ``steer``: the message is handed to the running agent, which reads it at the next tool
  boundary; if the run ends before one, it runs next as a follow-up.
* ``interrupt``: the run is cancelled and the new message starts a fresh one.

Runs of different sessions go in parallel, capped by a global semaphore; runs of one session
never overlap, so its messages are answered strictly in order. Each run (``run.py``) writes
every message to the store, so a restarted daemon continues each conversation where it was,
and hands its replies to the delivery's run output.

Each run is logged with ``LogContext`` ids (channel, conversation, run = session id and run
number), and optional ``RunHooks`` tell the daemon when a run starts, how it ended and when its
first reply reached the chat (for metrics). ``/status`` also lists the conversation's scheduled
jobs when a ``jobs`` callable is given.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from ..agent.tools import Tool
from ..agent.types import Provider
from ..chat import InboundMessage
from ..commands import chat_command
from ..delivery import Delivery
from ..events import Message
from ..logging import LogContext
from ..store import Store
from .commands import CommandDesk
from .run import Runner
from .session import Session, user_message
from .settings import RunHooks, SessionSettings

log = logging.getLogger(__package__)


class SessionManager:
    """Owns every session; see the module docstring."""

    def __init__(
        self,
        store: Store,
        provider: Provider,
        delivery: Delivery,
        settings: SessionSettings,
        *,
        tools: Callable[[InboundMessage], Sequence[Tool]] | None = None,
        clock: Callable[[], float] = time.time,
        jobs: Callable[[str], list[str]] | None = None,
        hooks: RunHooks | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._slots = asyncio.Semaphore(settings.max_concurrent_runs)
        self._closed = False
        self._runner = Runner(
            store,
            provider,
            delivery,
            settings,
            tools or (lambda _message: ()),
            hooks or RunHooks(),
        )
        self._commands = CommandDesk(
            store,
            delivery,
            self._sessions,
            queue_mode=settings.queue_mode,
            clock=clock,
            jobs=jobs,
        )

    # -- inbound ----------------------------------------------------------------------------

    async def submit(self, message: InboundMessage) -> None:
        """Take one inbound message: a command is answered now, text becomes a prompt."""
        if self._closed:
            log.warning("message %s dropped: shutting down", message.message_id)
            return
        command = chat_command(message.text)
        if command is not None:
            await self._commands.answer(command, message)
            return
        session = self._session_for(message.conversation_key)
        mode = self._settings.queue_mode
        if session.run is not None and session.run.running:
            if mode == "steer":
                steering = user_message(message.text)
                session.steered.append(steering)
                session.run.steer(steering)
                return
            if mode == "interrupt":
                session.pending.clear()
                session.run.cancel()
        session.pending.append(message)
        session.arrived_at[id(message)] = time.monotonic()
        if session.worker is None or session.worker.done():
            session.worker = asyncio.create_task(
                self._work(session), name=f"session:{session.conversation_key}"
            )

    def status(self, conversation_key: str) -> str:
        """What the session is doing, what waits, and the conversation's scheduled jobs."""
        return self._commands.status(conversation_key)

    @property
    def sessions(self) -> dict[str, Session]:
        return self._sessions

    def _session_for(self, conversation_key: str) -> Session:
        session = self._sessions.get(conversation_key)
        now = self._clock()
        if session is None:
            record = self._store.get_or_create_session(conversation_key)
            history = self._store.load_transcript(record.session_id)
            session = Session(conversation_key, record.session_id, history, record.updated_at)
            self._sessions[conversation_key] = session
        if not session.running and self._settings.reset.is_due(session.last_activity, now):
            log.info("session %s reset by policy", conversation_key)
            record = self._store.new_session(conversation_key)
            session.session_id, session.history = record.session_id, []
            session.history_tokens = 0
        session.last_activity = now
        return session

    # -- runs -------------------------------------------------------------------------------

    def _next_prompt(self, session: Session) -> tuple[InboundMessage, list[Message], float | None]:
        """The next prompt, the message answered, and when the earliest of it arrived."""
        if self._settings.queue_mode == "collect":
            batch = list(session.pending)
            session.pending.clear()
        else:
            batch = [session.pending.popleft()]
        arrivals = [t for m in batch if (t := session.arrived_at.pop(id(m), None)) is not None]
        if not session.pending:
            session.arrived_at.clear()  # entries of messages dropped by /stop or interrupt
        text = "\n\n".join(m.text for m in batch)
        return batch[-1], [user_message(text)], min(arrivals, default=None)

    async def _work(self, session: Session) -> None:
        """Run the session's waiting messages one run at a time, in order."""
        while session.pending or (session.steered and session.last_inbound is not None):
            arrived: float | None = None
            if session.pending:
                inbound, prompt, arrived = self._next_prompt(session)
            else:
                # Steering that no tool boundary picked up runs as a follow-up.
                assert session.last_inbound is not None
                inbound, prompt = session.last_inbound, list(session.steered)
                session.steered.clear()
            session.last_inbound = inbound
            run_id = f"{session.session_id}:{session.runs_done + 1}"
            with LogContext.bind(
                channel=inbound.channel, conversation=session.conversation_key, run=run_id
            ):
                async with self._slots:
                    try:
                        await self._runner.run(session, inbound, prompt, arrived)
                        await self._runner.compact_if_needed(session)
                    except Exception:
                        log.exception("run failed in %s", session.conversation_key)

    # -- lifecycle --------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait until every session is idle."""
        while True:
            workers = [
                s.worker for s in self._sessions.values() if s.worker and not s.worker.done()
            ]
            if not workers:
                return
            await asyncio.gather(*workers, return_exceptions=True)

    async def close(self, grace: float = 10.0) -> None:
        """Stop taking input, let running turns finish within ``grace``, cancel the rest."""
        self._closed = True
        workers = [s.worker for s in self._sessions.values() if s.worker and not s.worker.done()]
        if workers:
            _, still_running = await asyncio.wait(workers, timeout=grace)
            for session in self._sessions.values():
                session.pending.clear()
                if session.run is not None:
                    session.run.cancel()
            if still_running:
                await asyncio.gather(*still_running, return_exceptions=True)


__all__ = ["SessionManager"]
