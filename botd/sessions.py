"""Sessions: one per conversation, at most one agent run each, and what to do with a message
that arrives while a run is going.

``SessionManager.submit`` takes an inbound message (already deduplicated, allowed and
addressed to the bot). Chat commands are answered at once: ``/new`` starts a fresh session,
``/stop`` cancels the run and clears the queue, ``/status`` tells what the session is doing.
Anything else becomes a prompt. While a run is active, the queue mode decides:

* ``collect`` (the default): messages wait and are merged into one follow-up prompt after
  the run. People often send a thought in several short messages; this answers them together
  instead of once per line.
* ``followup``: each waiting message gets its own run afterwards, in order.
* ``steer``: the message is handed to the running agent, which reads it at the next tool
  boundary; if the run ends before one, it runs next as a follow-up.
* ``interrupt``: the run is cancelled and the new message starts a fresh one.

Runs of different sessions go in parallel, capped by a global semaphore; runs of one session
never overlap, so its messages are answered strictly in order. Every message of every run is
written to the store, so a restarted daemon continues each conversation where it was.

Replies leave a run through one ordered outbox. A plain ``ReplySink`` gets block replies as
they are cut and the final replies after the run. A ``StreamingSink`` (``ChannelDelivery``)
also chooses per target how a run is shown (``DeliveryMode``): ``blocks`` as above; ``final``
cuts no blocks and posts only the final answer; ``edit`` cuts no blocks either but forwards
partial replies for a live preview, which the final answer then finishes. Without streamed
blocks the finals are built without block dedupe, so the answer is never lost. A sink with
``typing`` is asked to show "typing…" from the start of a run, every ``typing_interval``
seconds, until the run's replies are out.

Each run is logged with ``LogContext`` ids (channel, conversation, run = session id and run
number), and optional ``RunHooks`` tell the daemon when a run starts, how it ended and when its
first reply reached the chat (for metrics). ``/status`` also lists the conversation's scheduled
jobs when a ``jobs`` callable is given.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from .agent.loop import AgentRun, LoopConfig, RunResult
from .agent.tools import Tool
from .agent.types import Provider
from .chat import InboundMessage, Target
from .compaction import compact_transcript, estimate_tokens, summarizer_for
from .delivery import DeliveryMode, ReplyKind
from .events import AgentEvent, Message, TextContent, event_to_json
from .logging import LogContext
from .store import Store
from .subscriber import (
    BlockReply,
    Origin,
    PartialReply,
    StreamSubscriber,
    SubscriberConfig,
)
from .subscriber.coalesce import BlockCoalescer

log = logging.getLogger(__name__)

QueueMode = Literal["steer", "followup", "collect", "interrupt"]
DEFAULT_QUEUE_MODE: QueueMode = "collect"
COMMANDS = ("/new", "/reset", "/stop", "/status", "/help")


def chat_command(text: str) -> str | None:
    """The chat command ``text`` starts with (``/stop``, also as ``/stop@botname``), or None."""
    words = text.strip().split(maxsplit=1)
    if not words:
        return None
    command = words[0].split("@", 1)[0].lower()  # Telegram addresses commands to a bot
    return command if command in COMMANDS else None


class ReplySink(Protocol):
    """Where a session's replies go (the delivery layer, or a test's list)."""

    async def deliver(self, target: Target, reply: BlockReply) -> None: ...


@runtime_checkable
class StreamingSink(Protocol):
    """A sink that decides how runs are shown per target; it is told what each reply is."""

    def delivery_mode(self, target: Target) -> DeliveryMode: ...

    async def deliver(
        self, target: Target, reply: BlockReply, *, kind: ReplyKind = "block"
    ) -> None: ...

    async def preview(self, target: Target, partial: PartialReply) -> None:
        """The answer so far (``edit`` mode only)."""
        ...

    async def end_run(self, target: Target) -> None:
        """Every reply of the run is out (sent after cancelled runs too)."""
        ...


@runtime_checkable
class TypingSink(Protocol):
    async def typing(self, target: Target) -> None: ...


@dataclass(frozen=True, slots=True)
class ResetPolicy:
    """When a conversation silently starts over: never (default), after idle minutes, or
    daily at an hour (local time)."""

    mode: Literal["off", "idle", "daily"] = "off"
    idle_minutes: int = 0
    daily_hour: int = 4

    def is_due(self, last_activity: float, now: float) -> bool:
        if self.mode == "idle":
            return now - last_activity >= self.idle_minutes * 60
        if self.mode == "daily":
            current = datetime.fromtimestamp(now)
            boundary = current.replace(hour=self.daily_hour, minute=0, second=0, microsecond=0)
            if boundary > current:
                boundary -= timedelta(days=1)
            return last_activity < boundary.timestamp()
        return False


@dataclass(frozen=True, slots=True)
class CoalesceSettings:
    """Block coalescing: flush at ``max_chars``, or after ``idle_ms`` once ``min_chars`` wait."""

    min_chars: int = 800
    max_chars: int = 1200
    idle_ms: float = 1000.0
    joiner: str = "\n\n"


@dataclass(frozen=True, slots=True)
class SessionSettings:
    loop: LoopConfig
    subscriber: SubscriberConfig = field(default_factory=SubscriberConfig)
    queue_mode: QueueMode = DEFAULT_QUEUE_MODE
    max_concurrent_runs: int = 8
    reset: ResetPolicy = field(default_factory=ResetPolicy)
    record_events_dir: Path | None = None
    """With a directory, each run's events are written there as JSONL for ``botd replay``."""
    context_budget_tokens: int = 100_000
    """When a transcript grows past this, its older turns are compacted."""
    keep_recent_tokens: int = 20_000
    """How much of the latest conversation compaction keeps word for word."""
    typing_interval: float = 5.0
    coalesce: CoalesceSettings | None = None
    """Join small blocks that stream in quick succession into one message (blocks mode)."""
    """How often a running session renews the typing indicator (platforms expire it)."""


