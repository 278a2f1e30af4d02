"""A conversation's session as this process holds it, and the turn its worker is on.

A *session* is a conversation's transcript since its start or its last ``/new``: ``/new``
gives the conversation a new ``Session``; a run still winding down in the old one keeps
its own (what it adds goes to the old transcript, which nothing reads again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ..agent.compaction import CompactionResult, estimate_tokens
from ..agent.loop import AgentTurn
from ..chat import InboundMessage
from ..events import Message
from .queue import Waiting


@dataclass(eq=False)
class Session:
    """One session's transcript in memory and its run count (the store holds the truth)."""

    conversation_key: str
    session_id: str
    history: list[Message]
    runs_done: int = 0
    """Runs of this session that ended (counted on from the store after a restart)."""
    runs_started: int = 0
    """Runs this session started, counted on from the store: the latest run's number."""
    history_tokens: int = -1
    """Estimated tokens of ``history``, kept up to date (-1: not counted yet)."""
    reset_notice: str | None = None
    """Why the reset policy just started the conversation over, for its next run to say."""

    @property
    def run_id(self) -> str:
        """The id of the session's latest run: ``session_id:number``, unique across restarts."""
        return f"{self.session_id}:{self.runs_started}"

    def run_starts(self) -> str:
        """A run starts: its id."""
        self.runs_started += 1
        return self.run_id

    def run_kept(self, added: Sequence[Message]) -> None:
        """A run ended and what it added is in the transcript."""
        self.history.extend(added)
        if self.history_tokens >= 0:
            self.history_tokens += estimate_tokens(added)
        self.runs_done += 1

    def run_lost(self) -> None:
        """A run ended and what it added could not be stored: the history stays as stored."""
        self.runs_done += 1

    def compacted(self, result: CompactionResult) -> None:
        """The transcript was compacted whole."""
        self.history = list(result.messages)
        self.history_tokens = result.tokens_after

    def compacted_during_run(self, result: CompactionResult) -> None:
        """A run's compaction, stored after the run: what followed it in the history stays."""
        compacted = result.compacted_count + len(result.kept)
        self.history = [*result.messages, *self.history[compacted:]]
        self.history_tokens = -1  # counted again when next needed

    def rewritten(self, history: list[Message]) -> None:
        """Messages of the history changed in place (images left out)."""
        self.history = history
        self.history_tokens = -1

    def take_reset_notice(self) -> str | None:
        notice, self.reset_notice = self.reset_notice, None
        return notice


@dataclass(eq=False)
class Turn:
    """A batch of a conversation's messages on its way to an answer: prepared first (its
    files downloaded, transcribed, read; a run slot waited for), then run.

    ``task`` is the whole turn, owned by the conversation's worker. Preparing is part of the
    run: until the run starts, a cut cancels the task; after, it cancels the run, which
    winds down by itself (what it had not handed to the platform is dropped).
    """

    session: Session
    """The session it runs in (a ``/new`` meanwhile does not move it)."""
    inbound: InboundMessage
    """The message it answers for (the batch's last)."""
    prompt: list[Message]
    """Its user turn (empty for a resumed run: its turn is in the transcript)."""
    batch: list[Waiting]
    ids: list[int]
    """The entries it answers."""
    resumed: bool = False
    preview: str = ""
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
    agent: AgentTurn | None = None
    """The agent run, while it runs."""
    working_on: str = ""
    """The running prompt's text (for ``/status``)."""

    @property
    def arrived(self) -> float | None:
        """When the earliest of its messages arrived (None: steering run as a follow-up)."""
        return min((w.arrived for w in self.batch), default=None)

    @property
    def running(self) -> bool:
        return self.agent is not None and self.agent.running


class Stopped(NamedTuple):
    """What ``Conversation.stop`` did."""

    anything: bool
    """Something was being prepared, running or waiting."""
    over: asyncio.Event | None
    """Set once the cut turn has wound down (None: there was none)."""


__all__ = ["Session", "Stopped", "Turn"]
