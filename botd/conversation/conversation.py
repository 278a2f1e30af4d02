"""``Conversation``: one conversation key's queue, worker, current turn and session.

The worker takes waiting messages one *turn* at a time (``Turn``): the turn is prepared (the
messages' files downloaded, transcribed, read; a run slot waited for) and then run. Preparing
is part of the run: ``/stop``, ``/new``, an interrupt or the shutdown cut it at once (the
turn is a task of its own, awaited by the worker), and nothing of its messages is said after
that. No command waits for a turn: ``stop`` and ``start_over`` return at once with the event
that tells when the cut turn has wound down, and the worker takes the next turn only after
it, so a conversation never has two turns at once and its messages are answered in order.

Its entries move through their states by ``Promise`` (``promise.py``); the queue mode of
its chat (``queue.py``; the chat's topic's, group's, channel's or the agent's, asked per
message so a reload applies to the next) decides what a message arriving during a turn does
and what the next turn takes. The conversation's parts are its own: the registry, the
commands and the run call its methods, and none sets its fields.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..agent.loop import AgentTurn
from ..chat import InboundMessage
from ..cluster.fencing import RunScope
from ..delivery import Delivery
from ..events import Message, TextContent
from ..media import MediaResolver
from ..ops.logging import LogContext
from ..store.protocols import ConversationLedger
from .promise import Promise
from .prompt import media_user_turn, user_turn
from .queue import (
    QueueStrategy,
    Steering,
    Waiting,
    Windows,
    resumed_turn,
    same_album,
    steering_goes_first,
)
from .run import Runner
from .session import Session, Stopped, Turn
from .settings import ResetPolicy
from .tasks import TaskOwner

log = logging.getLogger(__package__)


@dataclass(frozen=True, slots=True)
class Shared:
    """What every conversation of a registry shares (each has its own ``Work``)."""

    delivery: Delivery
    media: MediaResolver
    queue: Callable[[InboundMessage], QueueStrategy]
    """The queue mode of a message's chat (its topic's, group's, channel's or the agent's)."""
    windows: Windows
    reset: ResetPolicy
    clock: Callable[[], float]
    slots: asyncio.Semaphore
    """The global cap on runs at once."""
    closing: Callable[[], bool]
    """True once the registry shuts down."""
    workers: TaskOwner
    """The owner of every conversation's worker task."""


@dataclass(frozen=True, slots=True)
class Work:
    """One conversation's work on this node, bound to its ``RunScope`` (given when this node
    took the conversation): the store's view fenced by its lease, and the promise and the
    runner over that view, whose sends are made for the scope."""

    scope: RunScope
    ledger: ConversationLedger
    promise: Promise
    runner: Runner