@dataclass(frozen=True, slots=True)
class RunHooks:
    """Callbacks around a run (the daemon's metrics); each is optional and must not block.

    ``on_end`` gets the run's stop reason, ``"exception"`` when the run raised, or
    ``"cancelled"`` when its task was cancelled. ``on_first_reply`` gets the seconds from the
    arrival of the prompt's earliest message to the run's first delivered reply (``None`` when
    the arrival is unknown, e.g. steering run as a follow-up). A hook that raises is logged.
    """

    on_start: Callable[[InboundMessage], None] | None = None
    on_end: Callable[[InboundMessage, str], None] | None = None
    on_first_reply: Callable[[InboundMessage, float | None], None] | None = None


def _call_hook(hook: Callable[..., None] | None, *args: object) -> None:
    if hook is None:
        return
    try:
        hook(*args)
    except Exception:
        log.exception("run hook failed")


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
    history_tokens: int = -1
    """Estimated tokens of ``history``, kept up to date (-1: not counted yet)."""
    arrived_at: dict[int, float] = field(default_factory=dict)
    """``time.monotonic()`` at submit, by ``id()`` of the waiting message (for latency)."""
    working_on: str = ""
    """The running prompt's text (for ``/status``)."""


def _user_message(text: str) -> Message:
    return Message(role="user", content=[TextContent(text=text)])


_Outgoing = (
    tuple[ReplyKind, BlockReply]
    | tuple[Literal["partial"], PartialReply]
    | tuple[Literal["flush"], BlockReply]
)
_NO_REPLY = BlockReply(text="")


