"""The session registry: one session per conversation, at most one agent run each, and what
to do with a message that arrives while a run is going.

``SessionManager.submit`` takes an inbound message (already deduplicated, allowed and
addressed to the bot). Chat commands are done at once (``commands.py``) and their answer
sent in the background (``post_later``), so an outage of one chat never holds up the
channel's input for the others; ``/new`` or ``/reset`` followed by text or with files
starts over with them as the new conversation's first message. Anything else becomes a
prompt. While a run is active, the queue mode decides:

* ``collect`` (the default): messages wait and are merged into one follow-up prompt after
  the run. People often send a thought in several short messages; this answers them together
  instead of once per line.
* ``followup``: each waiting message gets its own run afterwards, in order.
* ``steer``: the message is handed to the running agent, which reads it at the next tool
  boundary; if the run ends before one, it runs next as a follow-up.
* ``interrupt``: the run is cancelled and the new message starts a fresh one.

Files sent together as one post (a Telegram album: one message per file, the caption on one
of them) are answered as one, in every mode: the first of them waits until no further part
has come for ``ALBUM_WINDOW`` seconds, and the parts go into one prompt. With a
``debounce`` (seconds, off by default) the same holds for any burst: a message waits until
its conversation has said nothing more for that long, and messages that came within it of
each other go into one prompt, so "hi" - "can you" - "check the logs" gets one answer.

Each session's worker takes its waiting messages one *turn* at a time (``Session.turn``): the
turn is prepared (the messages' files downloaded, transcribed, read; a run slot waited for)
and then run. Preparing is part of the run: ``/stop``, ``/new``, an interrupt or the shutdown
cut it at once (the turn is a task of its own), and nothing of its messages is said after
that. No command waits for a turn: ``/stop`` and ``/new`` are answered once the cut turn has
wound down, in the background, and a conversation ``/new`` started over begins its first
turn after that too, so nothing on a channel's input path ever waits for a run.

Runs of different sessions go in parallel, capped by a global semaphore; runs of one session
never overlap, so its messages are answered strictly in order. Each run (``run.py``) writes
every message to the store as it happens, so a restarted daemon continues each conversation
where it was, and hands its replies to the delivery's run output.

Messages from the durable inbox carry their ``inbox_id``; the manager marks them running,
answered, failed or skipped (``durable.py`` says when). At start, ``resume`` queues what the
previous process left unanswered, oldest first, before any channel takes input: a message
whose run was interrupted continues from its transcript, one that waited runs as it came.
Runs wait until ``release`` (called once the channels can send), which also sends the reply
pieces a crash left unconfirmed and answers resumed chat commands (a conversation's
messages after such a command wait for it, so a resumed ``/new`` keeps its place).
``close`` cuts turns still being prepared, lets running answers finish within the grace and
cancels the rest, without marking them: they resume at the next start.

Each run is logged with ``LogContext`` ids (channel, conversation, run = session id and run
number), and optional ``RunHooks`` tell the daemon when a run starts, how it ended and when its
first reply reached the chat (for metrics). ``/status`` also lists the conversation's scheduled
jobs when a ``jobs`` callable is given, and the channels and MCP servers that are down.
``models`` names the configured models (primary first) that ``/model`` chooses among per
conversation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from ..agent.tools import Tool
from ..agent.types import Provider
from ..chat import InboundMessage, Target
from ..commands import chat_command, command_argument
from ..config.schema import MediaSection
from ..delivery import Delivery
from ..events import Message, TextContent
from ..logging import LogContext
from ..media import MediaResolver
from ..store import InboxState, OutboxEntry, Store
from .commands import FILES_NOT_READ, STARTING_OVER, CommandDesk
from .durable import resume_plan
from .models import ModelBook
from .prompt import media_user_turn, user_turn
from .run import Runner
from .session import Session, Turn
from .settings import RunHooks, SessionSettings

log = logging.getLogger(__package__)

ALBUM_WINDOW = 1.0
"""Seconds a message that is part of an album waits after the album's latest part arrived,
for the rest of it (Telegram sends an album's files as separate messages, moments apart)."""


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
        channels_down: Callable[[], Mapping[str, str]] | None = None,
        servers_down: Callable[[], Mapping[str, str]] | None = None,
        models: Sequence[str] = (),
        media: MediaResolver | None = None,
    ) -> None:
        self._store = store
        self._models = ModelBook(store, models or [settings.loop.model], clock)
        self._settings = settings
        self._media = media or MediaResolver(MediaSection)
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._slots = asyncio.Semaphore(settings.max_concurrent_runs)
        self._closed = False
        self._released = asyncio.Event()
        self._released.set()
        self._delivery = delivery
        self._deferred: list[InboundMessage] = []
        self._deferred_keys: set[str] = set()
        self._unsent: list[OutboxEntry] = []
        self._posting: set[asyncio.Task[None]] = set()
        self._workers: set[asyncio.Task[None]] = set()
        """Every session's worker, a session /new replaced included, until it ends."""
        self._runner = Runner(
            store,
            provider,
            delivery,
            settings,
            tools or (lambda _message: ()),
            hooks or RunHooks(),
            self._models,
        )
        self._commands = CommandDesk(
            store,
            self._sessions,
            queue_mode=settings.queue_mode,
            clock=clock,
            jobs=jobs,
            channels_down=channels_down,
            servers_down=servers_down,
            models=self._models,
        )

    # -- inbound ----------------------------------------------------------------------------

    async def submit(self, message: InboundMessage) -> None:
        """Take one inbound message: a command is answered now, text becomes a prompt."""
        if self._closed:
            log.warning("message %s dropped: shutting down", message.message_id)
            return
        command = chat_command(message.text, message.bot_name)
        if not self._released.is_set() and (
            command is not None or message.conversation_key in self._deferred_keys
        ):
            # A command is answered once the channels can send; what its conversation says
            # after it waits behind it, so a restart keeps their order (a /new, then a message
            # for the new conversation).
            self._deferred.append(message)
            self._deferred_keys.add(message.conversation_key)
            return
        if command is not None:
            rest = command_argument(message.text)
            if command not in STARTING_OVER or not (rest or message.attachments):
                reply = self._commands.answer(command, message)
                text = reply.text + (FILES_NOT_READ if message.attachments else "")
                self._spawn(
                    self._post([(message.reply_target(), text)], message.inbox_id, reply.after),
                    f"post:{message.chat_id}",
                )
                return
            # "/new <text>" (or files captioned /new): start over, and the rest is the new
            # conversation's first message. A run of it that a restart resumes is already in
            # the new conversation: it does not start over again.
            known = self._sessions.get(message.conversation_key)
            if known is None or message.inbox_id not in known.resumed:
                self._commands.answer(command, message)
            message = replace(message, text=rest)
        session = self._session_for(message.conversation_key)
        mode = self._settings.queue_mode
        if session.working:
            if mode == "steer" and session.run is not None and not message.attachments:
                # (Files are read before a run starts: a message with files waits for the
                # next run instead of steering this one; so does one sent while a turn is
                # still being prepared.)
                steering = user_turn([message])
                session.steered.append(steering)
                if message.inbox_id is not None:
                    session.steered_ids.append(message.inbox_id)
                session.run.steer(steering)
                return
            if mode == "interrupt":
                # Earlier parts of this message's album stay: they are answered with it.
                siblings = [m for m in session.pending if _same_album(m, message)]
                skipped = [m.inbox_id for m in session.pending if not _same_album(m, message)]
                skipped += session.cut()  # a turn being prepared, or its run
                self._finish(skipped, "skipped")
                session.pending.clear()
                session.pending.extend(siblings)
        session.pending.append(message)
        session.arrived_at[id(message)] = time.monotonic()
        if session.worker is None or session.worker.done():
            worker = asyncio.create_task(
                self._work(session), name=f"session:{session.conversation_key}"
            )
            session.worker = worker
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)

    def status(self, conversation_key: str) -> str:
        """What the session is doing, what waits, and the conversation's scheduled jobs."""
        return self._commands.status(conversation_key)

    def post_later(self, target: Target, text: str, *, inbox_id: int | None = None) -> None:
        """Send a one-shot text (a command's answer, a pairing reply) in the background.

        The delivery retries it through an outage of that chat; meanwhile the channel goes on
        taking input for every other chat. ``inbox_id``, the message it answers, is marked
        answered once it is sent (failed when refused); cut by a shutdown, the message stays
        in the inbox and is answered after the restart.
        """
        self._spawn(self._post([(target, text)], inbox_id, None), f"post:{target.chat_id}")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    async def _post(
        self,
        texts: Sequence[tuple[Target, str]],
        inbox_id: int | None,
        after: asyncio.Event | None,
    ) -> None:
        """Send ``texts`` in order once ``after`` is set (None: now), then mark ``inbox_id``."""
        if after is not None:
            await after.wait()  # the turn a /stop or /new cut winds down first
        for target, text in texts:
            try:
                await self._delivery.send_text(target, text)
            except Exception as exc:
                log.warning(
                    "a reply to %s:%s was not sent: %s", target.channel, target.chat_id, exc
                )
                self._finish([inbox_id], "failed")
                return
        self._finish([inbox_id], "answered")

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
            session.runs_done = session.runs_started = record.runs
            self._sessions[conversation_key] = session
        if not session.running and self._settings.reset.is_due(session.last_activity, now):
            log.info("session %s reset by policy", conversation_key)
            session.reset_notice = self._settings.reset.notice()
            record = self._store.new_session(conversation_key)
            session.session_id, session.history = record.session_id, []
            session.history_tokens = 0
            session.runs_done = session.runs_started = 0
        session.last_activity = now
        return session

    # -- runs -------------------------------------------------------------------------------

    def _next_prompt(self, session: Session) -> _Next:
        """The next prompt, the messages it answers, and when the earliest of them arrived.

        An interrupted run's messages (``session.resumed``) go again as they were batched,
        with no prompt: their user turn is in the transcript.
        """
        head = session.pending[0]
        turn = session.resumed.get(head.inbox_id) if head.inbox_id is not None else None
        batch: list[InboundMessage] = []
        if turn is not None:
            while session.pending and _resumed_turn(session, session.pending[0]) == turn:
                batch.append(session.pending.popleft())
        elif self._settings.queue_mode == "collect":
            while session.pending and _resumed_turn(session, session.pending[0]) is None:
                batch.append(session.pending.popleft())
        else:
            batch.append(session.pending.popleft())
            # An album's parts are one post, and so is a burst within the debounce: answered
            # together in every queue mode.
            while (
                session.pending
                and self._one_post(session, batch[-1], session.pending[0])
                and _resumed_turn(session, session.pending[0]) is None
            ):
                batch.append(session.pending.popleft())
        arrivals = [t for m in batch if (t := session.arrived_at.pop(id(m), None)) is not None]
        if not session.pending:
            session.arrived_at.clear()  # entries of messages dropped by /stop or interrupt
        ids = [m.inbox_id for m in batch if m.inbox_id is not None]
        for inbox_id in ids:
            session.resumed.pop(inbox_id, None)
        prompt = [] if turn is not None else [user_turn(batch)]
        return _Next(batch[-1], prompt, min(arrivals, default=None), ids, turn is not None, batch)

    async def _gathered(self, session: Session) -> None:
        """Before the next waiting message runs: when it is part of an album, wait until no
        part of it arrived for ``ALBUM_WINDOW`` seconds; with a debounce, until nothing
        arrived for that long. An interrupted run going on again does not wait."""
        head = session.pending[0]
        debounce = self._settings.debounce
        if _resumed_turn(session, head) is not None or (head.album is None and not debounce):
            return
        window = max(debounce, ALBUM_WINDOW if head.album is not None else 0.0)
        while session.pending and not self._closed:  # /stop may clear it meanwhile
            # With a debounce anything waiting counts as more; without, the album's parts.
            waiting = [m for m in session.pending if debounce or _same_album(m, head)]
            latest = max((session.arrived_at.get(id(m), 0.0) for m in waiting), default=0.0)
            wait = latest + window - time.monotonic()
            if wait <= 0:
                return
            session.wake = asyncio.Event()
            try:
                async with asyncio.timeout(wait):
                    await session.wake.wait()
            except TimeoutError:
                pass
            finally:
                session.wake = None

    def _one_post(self, session: Session, last: InboundMessage, then: InboundMessage) -> bool:
        """Whether ``then``, waiting after ``last``, goes into the same prompt: the same
        album, or sent within the debounce of it."""
        if _same_album(then, last):
            return True
        debounce = self._settings.debounce
        if not debounce:
            return False
        came, before = session.arrived_at.get(id(then)), session.arrived_at.get(id(last))
        return came is not None and before is not None and came - before <= debounce

    async def _read_media(self, step: _Next) -> _Next | None:
        """``step`` with its messages' attachments read into its prompt; the user is told
        in one line per file that could not be read. None: nothing is left to answer (the
        messages are then marked done)."""
        turn, problems = await media_user_turn(step.batch, self._media)
        target = step.inbound.reply_target()
        told = True
        if problems:
            try:
                await self._delivery.send_text(target, "\n".join(problems))
            except Exception as exc:
                told = False
                log.warning("telling %s about unreadable files failed: %s", target.chat_id, exc)
        if turn is None:
            self._finish(step.ids, "answered" if told else "failed")
            return None
        return step._replace(prompt=[turn])

    async def _work(self, session: Session) -> None:
        """Take the session's waiting messages one turn at a time, in order."""
        await self._released.wait()
        if session.after is not None:
            after, session.after = session.after, None
            await after.wait()  # the previous session's turn, cut by /new, winds down first
        if self._closed:
            return  # released by the shutdown: what waits stays in the inbox for next start
        while session.pending or (session.steered and session.last_inbound is not None):
            if session.pending:
                await self._gathered(session)
                if self._closed:
                    return  # shutting down: left in the inbox, resumed at the next start
                if not session.pending:
                    continue  # cleared meanwhile (/stop)
                step = self._next_prompt(session)
            else:
                # Steering that no tool boundary picked up runs as a follow-up.
                assert session.last_inbound is not None
                step = _Next(session.last_inbound, list(session.steered), None, [], False, [])
                session.steered.clear()
            ran = await self._take_turn(session, step)
            if self._closed:
                return  # shutting down: left in the inbox, resumed at the next start
            if ran and self._sessions.get(session.conversation_key) is session:
                # (A conversation /new started over is not compacted: nothing reads it.)
                await self._compact(session, step.inbound.channel)

    async def _compact(self, session: Session, channel: str) -> None:
        """Fold older turns into a summary if the transcript outgrew its budget (a model
        call: it takes a run slot)."""
        with LogContext.bind(channel=channel, conversation=session.conversation_key):
            async with self._slots:
                try:
                    await self._runner.compact_if_needed(session)
                except Exception:
                    log.exception("compacting %s failed", session.conversation_key)

    async def _take_turn(self, session: Session, step: _Next) -> bool:
        """Prepare and run ``step`` as the session's turn (``Session.turn``), a task of its
        own that ``Session.cut`` cancels until the run starts. True when the run started."""
        turn = Turn(step.ids, _preview(step))
        with LogContext.bind(channel=step.inbound.channel, conversation=session.conversation_key):
            task = asyncio.create_task(
                self._turn(session, turn, step), name=f"turn:{session.conversation_key}"
            )
        turn.task = task
        session.turn = turn
        try:
            # Not ``await task``: a cut turn ends cancelled, and the worker goes on.
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()  # the worker itself was cancelled: its turn goes with it
            await asyncio.gather(task, return_exceptions=True)
            raise
        finally:
            session.turn = None
            turn.over.set()
        if not task.cancelled() and (failure := task.exception()) is not None:
            log.error("a turn in %s failed", session.conversation_key, exc_info=failure)
        return turn.ran

    async def _turn(self, session: Session, turn: Turn, step: _Next) -> None:
        """The turn: read ``step``'s files (downloads, transcription, documents), take a run
        slot, run it. ``/stop``, ``/new``, an interrupt or the shutdown cancel this task
        while it prepares (``Session.cut``): nothing of the message is said after that."""
        reading = not step.resumed and any(m.attachments for m in step.batch)
        if self._closed and (reading or self._slots.locked()):
            # The shutdown came before the turn began, and it would only wait: left in the
            # inbox, resumed at the next start. (One that need not wait runs, as it would
            # have had it begun a moment earlier; its run gets the grace.)
            return
        turn.begun = True  # from here on the shutdown cuts it while it prepares
        if reading:
            read = await self._read_media(step)
            if read is None:
                return
            step = read
        async with self._slots:
            turn.ran = True  # from here on a cut cancels the run, which winds down itself
            session.last_inbound = step.inbound
            session.runs_started += 1
            self._store.count_run_soon(session.session_id)
            with LogContext.bind(run=session.run_id):
                finish = _Finish(session, step.ids, self._finish, lambda: self._closed)
                outcome: str | None = None  # None: the run raised
                try:
                    # Marked done with the run's last reply (in one transaction with its
                    # sent mark), or below when the run did not get that far.
                    outcome = await self._runner.run(
                        session,
                        step.inbound,
                        step.prompt,
                        step.arrived,
                        inbox_ids=step.ids,
                        resumed=step.resumed,
                        on_delivered=finish,
                    )
                except Exception:
                    log.exception("run failed in %s", session.conversation_key)
                finish(outcome)  # when the run did not get to it (once only)

    def _finish(self, ids: Sequence[int | None], state: InboxState) -> None:
        """Mark inbox rows (None: not from the inbox) as done; a failed write is logged."""
        known = [inbox_id for inbox_id in ids if inbox_id is not None]
        if not known:
            return
        try:
            self._store.finish_inbox(known, state)
        except Exception:
            log.exception("marking inbox messages %s %s failed", known, state)

    # -- restart ----------------------------------------------------------------------------

    async def resume(self) -> int:
        """Queue what the previous process left unanswered (see the module docstring).

        Runs wait for ``release``. Returns how many messages were queued again.
        """
        self._released.clear()
        plan = resume_plan(self._store)
        for entry in plan.entries:
            if entry.id in plan.resumed_turns and entry.user_turn_id is not None:
                session = self._session_for(entry.message.conversation_key)
                session.resumed[entry.id] = entry.user_turn_id
            await self.submit(entry.message)
        self._unsent = plan.unsent
        if plan.entries or plan.unsent:
            log.info(
                "resuming %d message(s) (%d interrupted), %d unconfirmed reply piece(s)",
                len(plan.entries),
                len(plan.resumed_turns),
                len(plan.unsent),
            )
        return len(plan.entries)

    async def release(self) -> None:
        """The channels can send: let the runs go, send what a crash left unconfirmed, and
        answer resumed chat commands."""
        self._released.set()
        unsent, self._unsent = self._unsent, []
        by_chat: dict[tuple[str, str, str | None], list[OutboxEntry]] = {}
        for piece in unsent:
            target = piece.target
            by_chat.setdefault((target.channel, target.chat_id, target.thread_id), []).append(piece)
        for (_channel, chat_id, _thread), pieces in by_chat.items():
            # Each chat's pieces in order, beside the others: one chat's outage holds up none.
            self._spawn(self._send_unconfirmed(pieces), f"unconfirmed:{chat_id}")
        deferred, self._deferred = self._deferred, []
        self._deferred_keys.clear()
        for message in deferred:
            await self.submit(message)

    async def _send_unconfirmed(self, pieces: Sequence[OutboxEntry]) -> None:
        for piece in pieces:
            try:
                if piece.media:  # the files are fetched and uploaded anew, from their references
                    refs = await self._delivery.send_text(
                        piece.target,
                        piece.text,
                        media=piece.media,
                        audio_as_voice=piece.audio_as_voice,
                    )
                else:
                    refs = await self._delivery.send_text(piece.target, piece.text)
            except Exception:
                log.exception("sending an unconfirmed reply to %s failed", piece.target.chat_id)
                self._store.outbox_failed(piece.id)
            else:
                self._store.outbox_sent(piece.id, [ref.message_id for ref in refs])

    # -- lifecycle --------------------------------------------------------------------------

    def _busy(self) -> list[asyncio.Task[None]]:
        tasks = [*self._workers, *self._posting]
        return [task for task in tasks if not task.done()]

    async def drain(self) -> None:
        """Wait until every session is idle and every one-shot text sent."""
        while busy := self._busy():
            await asyncio.gather(*busy, return_exceptions=True)

    async def close(self, grace: float = 10.0) -> None:
        """Stop taking input, let running turns (and one-shot texts) finish within ``grace``,
        cancel the rest."""
        self._closed = True
        self._released.set()  # a worker still waiting for release ends at once
        for session in self._sessions.values():
            session.end_wait()  # nor does one wait for more of an album or burst
            if session.preparing and session.turn is not None and session.turn.begun:
                # Reading files (or waiting for a run slot) ends now, marking nothing: the
                # message stays in the inbox and is prepared again at the next start.
                session.cut()
        busy = self._busy()
        if busy:
            _, still_running = await asyncio.wait(busy, timeout=grace)
            # What is cancelled now is left unanswered in the inbox and resumes at next start.
            self._runner.shutting_down = True
            for session in self._sessions.values():
                session.pending.clear()
                if session.run is not None:
                    session.run.cancel()
            for task in self._posting:
                task.cancel()
            if still_running:
                await asyncio.gather(*still_running, return_exceptions=True)