class Conversation:
    """One conversation key (see the module docstring)."""

    def __init__(
        self, key: str, session: Session, last_activity: float, shared: Shared, work: Work
    ) -> None:
        self.key = key
        self._scoped = work
        self._session = session
        self._last_activity = last_activity
        self._shared = shared
        self._pending: deque[Waiting] = deque()
        self._turn: Turn | None = None
        self._worker: asyncio.Task[None] | None = None
        self._steering = Steering()
        self._resumed: dict[int, int] = {}
        """Entries whose interrupted run goes on from the transcript, to their user turn's
        transcript row (messages of one batch share it)."""
        self._last_inbound: InboundMessage | None = None
        self._wake: asyncio.Event | None = None
        """Set while the worker waits for an album or burst to be complete."""
        self._abandoned = False
        """Let go by this node (``abandon``): a run cut now ends nothing."""

    # -- what others read -------------------------------------------------------------------

    @property
    def scope(self) -> RunScope:
        """What the conversation's work runs under on this node (its lease's fence)."""
        return self._scoped.scope

    @property
    def session(self) -> Session:
        return self._session

    @property
    def session_id(self) -> str:
        return self._session.session_id

    @property
    def history(self) -> Sequence[Message]:
        """The session's transcript as this process holds it."""
        return self._session.history

    @property
    def runs_done(self) -> int:
        return self._session.runs_done

    @property
    def pending(self) -> tuple[InboundMessage, ...]:
        """The messages waiting for a turn, in order."""
        return tuple(w.message for w in self._pending)

    @property
    def running(self) -> bool:
        return self._turn is not None and self._turn.running

    @property
    def preparing(self) -> bool:
        """A turn is being prepared (its files read, a run slot awaited) and was not cut."""
        turn = self._turn
        return turn is not None and not turn.cut and not turn.ran

    @property
    def working(self) -> bool:
        """A turn is being prepared or run, and was not cut."""
        turn = self._turn
        return turn is not None and not turn.cut and (not turn.ran or turn.running)

    @property
    def idle(self) -> bool:
        """Nothing is prepared, run, waiting or steering, and the worker has ended."""
        return (
            self._turn is None
            and not self._pending
            and not self._steering
            and (self._worker is None or self._worker.done())
        )

    def resumes(self, inbox_id: int) -> bool:
        """Whether the entry's interrupted run goes on from the transcript."""
        return inbox_id in self._resumed

    def status_lines(self, queue_mode: str) -> list[str]:
        """What the conversation is doing and what waits, for ``/status``."""
        session, working = self._session, self.working
        lines = [
            f"Session {session.session_id[:8]}: {'working' if working else 'idle'}, "
            f"{len(self._pending)} waiting, {len(session.history)} messages, "
            f"{session.runs_done} runs, queue mode {queue_mode}."
        ]
        turn = self._turn
        if self.preparing and turn is not None:
            # Its files are being fetched and read (or it waits for a run slot).
            lines.append(f"Preparing: {_short(turn.preview)}")
        elif working and turn is not None:
            lines.append(f"Working on: {_short(turn.working_on)}")
        lines += [f"Waiting: {_short(w.message.text)}" for w in self._pending]
        return lines

    # -- what arrives -----------------------------------------------------------------------

    def resume_from(self, inbox_id: int, user_turn_id: int) -> None:
        """A restart: the entry's interrupted run goes on from its user turn's row."""
        self._resumed[inbox_id] = user_turn_id

    async def take(self, message: InboundMessage) -> None:
        """A message for the conversation (not a command): queued, or by the queue mode
        steering or interrupting the turn under way."""
        shared = self._shared
        await self._reset_if_due()
        if self.working:
            agent = self._turn_agent()
            arrival = shared.queue(message).arriving(message, running=agent is not None)
            # A message waiting its turn came first: this one waits behind it, not steering
            # the run past it (answers keep the order their messages came in).
            if arrival == "steer" and agent is not None and not self._pending:
                steering = user_turn([message])
                self._steering.add(steering, message.inbox_id)
                agent.steer(steering)
                return
            if arrival == "interrupt":
                # Earlier parts of this message's album stay: they are answered with it.
                siblings = [w for w in self._pending if same_album(w.message, message)]
                dropped = [w.message.inbox_id for w in self._pending if w not in siblings]
                dropped += self._cut()  # a turn being prepared, or its run
                self._scoped.promise.skipped(dropped)
                self._pending = deque(siblings)
        self._pending.append(Waiting(message, shared.windows.timer.now()))
        if self._worker is None or self._worker.done():
            self._worker = shared.workers.spawn(self._work(), f"conversation:{self.key}")

    async def _reset_if_due(self) -> None:
        shared, now = self._shared, self._shared.clock()
        if not self.running and shared.reset.is_due(self._last_activity, now):
            log.info("session %s reset by policy", self.key)
            record = await self._scoped.ledger.start_session(self.key)
            self._session = Session(self.key, record.session_id, [], history_tokens=0)
            self._session.reset_notice = shared.reset.notice()
        self._last_activity = now

    def _turn_agent(self) -> AgentTurn | None:
        return None if self._turn is None else self._turn.agent

    # -- commands ---------------------------------------------------------------------------

    def stop(self) -> Stopped:
        """``/stop``: cut the turn and drop what waits (skipped). Never waits:
        ``Stopped.over`` tells when the cut turn is over."""
        over = self._turn.over if self._turn is not None else None
        anything = self.working or bool(self._pending)
        self._resumed.clear()
        dropped = [w.message.inbox_id for w in self._pending]
        dropped += self._cut()
        self._pending.clear()
        self._steering.clear()
        self._end_wait()
        # Messages waiting or being prepared are dropped (a cut run ends its own).
        self._scoped.promise.skipped(dropped)
        return Stopped(anything, over)

    async def start_over(self) -> Stopped:
        """``/new``: stop, and go on in a new session."""
        stopped = self.stop()
        record = await self._scoped.ledger.start_session(self.key)
        self._session = Session(self.key, record.session_id, [], history_tokens=0)
        self._last_activity = self._shared.clock()
        return stopped

    def _cut(self) -> list[int | None]:
        """Cut the turn under way: its preparation at once, or its run (which winds down by
        itself). Returns the entries left for the caller to end: a cut preparation's (a run
        ends its own)."""
        turn = self._turn
        if turn is None or turn.cut:
            return []
        turn.cut = True
        if turn.ran:
            if turn.agent is not None:
                turn.agent.cancel()
            return []
        if turn.task is not None and turn.task.cancel():
            return list(turn.ids)
        return []  # it ended without a run (its files could not be read: the user was told)

    def _end_wait(self) -> None:
        """A worker waiting for more of an album or burst stops waiting now."""
        if self._wake is not None:
            self._wake.set()

    # -- shutdown ---------------------------------------------------------------------------

    def closing(self) -> None:
        """The registry shuts down: stop waiting for windows, and cut a turn still being
        prepared, marking nothing (its messages are prepared again at the next start)."""
        self._end_wait()
        turn = self._turn
        if self.preparing and turn is not None and turn.begun:
            self._cut()

    def cancel(self) -> None:
        """The shutdown's grace is over: drop what waits and cancel the run, marking
        nothing (it resumes at the next start)."""
        self._pending.clear()
        if self._turn is not None and self._turn.agent is not None:
            self._turn.agent.cancel()

    def abandon(self) -> None:
        """This node let the conversation's lease go (lost, idle, a takeover that failed):
        drop what waits and cut the turn under way, marking nothing (the cut run ends none of
        its entries, and on several nodes its writes are fenced): its entries are left for
        whoever takes the conversation over next."""
        self._abandoned = True
        self._end_wait()
        self._pending.clear()
        self._steering.clear()
        self._resumed.clear()
        turn = self._turn
        if turn is not None and not turn.cut:
            turn.cut = True
            if turn.ran:
                if turn.agent is not None:
                    turn.agent.cancel()
            elif turn.task is not None:
                turn.task.cancel()

    def _leaving(self) -> bool:
        """The registry shuts down, or this node let the conversation go: a run cut now
        leaves its entries as they are."""
        return self._shared.closing() or self._abandoned

    # -- the worker -------------------------------------------------------------------------

    async def _work(self) -> None:
        """Take the waiting messages one turn at a time, in order."""
        shared = self._shared
        while self._pending or (self._steering and self._last_inbound is not None):
            if shared.closing():
                return  # shutting down: left in the inbox, resumed at the next start
            steered = self._last_inbound is not None and steering_goes_first(
                self._steering, self._pending
            )
            if not steered:
                await self._gathered()
                if shared.closing():
                    return
                if not self._pending:
                    continue  # cleared meanwhile (/stop)
                turn = self._next_turn()
            else:
                # Steering that no tool boundary picked up runs as a follow-up.
                assert self._last_inbound is not None
                prompt = self._steering.take_messages()
                turn = Turn(self._session, self._last_inbound, prompt, [], [])
                turn.preview = _preview(turn)
            ran = await self._take_turn(turn)
            if shared.closing():
                return
            if ran and turn.session is self._session:
                # (A session /new left is not compacted: nothing reads it.)
                await self._compact(turn.inbound)

    async def _gathered(self) -> None:
        """Before the next waiting message runs: when it is part of an album, wait until no
        part of it arrived for the album window; with a debounce, until nothing arrived for
        that long. An interrupted run going on again does not wait."""
        windows = self._shared.windows
        while self._pending and not self._shared.closing():  # /stop may clear it meanwhile
            head = self._pending[0]
            if resumed_turn(self._resumed, head) is not None:
                return
            wait = windows.wait_left(head, self._pending)
            if wait <= 0:
                return
            self._wake = asyncio.Event()
            try:
                await windows.timer.wait(wait, self._wake)
            finally:
                self._wake = None

    def _next_turn(self) -> Turn:
        """The next turn: its messages off the queue, its prompt, the entries it answers.

        An interrupted run's messages go again as they were batched, with no prompt: their
        user turn is in the transcript.
        """
        pending = self._pending
        resumed_from = resumed_turn(self._resumed, pending[0])
        if resumed_from is not None:
            batch: list[Waiting] = []
            while pending and resumed_turn(self._resumed, pending[0]) == resumed_from:
                batch.append(pending.popleft())
        else:
            queue = self._shared.queue(pending[0].message)
            batch = queue.take(pending, self._resumed, self._shared.windows)
        ids = [w.message.inbox_id for w in batch if w.message.inbox_id is not None]
        for inbox_id in ids:
            self._resumed.pop(inbox_id, None)
        prompt = [] if resumed_from is not None else [user_turn([w.message for w in batch])]
        inbound = batch[-1].message
        if inbound.heartbeat is not None and any(w.message.heartbeat is None for w in batch):
            # A heartbeat check answered together with people's messages: they get the answer.
            inbound = replace(inbound, heartbeat=None)
        turn = Turn(self._session, inbound, prompt, batch, ids, resumed=resumed_from is not None)
        turn.preview = _preview(turn)
        return turn

    async def _take_turn(self, turn: Turn) -> bool:
        """Prepare and run ``turn``, a task of its own that a cut cancels until the run
        starts. True when the run started."""
        with LogContext.bind(channel=turn.inbound.channel, conversation=self.key):
            task = asyncio.create_task(self._prepared_run(turn), name=f"turn:{self.key}")
        turn.task = task
        self._turn = turn
        try:
            # Not ``await task``: a cut turn ends cancelled, and the worker goes on.
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()  # the worker itself was cancelled: its turn goes with it
            await asyncio.gather(task, return_exceptions=True)
            raise
        finally:
            self._turn = None
            turn.over.set()
        if not task.cancelled() and (failure := task.exception()) is not None:
            log.error("a turn in %s failed", self.key, exc_info=failure)
        return turn.ran

    async def _prepared_run(self, turn: Turn) -> None:
        """The turn: read its files (downloads, transcription, documents), take a run slot,
        run it. A cut cancels this task while it prepares: nothing of the message is said
        after that."""
        shared = self._shared
        reading = not turn.resumed and any(w.message.attachments for w in turn.batch)
        if shared.closing() and (reading or shared.slots.locked()):
            # The shutdown came before the turn began, and it would only wait: left in the
            # inbox, resumed at the next start. (One that need not wait runs, as it would
            # have had it begun a moment earlier; its run gets the grace.)
            return
        turn.begun = True  # from here on the shutdown cuts it while it prepares
        if reading and not await self._read_media(turn):
            return
        async with shared.slots:
            turn.ran = True  # from here on a cut cancels the run, which winds down itself
            self._last_inbound = turn.inbound
            run_id = turn.session.run_starts()
            self._scoped.ledger.count_run_soon(turn.session.session_id)
            with LogContext.bind(run=run_id):
                end = self._scoped.promise.run_end(turn.ids, self._steering.take_ids, self._leaving)
                outcome: str | None = None  # None: the run raised
                try:
                    # Its entries end with the run's last reply (in one transaction with its
                    # sent mark), or below when the run did not get that far.
                    outcome = await self._scoped.runner.run(turn, self._steering, on_delivered=end)
                except Exception:
                    log.exception("run failed in %s", self.key)
                end(outcome)  # when the run did not get to it (once only)

    async def _read_media(self, turn: Turn) -> bool:
        """Read the turn's attachments into its prompt; the user is told in one line per
        file that could not be read. False: nothing is left to answer (its entries end)."""
        shared = self._shared
        batch = [w.message for w in turn.batch]
        prompt, problems = await media_user_turn(batch, shared.media)
        target = turn.inbound.reply_target()
        told = True
        if problems:
            try:
                await shared.delivery.send_text(
                    target, "\n".join(problems), scope=self._scoped.scope
                )
            except Exception as exc:
                told = False
                log.warning("telling %s about unreadable files failed: %s", target.chat_id, exc)
        if prompt is None:
            (self._scoped.promise.answered if told else self._scoped.promise.failed)(turn.ids)
            return False
        turn.prompt = [prompt]
        return True

    async def _compact(self, inbound: InboundMessage) -> None:
        """Fold older turns into a summary if the transcript outgrew its budget (a model
        call: it takes a run slot)."""
        with LogContext.bind(channel=inbound.channel, conversation=self.key):
            async with self._shared.slots:
                try:
                    await self._scoped.runner.compact_if_needed(self._session, inbound)
                except Exception:
                    log.exception("compacting %s failed", self.key)


def _preview(turn: Turn) -> str:
    """What a turn answers, for ``/status``: its messages' text, else their files' names
    (else the steering it runs)."""
    batch = [w.message for w in turn.batch]
    texts = [m.text for m in batch if m.text.strip()]
    files = [a.label() for m in batch for a in m.attachments]
    steering = [b.text for m in turn.prompt for b in m.blocks() if isinstance(b, TextContent)]
    return "\n".join(texts) or ", ".join(files) or "\n".join(steering)


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


__all__ = ["Conversation", "Shared", "Work"]