class _Outbox:
    """One run's replies in order. Partials coalesce: a slow preview edit skips to the latest
    text instead of working through every delta (so a coalesced ``delta`` is not whole)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[_Outgoing | None] = asyncio.Queue()
        self._partial: PartialReply | None = None

    def put(self, kind: ReplyKind, reply: BlockReply) -> None:
        self._queue.put_nowait((kind, reply))

    def put_flush(self) -> None:
        """A tool starts: what the coalescer holds goes out before anything the tool does."""
        self._queue.put_nowait(("flush", _NO_REPLY))

    def put_partial(self, partial: PartialReply) -> None:
        if self._partial is None:
            self._queue.put_nowait(("partial", partial))  # a place in line; the latest fills it
        self._partial = partial

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def get(self) -> _Outgoing | None:
        item = await self._queue.get()
        if item is not None and item[0] == "partial" and self._partial is not None:
            item, self._partial = ("partial", self._partial), None
        return item


async def _cancel_task(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class SessionManager:
    """Owns every session; see the module docstring."""

    def __init__(
        self,
        store: Store,
        provider: Provider,
        sink: ReplySink,
        settings: SessionSettings,
        *,
        tools: Callable[[InboundMessage], Sequence[Tool]] | None = None,
        clock: Callable[[], float] = time.time,
        jobs: Callable[[str], list[str]] | None = None,
        hooks: RunHooks | None = None,
    ) -> None:
        self._store = store
        self._provider = provider
        self._sink = sink
        self._streaming = sink if isinstance(sink, StreamingSink) else None
        self._typing = sink if isinstance(sink, TypingSink) else None
        self._settings = settings
        self._tools = tools or (lambda _message: ())
        self._clock = clock
        self._jobs = jobs
        self._hooks = hooks or RunHooks()
        self._sessions: dict[str, Session] = {}
        self._slots = asyncio.Semaphore(settings.max_concurrent_runs)
        self._closed = False

    # -- inbound ----------------------------------------------------------------------------

    async def submit(self, message: InboundMessage) -> None:
        """Take one inbound message: a command is answered now, text becomes a prompt."""
        if self._closed:
            log.warning("message %s dropped: shutting down", message.message_id)
            return
        command = chat_command(message.text)
        if command is not None:
            await self._command(command, message)
            return
        session = self._session_for(message.conversation_key)
        mode = self._settings.queue_mode
        if session.run is not None and session.run.running:
            if mode == "steer":
                steering = _user_message(message.text)
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
        session = self._sessions.get(conversation_key)
        lines: list[str] = []
        if session is None:
            lines.append("No conversation yet.")
        else:
            running = session.run is not None and session.run.running
            lines.append(
                f"Session {session.session_id[:8]}: {'working' if running else 'idle'}, "
                f"{len(session.pending)} waiting, {len(session.history)} messages, "
                f"{session.runs_done} runs, queue mode {self._settings.queue_mode}."
            )
            if running:
                lines.append(f"Working on: {_preview(session.working_on)}")
            lines += [f"Waiting: {_preview(m.text)}" for m in session.pending]
        if self._jobs is not None:
            try:
                jobs = self._jobs(conversation_key)
            except Exception:
                log.exception("listing scheduled jobs for %s failed", conversation_key)
                jobs = []
            lines += [f"Scheduled: {job}" for job in jobs]
        return "\n".join(lines)

    @property
    def sessions(self) -> dict[str, Session]:
        return self._sessions

    async def _command(self, command: str, message: InboundMessage) -> None:
        key = message.conversation_key
        target = message.reply_target()
        if command in ("/stop", "/new", "/reset"):
            stopped = await self._stop(key)
            if command == "/stop":
                text = "Stopped." if stopped else "Nothing was running."
            else:
                record = self._store.new_session(key)
                self._sessions[key] = Session(key, record.session_id, [], self._clock())
                text = "Started a new conversation."
        elif command == "/status":
            text = self.status(key)
        else:
            text = "Commands: /new (start over), /stop (cancel), /status, /help."
        await self._sink.deliver(target, BlockReply(text=text))

    async def _stop(self, conversation_key: str) -> bool:
        """Cancel the session's run and drop what waits; True when something was running."""
        session = self._sessions.get(conversation_key)
        if session is None:
            return False
        session.pending.clear()
        session.steered.clear()
        was_running = session.run is not None and session.run.running
        if session.run is not None:
            session.run.cancel()
        if session.worker is not None:
            await asyncio.gather(session.worker, return_exceptions=True)
        return was_running

    def _session_for(self, conversation_key: str) -> Session:
        session = self._sessions.get(conversation_key)
        now = self._clock()
        if session is None:
            record = self._store.get_or_create_session(conversation_key)
            history = self._store.load_transcript(record.session_id)
            session = Session(conversation_key, record.session_id, history, record.updated_at)
            self._sessions[conversation_key] = session
        idle = session.run is None or not session.run.running
        if idle and self._settings.reset.is_due(session.last_activity, now):
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
        return batch[-1], [_user_message(text)], min(arrivals, default=None)

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
                        await self._run_once(session, inbound, prompt, arrived)
                        await self._compact_if_needed(session)
                    except Exception:
                        log.exception("run failed in %s", session.conversation_key)

    async def _compact_if_needed(self, session: Session) -> None:
        """Summarize older turns once the transcript outgrows the model's context budget."""
        settings = self._settings
        if session.history_tokens < 0:
            session.history_tokens = estimate_tokens(session.history)
        if session.history_tokens <= settings.context_budget_tokens:
            return
        result = await compact_transcript(
            session.history,
            budget_tokens=settings.context_budget_tokens,
            keep_recent_tokens=settings.keep_recent_tokens,
            summarize=summarizer_for(self._provider, settings.loop.model),
        )
        if result is None:
            return
        self._store.compact(session.session_id, result)
        session.history = list(result.messages)
        session.history_tokens = result.tokens_after
        log.info(
            "compacted %s: %d messages into a %s (%d -> %d tokens)",
            session.conversation_key,
            result.compacted_count,
            "summary" if result.summarized else "truncation note",
            result.tokens_before,
            result.tokens_after,
        )

    async def _run_once(
        self,
        session: Session,
        inbound: InboundMessage,
        prompt: list[Message],
        arrived: float | None = None,
    ) -> None:
        target = inbound.reply_target()
        mode = self._streaming.delivery_mode(target) if self._streaming else "blocks"
        outbox = _Outbox()
        recorder = self._recorder(session)
        config = self._settings.subscriber
        if mode != "blocks":
            # Nothing streams as blocks: keep each assistant message whole for the finals
            # instead of the chunker's pieces, so the answer is one reply (or one preview).
            config = replace(config, chunking=None)
        subscriber = StreamSubscriber(
            config,
            # Without a block callback the subscriber cuts no blocks at all.
            on_block_reply=(lambda reply: outbox.put("block", reply)) if mode == "blocks" else None,
            on_partial_reply=outbox.put_partial if mode == "edit" else None,
            on_block_flush=outbox.put_flush if mode == "blocks" else None,
        )

        def emit(event: AgentEvent) -> None:
            subscriber.handle(event)
            if recorder is not None:
                recorder(event)

        run = AgentRun(
            self._provider,
            self._tools(inbound),
            self._settings.loop,
            emit,
            conversation_key=session.conversation_key,
            origin=target,
        )
        session.run = run
        session.working_on = "\n".join(
            c.text for m in prompt for c in m.content if isinstance(c, TextContent)
        )
        result: RunResult | None = None
        outcome = "exception"
        typer = self._start_typing(session, target)

        def first_reply() -> None:
            latency = None if arrived is None else max(0.0, time.monotonic() - arrived)
            _call_hook(self._hooks.on_first_reply, inbound, latency)

        sender = asyncio.create_task(self._send_all(target, outbox, typer, first_reply))
        log.info("run started")
        _call_hook(self._hooks.on_start, inbound)
        try:
            result = await run.run(session.history, prompt)
            outcome = result.stop_reason
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            log.info("run ended: %s", outcome)
            _call_hook(self._hooks.on_end, inbound, outcome)
            session.run = None
            session.working_on = ""
            added = result.messages if result is not None else run.messages
            consumed = {id(m) for m in added}
            session.steered = [m for m in session.steered if id(m) not in consumed]
            if added:
                self._store.append_messages(session.session_id, added)
                session.history.extend(added)
                if session.history_tokens >= 0:
                    session.history_tokens += estimate_tokens(added)
            session.runs_done += 1
            try:
                if result is not None and result.stop_reason != "cancelled":
                    streamed = mode == "blocks"
                    finals = subscriber.final_replies(
                        block_streaming=streamed,
                        current_message_id=inbound.message_id,
                        origin=Origin(target.channel, target.route(), target.account_id),
                    )
                    for reply in finals:
                        outbox.put("final", reply)
                outbox.close()
                await sender
            finally:
                await _cancel_task(typer)  # normally done already by the sender

    def _start_typing(self, session: Session, target: Target) -> asyncio.Task[None] | None:
        typing = self._typing
        if typing is None:
            return None
        interval = self._settings.typing_interval

        async def keep_typing() -> None:
            while True:
                try:
                    await typing.typing(target)
                except Exception as exc:
                    log.warning("typing in %s failed: %s", target.chat_id, exc)
                await asyncio.sleep(interval)

        return asyncio.create_task(keep_typing(), name=f"typing:{session.conversation_key}")

    async def _send_all(
        self,
        target: Target,
        outbox: _Outbox,
        typer: asyncio.Task[None] | None,
        first_reply: Callable[[], None] | None = None,
    ) -> None:
        """Deliver a run's replies in order; a failed delivery is logged, not fatal.

        ``first_reply`` is called once, after the first reply (or preview) is delivered.
        """
        streaming = self._streaming
        settings = self._settings.coalesce
        coalescer = (
            BlockCoalescer(
                settings.min_chars, settings.max_chars, settings.idle_ms, settings.joiner
            )
            if settings is not None
            else None
        )
        loop = asyncio.get_running_loop()

        def now_ms() -> float:
            return loop.time() * 1000

        async def send(kind: str, reply: BlockReply | PartialReply) -> None:
            nonlocal first_reply
            try:
                if isinstance(reply, PartialReply):
                    if streaming is None:
                        return
                    await streaming.preview(target, reply)
                elif streaming is None:
                    await self._sink.deliver(target, reply)
                else:
                    await streaming.deliver(
                        target, reply, kind="final" if kind == "final" else "block"
                    )
            except Exception:
                log.exception("delivery to %s:%s failed", target.channel, target.chat_id)
                return
            if first_reply is not None:
                first_reply()
                first_reply = None

        async def send_all(kind: str, replies: list[BlockReply]) -> None:
            for reply in replies:
                await send(kind, reply)

        while True:
            deadline = coalescer.deadline if coalescer is not None else None
            if deadline is None:
                item = await outbox.get()
            else:
                try:
                    wait = max(0.0, (deadline - now_ms()) / 1000)
                    item = await asyncio.wait_for(outbox.get(), wait)
                except TimeoutError:
                    assert coalescer is not None
                    await send_all("block", coalescer.poll(now_ms()))
                    continue
            if item is None:
                break
            kind = item[0]
            if coalescer is not None and kind == "block":
                assert isinstance(item[1], BlockReply)
                await send_all("block", coalescer.add(item[1], now_ms()))
                continue
            if coalescer is not None:
                # A tool start or the final answer: what waits goes out first, in order.
                await send_all("block", coalescer.flush())
            if kind != "flush":
                await send(kind, item[1])
        if coalescer is not None:
            await send_all("block", coalescer.flush())
        # Typing stops the moment the last reply is out, not when the run is wound up: an
        # indicator that outlives the answer reads as a second answer coming.
        await _cancel_task(typer)
        if streaming is not None:
            try:
                await streaming.end_run(target)
            except Exception:
                log.exception("ending delivery to %s:%s failed", target.channel, target.chat_id)

    def _recorder(self, session: Session) -> Callable[[AgentEvent], None] | None:
        directory = self._settings.record_events_dir
        if directory is None:
            return None
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{session.session_id}-{session.runs_done + 1:04d}.jsonl"
        handle = path.open("a", encoding="utf-8")

        def record(event: AgentEvent) -> None:
            handle.write(event_to_json(event) + "\n")
            if event.type == "agent_end":
                handle.close()

        return record

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


def _preview(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


__all__ = [
    "DEFAULT_QUEUE_MODE",
    "QueueMode",
    "ReplySink",
    "ResetPolicy",
    "RunHooks",
    "Session",
    "SessionManager",
    "SessionSettings",
    "StreamingSink",
    "TypingSink",
    "chat_command",
]
