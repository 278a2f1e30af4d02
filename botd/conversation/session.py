"""One conversation's live state, and the turn its worker is on."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from ..agent.loop import AgentRun
from ..chat import InboundMessage
from ..events import Message


@dataclass(eq=False)
class Turn:
    """A batch of a conversation's messages on its way to an answer: prepared first (its
    files downloaded, transcribed, read; a run slot waited for), then run.

    ``task`` is the whole turn, owned by the session's worker. Preparing is part of the run:
    until the run starts, ``Session.cut`` cancels the task; after, it cancels the run, which
    winds down by itself (what it had not handed to the platform is dropped).
    """

    inbox_ids: list[int]
    preview: str
    """What it answers, for ``/status`` (the messages' text, or their files' names)."""
    task: asyncio.Task[None] | None = None
    over: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the turn has ended (its run's last reply out, or its preparation cut)."""
    begun: bool = False
    """The task started. The shutdown cuts a turn still preparing once it has begun; one
    that has not checks for the shutdown itself as it begins."""
    ran: bool = False
    """The run started: from then on a cut cancels the run, not the task."""
    cut: bool = False
    """Cut by ``/stop``, ``/new``, an interrupt or the shutdown."""


class Stopped(NamedTuple):
    """What ``Session.stop`` did."""

    anything: bool
    """Something was being prepared, running or waiting."""
    dropped: list[int]
    """Inbox ids dropped without a run to mark them (they waited, or were being prepared)."""
    over: asyncio.Event | None
    """Set once the cut turn has wound down (None: there was none)."""


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
    turn: Turn | None = None
    """The turn the worker is on (None between turns)."""
    after: asyncio.Event | None = None
    """Set when the turn that ``/new`` cut in the conversation's previous session is over:
    this session's worker starts after it, so the conversation never has two turns at once."""
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

    @property
    def preparing(self) -> bool:
        """A turn is being prepared (its files read, a run slot awaited) and was not cut."""
        turn = self.turn
        return turn is not None and not turn.cut and not turn.ran

    @property
    def working(self) -> bool:
        """A turn is being prepared or run, and was not cut."""
        turn = self.turn
        return turn is not None and not turn.cut and (not turn.ran or self.running)

    def cut(self) -> list[int]:
        """Cut the turn under way: its preparation at once, or its run (which winds down by
        itself). Returns the inbox ids left for the caller to mark: a cut preparation's (a
        run marks its own as it ends)."""
        turn = self.turn
        if turn is None or turn.cut:
            return []
        turn.cut = True
        if turn.ran:
            if self.run is not None:
                self.run.cancel()
            return []
        if turn.task is not None and turn.task.cancel():
            return list(turn.inbox_ids)
        return []  # it ended without a run (its files could not be read: the user was told)

    def stop(self) -> Stopped:
        """Cut the turn and drop what waits (an album's first part waits for the rest before
        its turn starts). Never waits: ``Stopped.over`` tells when the cut turn is over."""
        over = self.turn.over if self.turn is not None else None
        anything = self.working or bool(self.pending)
        dropped = [m.inbox_id for m in self.pending if m.inbox_id is not None]
        dropped += self.cut()
        self.pending.clear()
        self.steered.clear()
        self.end_wait()
        return Stopped(anything, dropped, over)


__all__ = ["Session", "Stopped", "Turn"]
