"""One conversation's live state."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from ..agent.loop import AgentRun
from ..chat import InboundMessage
from ..events import Message


@dataclass(eq=False)
class Session:
    """One conversation's live state (its transcript lives in the store)."""

    conversation_key: str
    session_id: str
    history: list[Message]
    last_activity: float
    pending: deque[InboundMessage] = field(default_factory=deque)
    run: AgentRun | None = None
    worker: asyncio.Task[None] | None = None
    steered: list[Message] = field(default_factory=list)
    """Steering handed to the running agent; what it did not read runs next."""
    last_inbound: InboundMessage | None = None
    runs_done: int = 0
    """Runs of this session that ended (counted on from the store after a restart)."""
    runs_started: int = 0
    """Runs this session started, counted on from the store: the latest run's number."""
    history_tokens: int = -1
    """Estimated tokens of ``history``, kept up to date (-1: not counted yet)."""
    arrived_at: dict[int, float] = field(default_factory=dict)
    """``time.monotonic()`` at submit, by ``id()`` of the waiting message (for latency)."""
    working_on: str = ""
    """The running prompt's text (for ``/status``)."""
    resumed: dict[int, int] = field(default_factory=dict)
    """Inbox ids whose interrupted run continues from the transcript, to their user turn's
    transcript row (messages of one batch share it)."""
    steered_ids: list[int] = field(default_factory=list)
    """Inbox ids of steering handed to the running agent (answered with its run)."""
    reset_notice: str | None = None
    """Why the reset policy just started the conversation over, for its next run to say."""
    wake: asyncio.Event | None = None
    """Set while the worker waits for an album or burst to be complete; ``stop`` sets it."""

    def end_wait(self) -> None:
        """A worker waiting for more of an album or burst stops waiting now."""
        if self.wake is not None:
            self.wake.set()

    @property
    def run_id(self) -> str:
        """The id of the session's latest run: ``session_id:number``, unique across restarts."""
        return f"{self.session_id}:{self.runs_started}"

    @property
    def running(self) -> bool:
        return self.run is not None and self.run.running

    async def stop(self) -> bool:
        """Cancel the run and drop what waits; True when something was running or waiting (an
        album's first part waits for the rest before its run starts)."""
        stopped = self.running or bool(self.pending)
        self.pending.clear()
        self.steered.clear()
        self.end_wait()
        if self.run is not None:
            self.run.cancel()
        if self.worker is not None:
            await asyncio.gather(self.worker, return_exceptions=True)
        return stopped


__all__ = ["Session"]