class _Next(NamedTuple):
    """A run to do: the message it answers for, its prompt, the inbox rows it answers."""

    inbound: InboundMessage
    prompt: list[Message]
    arrived: float | None
    ids: list[int]
    resumed: bool
    batch: list[InboundMessage]


_STATES: dict[str, InboxState] = {"cancelled": "skipped", "error": "failed"}
"""Inbox states by how a run ended (anything else: answered)."""


class _Finish:
    """Marks a run's inbox messages (and the steering it took) done, once."""

    def __init__(
        self,
        session: Session,
        ids: Sequence[int],
        mark: Callable[[Sequence[int | None], InboxState], None],
        closed: Callable[[], bool],
    ) -> None:
        self._session = session
        self._ids = ids
        self._mark = mark
        self._closed = closed
        self._done = False

    def __call__(self, outcome: str | None) -> None:
        """``outcome``: how the run ended (None: it raised). Calls after the first do nothing."""
        if self._done:
            return
        self._done = True
        state = "failed" if outcome is None else _STATES.get(outcome, "answered")
        if self._closed() and state == "skipped":
            return  # cancelled by the shutdown: left running, to resume at the next start
        session = self._session
        steered, session.steered_ids = session.steered_ids, []
        self._mark([*self._ids, *steered], state)


def _preview(step: _Next) -> str:
    """What a turn answers, for ``/status``: its messages' text, else their files' names
    (else the steering it runs)."""
    texts = [m.text for m in step.batch if m.text.strip()]
    files = [a.label() for m in step.batch for a in m.attachments]
    steering = [b.text for m in step.prompt for b in m.blocks() if isinstance(b, TextContent)]
    return "\n".join(texts) or ", ".join(files) or "\n".join(steering)


def _same_album(message: InboundMessage, other: InboundMessage) -> bool:
    return message.album is not None and message.album == other.album


def _resumed_turn(session: Session, message: InboundMessage) -> int | None:
    return None if message.inbox_id is None else session.resumed.get(message.inbox_id)


__all__ = ["SessionManager"]
