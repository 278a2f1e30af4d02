"""One agent run of a session: the agent, its subscriber, the recording, the transcript.

``Runner.run`` opens the run's output on the delivery, builds an ``AgentRun`` whose events
feed a ``StreamSubscriber`` (and, when asked, a JSONL recording for ``botd replay``, named
after the run id: run numbers count on across restarts, and a recording is never appended
to), and
hands the subscriber's replies to the output as they come: blocks in ``blocks`` mode,
partial replies in ``edit`` and ``stream`` modes, the final replies after the run. Without
streamed blocks the finals are built without block dedupe, so the answer is never lost.

Where the chat's backend is ``acp`` (or ``acp:<name>``) the run is a turn of that ACP agent
(``botd.agent.acp``) instead of botd's own loop: it emits the same events, so everything
below holds for it too, its permission requests go through the approvals
(``Approvals.choose``), and the transcript is not compacted (the agent keeps its own
context).

The run asks the conversation's model first (``ModelBook.current``: what ``/model`` chose,
else the model its chat's settings name), with its chat's system prompt (``place``: the
topic's, group's and channel's over the agent's, ``botd.config.overrides``) followed by the
turn's note (``prompt_note``: the items relevant to this turn of what ``botd.memory`` keeps
for the person or the group, the skills offered in the chat) and, for a resumed turn, the line
about its workspace on this node (``resumed_note``, ``botd.workspace.moved_note``), given
with each request and never written into the transcript; its token usage per model is queued
to commit with its last transcript write.

What the run adds goes to the transcript as it happens (``TranscriptWriter``): for a run on
inbox messages the user turn is written with their ``running`` state in one transaction, then
every finished step (an assistant message calling tools, their results); the closing message
commits with the run's end, together with its last reply's sent mark and the messages'
``answered`` state when the manager passes ``on_delivered``. Each block and final reply is
written to the outbox before it is sent (``OutboxJournal``), and the messages of its
preview are kept by the same journal, so a resumed run finishes that preview. A resumed run
(its user turn already in the transcript) gets no prompt: it continues from the transcript,
drops blocks repeating what the interrupted attempt posted, and says once that the answer
was interrupted when it had shown something, right before the first piece it adds; the first
run after the reset policy started the conversation over says that, the same way. A stopped
run posts nothing more. When the store fails (disk full, I/O error, a write it refuses) the
failure is logged and the user is told in one line; the run's output is closed and "typing…"
stopped whatever failed.

When the model refuses the request because of images in it, the agent loop leaves them
out and asks once more (``agent.loop``); the run leaves them out of what it keeps too
(``_ImagesLeftOut``): the session's history and the stored transcript (the rows rewritten in
place, in one transaction, so a resumed run or a restart never sends them again), and the
chat is told in one line, once, before the answer.

With ``agent.reasoning: stream`` the subscriber's reasoning stream goes to a
``ReasoningPoster`` (``reasoning.py``), which posts each message's reasoning as a block of
its own before its answer (``blocks`` mode; ``edit`` mode before the preview shows); in
``final`` mode, where nothing streams, the run takes reasoning ``on``: the final replies lead
with the answer's reasoning.

With ``agent.tool_progress: status`` a ``ToolProgress`` (``progress.py``) hears the run's
events and shows which tool it waits on; it is closed (its status removed) before the
final replies go out, and a resumed run first removes what the interrupted one left.

A channel whose client follows a run itself (``RunFollower``: an ACP editor) hears every event
of the run as it happens, and is told how the run ended once its last reply is out (also
when it was stopped or failed), so the client's turn ends after everything it shows. Such a
client shows the model's reasoning itself (ACP's thoughts) from the events, when
``agent.reasoning`` is not ``off``: it gets no reasoning blocks, and with ``off`` no
reasoning events.

A heartbeat check's run (``InboundMessage.heartbeat``, a scheduled job's) is shown as in
``final`` mode, without "typing…", and posts only its answer as ``heartbeat_reply`` decides:
nothing when the agent said ``HEARTBEAT_OK`` (a resumed one too), the alert without the token
otherwise. Its messages are marked answered all the same.

``Runner.compact_if_needed`` folds older turns into a summary once the transcript outgrows
the model's context budget. That budget is an estimate: when the model refuses a request
for its length all the same, the agent loop asks ``_CompactOnOverflow`` to compact the
session's history (the same summary by the model), and asks again with it, once. The
compaction is stored when the run is over and its messages are saved (``_keep_compaction``),
not during the run: the run's user turn keeps its place in the stored transcript, so a run
interrupted by a crash resumes where it was (a run that did not end well drops it: the next
one compacts again).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..agent.compaction import CompactionResult, compact_transcript, estimate_tokens, summarizer_for
from ..agent.loop import AgentRun, AgentTurn, RunResult, ToolGate
from ..agent.tools.base import Tool
from ..agent.types import Provider
from ..approvals import Approvals, Choice, RunPlace
from ..channels.base import RunFollower, thoughts_followed
from ..chat import InboundMessage, Target
from ..cluster.fencing import RunScope, lost_in
from ..config.overrides import Effective
from ..delivery import Delivery, RunOutput
from ..events import AgentEvent, Message, MessageUpdate, TextContent, recording_json
from ..media.history import with_recent_images, without_image, without_images
from ..store import StaleCompactionError, StoreError
from ..store.protocols import ConversationLedger
from ..subscriber import (
    BlockReply,
    Origin,
    StreamSubscriber,
    SubscriberConfig,
    heartbeat_reply,
    is_messaging_duplicate,
)
from .models import ModelBook, usage_of
from .notices import INTERRUPTED_NOTICE, NOT_HANDLED_NOTICE, UNSAVED_NOTICE, NoticeFirst
from .progress import StatusKeeper, ToolProgress, remove_leftovers
from .promise import Promise
from .queue import Steering
from .reasoning import ReasoningPoster
from .session import Session, Turn
from .settings import RunHooks, SessionSettings, call_hook
from .steps import Saving, TranscriptWriter
from .voice import VoiceSwitch

if TYPE_CHECKING:
    from ..agent.acp.agent import AcpAgent
    from ..agent.acp.turn import Ask
    from ..store import ApprovalState

log = logging.getLogger(__package__)


class Runner:
    """Runs the turns of every conversation (each conversation runs one at a time)."""

    # Slotted: every conversation held has its own copy (``under``), kept small.
    __slots__ = (
        "_acp",
        "_answered_by",
        "_approvals",
        "_cancelling",
        "_delivery",
        "_hooks",
        "_ledger",
        "_models",
        "_options",
        "_place",
        "_promise",
        "_prompt_note",
        "_provider",
        "_resumed_note",
        "_scope",
        "_settings",
        "_tools",
        "_voice",
    )

    def __init__(
        self,
        ledger: ConversationLedger,
        promise: Promise,
        provider: Provider,
        delivery: Delivery,
        settings: SessionSettings,
        tools: Callable[[InboundMessage], Sequence[Tool]],
        hooks: RunHooks,
        models: ModelBook,
        cancelling: Callable[[], bool],
        *,
        approvals: Approvals | None = None,
        acp: Mapping[str, AcpAgent] | None = None,
        answered_by: Callable[[InboundMessage], str] = lambda _inbound: "model",
        place: Callable[[InboundMessage], Effective],
        prompt_note: Callable[[InboundMessage, str], Awaitable[str]] | None = None,
        resumed_note: Callable[[InboundMessage, str], Awaitable[str]] | None = None,
        voice: VoiceSwitch | None = None,
    ) -> None:
        self._ledger = ledger
        self._voice = voice
        """Whether a conversation chose spoken answers (``/voice on``)."""
        self._prompt_note = prompt_note
        """What a turn is given after its chat's system prompt (the memory relevant to it,
        the skills offered): from the message it answers and the turn's text; "" for none."""
        self._resumed_note = resumed_note
        """What a resumed turn is told of its workspace on this node (``botd.workspace``):
        from the message it answers and its conversation's key; "" for nothing."""
        self._place = place
        """The settings of a message's chat: its run's system prompt and default model."""
        self._acp = acp or {}
        """The ACP agents by the backend that names them (``acp``: ``agent.acp``;
        ``acp:<name>``: ``agent.acp_agents.<name>``), each answering the chats
        ``answered_by`` says that backend for instead of the model."""
        self._answered_by = answered_by
        self._approvals = approvals
        """Asks a person before a listed tool runs (``agent.approvals``)."""
        self._promise = promise
        self._models = models
        """Which model each conversation's runs ask first."""
        self._provider = provider
        self._delivery = delivery
        self._settings = settings
        self._options = settings.run_options()
        self._tools = tools
        self._hooks = hooks
        self._cancelling = cancelling
        """True once botd's shutdown cancels runs: a run cancelled then writes nothing more
        (it resumes at the next start)."""
        self._scope: RunScope | None = None
        """The conversation whose runs these are (``under``; None: any, unfenced)."""

    def under(self, scope: RunScope, ledger: ConversationLedger, promise: Promise) -> Runner:
        """This runner for the runs of ``scope``'s conversation on this node: what they
        write goes through ``ledger`` (the store's view fenced by the conversation's lease),
        their entries and pieces move through ``promise`` (the conversation's), and their
        delivery and tools are given ``scope``. Everything else is this runner's."""
        view = copy.copy(self)
        view._scope, view._ledger, view._promise = scope, ledger, promise
        return view

    async def run(
        self,
        turn: Turn,
        steering: Steering,
        *,
        on_delivered: Callable[[str], None] | None = None,
    ) -> str:
        """Answer ``turn`` (its prompt, on behalf of its last message).

        A resumed turn's user turn is in the transcript already (an interrupted run goes on;
        its prompt is empty). ``steering`` is the conversation's: what the run reads of it
        is no longer waiting when it ends. Returns how the run ended (the agent's stop
        reason, ``cancelled`` or ``exception``).

        ``on_delivered`` is called with that outcome when the run returned and everything it
        posted is confirmed, in the same step as the last confirmation, so what it records
        commits together with that piece's sent mark. It is not called when the run raised
        or the store failed it.
        """
        session, inbound, arrived = turn.session, turn.inbound, turn.arrived
        target = inbound.reply_target()
        hooks = self._hooks

        def first_reply() -> None:
            latency = None if arrived is None else max(0.0, time.monotonic() - arrived)
            call_hook(hooks.on_first_reply, inbound, latency)

        anchor = min(turn.ids) if turn.ids else None
        posted = await self._promise.posted_before(anchor, self._delivery) if turn.resumed else []
        if turn.resumed:  # what the interrupted run showed of its tools goes first
            await remove_leftovers(
                self._ledger, self._delivery, session.conversation_key, self._scope
            )
        journal = self._promise.journal(anchor, target)
        options = replace(self._options, journal=journal, previews=journal)
        if inbound.heartbeat is not None:
            options = replace(options, mode="final", typing=False)
        elif self._voice is not None and await self._voice.on(session.conversation_key):
            # Every reply spoken, the answer whole: one voice note per answer, not per block.
            options = replace(options, voice=True, mode="final")
        output = self._delivery.open_run(
            target, options, on_first_reply=first_reply, scope=self._scope
        )
        progress = None
        if self._settings.tool_status and inbound.heartbeat is None:
            keeper = StatusKeeper(self._ledger, session.conversation_key)
            status = self._delivery.open_status(target, keeper, scope=self._scope)
            progress = ToolProgress(status, show_command=self._settings.show_command)
        outcome, notice = "exception", None
        saving: Saving | None = None
        delivered: Callable[[], None] | None = None
        overflow = _CompactOnOverflow(self._provider, session, self._settings)
        follower = self._delivery.follower(target)
        try:
            outcome, saving = await self._answer(
                turn, steering, target, output, posted, overflow, progress, follower
            )
            if on_delivered is not None:
                delivered = functools.partial(on_delivered, outcome)
        except StoreError as exc:
            log.error("the message could not be handled: the store failed: %s", exc)
            notice = NOT_HANDLED_NOTICE
        finally:
            await _closed(progress)  # done already unless the run failed before its end
            try:
                await output.close(then=delivered)  # every reply out, "typing…" stopped
            except Exception:  # "typing…" is stopped all the same; the notice still goes
                log.exception("closing the run's output to %s failed", target.chat_id)
            if follower is not None:  # after the last reply: the client's turn ends here
                await _told_over(follower, target, outcome)
        if saving is not None and not await saving.settled():
            notice = None if saving.lease_lost else UNSAVED_NOTICE
        elif saving is not None and overflow.result is not None:
            await self._keep_compaction(session, overflow.session_id, overflow.result)
        if notice is not None and not (self._scope is not None and self._scope.abandoned):
            # (A lease lost meanwhile: no send of this node's would go out, and the next
            # holder resumes the run from the store.)
            await self._tell(target, notice)
        return outcome

    async def _tell(self, target: Target, text: str) -> None:
        try:
            await self._delivery.send_text(target, text, scope=self._scope)
        except Exception as exc:
            if lost_in(exc) is not None:  # the lease went meanwhile: told by the dispatcher
                log.debug("telling the chat that the store failed: not sent: %s", exc)
                return
            log.exception("telling the chat that the store failed failed too")

    async def _answer(
        self,
        turn: Turn,
        steering: Steering,
        target: Target,
        output: RunOutput,
        posted: list[str],
        overflow: _CompactOnOverflow,
        progress: ToolProgress | None = None,
        follower: RunFollower | None = None,
    ) -> tuple[str, Saving]:
        """Run the agent; its replies go to ``output`` as they come, the finals at the end.
        ``progress`` hears the run's events and is closed (its tool status removed) when
        the run is over, before the final replies are handed to ``output``; ``follower``
        (a channel whose client follows the run itself) hears every event too.

        Returns how the run ended and the saving of what it added (see ``Saving``)."""
        session, inbound, prompt = turn.session, turn.inbound, turn.prompt
        hooks = self._hooks
        mode = output.mode
        config = self._settings.subscriber
        if mode != "blocks":
            # Nothing streams as blocks: keep each assistant message whole for the finals
            # instead of the chunker's pieces, so the answer is one reply (or one preview).
            config = replace(config, chunking=None)
        if mode == "final" and config.reasoning == "stream":
            config = replace(config, reasoning="on")  # nothing streams: it leads the finals
        thoughts = thoughts_followed(config.reasoning)
        if follower is not None:  # its client shows the reasoning itself, not as blocks
            config = replace(config, reasoning="off")
        # A resumed run says it was interrupted before its first new piece, if it was seen;
        # the first run of a conversation the reset policy started over says so.
        notice = session.take_reset_notice()
        if posted and INTERRUPTED_NOTICE not in posted:
            notice = INTERRUPTED_NOTICE
        shown = NoticeFirst(output, notice)
        subscriber, reasoning = self._subscriber(config, shown, output, inbound, posted)
        # The user turn and the messages' running state: one transaction.
        self._promise.running(
            turn.ids, session_id=session.session_id, run_id=session.run_id, user_turn=prompt
        )
        cancelling = self._cancelling
        writer = TranscriptWriter(
            self._ledger,
            session.session_id,
            written=len(prompt) if turn.ids else 0,
            keep_writing=lambda: not cancelling(),
        )
        listener = self._listener(session, subscriber)

        def on_event(event: AgentEvent) -> None:
            listener(event)
            writer.on_event(event)
            if progress is not None:
                progress.on_event(event)
            if follower is not None and (thoughts or not _thinking(event)):
                follower.run_event(target, event)

        # The chat's system prompt, given with each request and never kept in the
        # transcript; its model unless the conversation chose one (/model).
        here = self._place(inbound)
        model = await self._models.current(session.conversation_key, here.model.value)
        working_on = (
            "\n".join(c.text for m in prompt for c in m.content if isinstance(c, TextContent))
            or inbound.text
        )
        system = here.system_prompt.text
        if self._prompt_note is not None:
            # Given with this turn's requests only: what is forgotten is gone next turn.
            note = await self._prompt_note(inbound, working_on)
            system = f"{system}\n\n{note}" if system and note else system or note
        if turn.resumed and self._resumed_note is not None:
            note = await self._resumed_note(inbound, session.conversation_key)
            system = f"{system}\n\n{note}" if system and note else system or note
        loop = replace(self._settings.loop, model=model, system=system)
        overflow.model = loop.model
        run: AgentTurn
        acp = self._agent_for(inbound)
        if acp is not None:
            run = acp.turn(
                session.conversation_key,
                session.session_id,
                on_event,
                on_cancel=output.cancel,
                ask=self._chooser(turn, target),
                on_plan=progress.plan if progress is not None else None,
            )
        else:
            run = AgentRun(
                self._provider,
                self._tools(inbound),
                loop,
                on_event,
                conversation_key=session.conversation_key,
                origin=target,
                scope=self._scope,
                # A stopped run shows nothing more: not the text it still had buffered, not
                # the closing flush. Only the stop's confirmation follows.
                on_cancel=output.cancel,
                on_images_left_out=_ImagesLeftOut(self._ledger, session, shown, output),
                compact=overflow,
                gate=self._gate(turn, target),
            )
        writer.run = run
        turn.agent = run
        turn.working_on = working_on
        result: RunResult | None = None
        outcome = "exception"
        log.debug("run started")
        began = time.monotonic()
        call_hook(hooks.on_start, inbound)
        try:
            # Images stay in the transcript; only the newest are sent again (media.history).
            result = await run.run(with_recent_images(session.history), prompt)
            outcome = result.stop_reason
        except asyncio.CancelledError:
            outcome = "cancelled"
            output.cancel()
            raise
        finally:
            await _closed(progress)  # the tool status is gone before the answer shows
            log.info("run ended: %s after %.1f s", outcome, time.monotonic() - began)
            call_hook(hooks.on_end, inbound, outcome)
            added = result.messages if result is not None else run.messages
            self._count_usage(session, inbound, added, loop.model)
            # A run that returned leaves its closing messages to commit with its last reply's
            # sent mark; one that was cancelled or raised commits at once (a second cancel
            # must not cut a wait short).
            saving = self._record(turn, steering, added, writer, later=result is not None)
            if result is not None and result.stop_reason != "cancelled":
                if reasoning is not None:
                    reasoning.close()  # a last message's reasoning still waiting
                finals = subscriber.final_replies(
                    block_streaming=mode == "blocks",
                    current_message_id=inbound.message_id,
                    origin=Origin(target.channel, target.route(), target.account_id),
                )
                if inbound.heartbeat is not None:
                    finals = _heartbeat_answer(finals, inbound.heartbeat)
                for reply in finals:
                    if not (posted and is_messaging_duplicate(reply.text, posted)):
                        shown.final(reply)
        return outcome, saving

    def _gate(self, turn: Turn, target: Target) -> ToolGate | None:
        """The run's approvals gate (None: no tool needs one). Its calls are named by the
        run's first inbox entry, which a resumed run keeps."""
        if self._approvals is None:
            return None
        session = turn.session
        anchor = str(min(turn.ids)) if turn.ids else session.run_id
        place = RunPlace(session.conversation_key, anchor, session.session_id, target)
        return self._approvals.gate(place, shutting_down=self._cancelling)

    def _agent_for(self, inbound: InboundMessage) -> AcpAgent | None:
        """The ACP agent that answers ``inbound``'s chat (None: botd's own loop)."""
        backend = self._answered_by(inbound)
        if backend == "model":
            return None
        agent = self._acp.get(backend)
        if agent is None:  # named by a reload: the agents are made at start
            log.warning(
                "no ACP agent %s in this process (restart botd): the model answers", backend
            )
        return agent

    def _chooser(self, turn: Turn, target: Target) -> Ask | None:
        """How the run's ACP agent asks for a permission: through the approvals, named like
        the gate's requests (None: no approvals, every request is rejected)."""
        approvals = self._approvals
        if approvals is None:
            return None
        session = turn.session
        anchor = str(min(turn.ids)) if turn.ids else session.run_id
        place = RunPlace(session.conversation_key, anchor, session.session_id, target)
        scope = self._scope if self._scope is not None else RunScope(session.conversation_key)

        async def ask(call_id: str, title: str, choices: Sequence[Choice]) -> ApprovalState:
            return await approvals.choose(
                place, call_id, title, choices, shutting_down=self._cancelling, scope=scope
            )

        return ask

    @staticmethod
    def _subscriber(
        config: SubscriberConfig,
        shown: NoticeFirst,
        output: RunOutput,
        inbound: InboundMessage,
        posted: list[str],
    ) -> tuple[StreamSubscriber, ReasoningPoster | None]:
        """The run's subscriber, its callbacks chosen by the delivery mode: blocks and
        flushes in ``blocks`` mode, partial replies in ``edit`` mode; with reasoning
        ``stream`` (not in ``final`` mode) the reasoning goes through a poster, which the
        answer passes too so the reasoning is posted before it."""
        mode = output.mode
        on_block = shown.block if mode == "blocks" else None
        on_partial = shown.partial if mode in ("edit", "stream") else None
        on_flush = output.flush if mode == "blocks" else None
        poster = None
        if config.reasoning == "stream" and mode != "final":
            poster = ReasoningPoster(shown, output, posted)
            on_block = poster.block if on_block is not None else None
            on_partial = poster.partial if on_partial is not None else None
            on_flush = poster.flush if on_flush is not None else None
        subscriber = StreamSubscriber(
            config,
            # Without a block callback the subscriber cuts no blocks at all.
            on_block_reply=on_block,
            on_partial_reply=on_partial,
            on_block_flush=on_flush,
            on_reasoning=poster.reasoning if poster is not None else None,
            on_assistant_message_start=poster.message_start if poster is not None else None,
            current_message_id=inbound.message_id,
        )
        subscriber.skip_already_posted(posted)
        return subscriber, poster

    def _count_usage(
        self, session: Session, inbound: InboundMessage, added: list[Message], model: str
    ) -> None:
        """Queue the run's token usage to commit with its last transcript write; tell hooks."""
        try:
            usage = usage_of(added, model)
            self._ledger.record_usage_soon(
                session.conversation_key, session.session_id, session.run_id, usage
            )
        except Exception:  # counting must never keep the run's transcript from being saved
            log.exception("counting the run's token usage failed")
            return
        for entry in usage:
            call_hook(self._hooks.on_usage, inbound, entry)

    def _record(
        self,
        turn: Turn,
        steering: Steering,
        added: list[Message],
        writer: TranscriptWriter,
        *,
        later: bool,
    ) -> Saving:
        """The run is over: keep what it added, and what steering it did not read.

        ``later``: what is still unwritten commits with the store's next transaction (the
        returned saving waits for it); otherwise at once. A failure is logged, and the
        history stays as stored."""
        turn.agent = None
        turn.working_on = ""
        steering.read_by(added)
        writer.run = None  # no cycle through the run's callback: freed without the GC
        saving = Saving(self._ledger, turn.session, added, self._scope)
        try:
            if later:
                saving.pending = writer.flush_later(added)
            elif added:
                # What the events did not write yet, queued after them and committed now
                # (a second cancel cannot cut that short: nothing waits for it).
                writer.flush(added)
                self._ledger.commit_soon()
        except Exception as exc:
            saving.failed(exc)
        else:
            if saving.pending is None:
                saving.kept()
        return saving

    def _listener(
        self, session: Session, subscriber: StreamSubscriber
    ) -> Callable[[AgentEvent], None]:
        """Where the run's events go: the subscriber, and the recording when one is kept."""
        directory = self._settings.record_events_dir
        if directory is None:
            return subscriber.handle
        directory.mkdir(parents=True, exist_ok=True)
        handle = _new_recording(directory, f"{session.session_id}-{session.runs_started:04d}")

        def record(event: AgentEvent) -> None:
            subscriber.handle(event)
            handle.write(recording_json(event) + "\n")
            if event.type == "agent_end":
                handle.close()

        return record

    async def compact_if_needed(self, session: Session, inbound: InboundMessage) -> None:
        """Summarize older turns once the transcript outgrows the model's context budget
        (not where an ACP agent answers ``inbound``'s chat: it keeps its own context)."""
        if self._agent_for(inbound) is not None:
            return
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
        await self._ledger.compact(session.session_id, result)
        session.compacted(result)
        _log_compaction(session, result)

    async def _keep_compaction(
        self, session: Session, session_id: str, result: CompactionResult
    ) -> None:
        """Store the compaction a run made when the model refused its request for its
        length, now that the run's messages follow the history in the transcript; the
        session's history takes it too. A store that refuses it (the transcript changed
        since: ``/new``, images left out) is logged; the history stays as stored."""
        if session.session_id != session_id:
            return  # /new started another session meanwhile: nothing reads that one
        try:
            await self._ledger.compact(session_id, result)
        except (StaleCompactionError, StoreError) as exc:
            log.warning("the compaction made during the run could not be stored: %s", exc)
            return
        session.compacted_during_run(result)
        _log_compaction(session, result)


def _thinking(event: AgentEvent) -> bool:
    """Whether ``event`` streams the model's reasoning (what ``agent.reasoning: off`` hides)."""
    return isinstance(event, MessageUpdate) and event.assistant_event.type.startswith("thinking")


async def _told_over(follower: RunFollower, target: Target, outcome: str) -> None:
    """Tell ``follower`` the run is over; a failure is only logged (the run's end stands)."""
    try:
        await follower.run_over(target, outcome)
    except Exception:
        log.exception("telling %s that the run is over failed", target.chat_id)


async def _closed(progress: ToolProgress | None) -> None:
    """Close a run's tool progress (its status removed); a failure is only logged."""
    if progress is None:
        return
    try:
        await progress.close()
    except Exception:
        log.exception("removing the run's tool status failed")


def _heartbeat_answer(finals: Sequence[BlockReply], max_ack_chars: int) -> list[BlockReply]:
    """What a heartbeat check posts of its final replies (nothing, or its alert)."""
    reply = heartbeat_reply(finals, max_ack_chars)
    if reply is None:
        log.info("heartbeat check: nothing needs attention, nothing posted")
        return []
    return [reply]


def _log_compaction(session: Session, result: CompactionResult) -> None:
    log.info(
        "compacted %s: %d messages into a %s (%d -> %d tokens)",
        session.conversation_key,
        result.compacted_count,
        "summary" if result.summarized else "truncation note",
        result.tokens_before,
        result.tokens_after,
    )


class _CompactOnOverflow:
    """The agent loop's ``compact`` for one run: the model refused a request for its length.

    The session's history (as stored, not the run's copy with older images left out of
    what is sent) is compacted as ``Runner.compact_if_needed`` does, whatever the estimate
    says (the model said it is too long), summarized by the run's model. The recent turns
    kept verbatim are at most a quarter of the history (and ``keep_recent_tokens``): the
    estimate was wrong once, so the request must shrink well below it. The run gets the
    history in the form it sends; the result waits in ``result`` for the run's end (see
    ``Runner._keep_compaction``).
    """

    def __init__(self, provider: Provider, session: Session, settings: SessionSettings) -> None:
        self._provider = provider
        self._session = session
        self.session_id = session.session_id
        self._keep_recent = settings.keep_recent_tokens
        self.model = settings.loop.model
        """The model that summarizes: the run's (set when the run is built)."""
        self.result: CompactionResult | None = None

    async def __call__(self, sent: list[Message], added: list[Message]) -> list[Message] | None:
        # ``sent`` is the history in the form the run sends it: the stored one is compacted.
        stored = self._session.history
        result = await compact_transcript(
            stored,
            budget_tokens=0,  # the model said it is too long: the estimate does not matter
            keep_recent_tokens=min(self._keep_recent, estimate_tokens(stored) // 4),
            summarize=summarizer_for(self._provider, self.model),
        )
        if result is None:
            return None
        self.result = result
        return with_recent_images(result.messages)


class _ImagesLeftOut:
    """What a run does when the model refused images of its request (the agent loop leaves
    them out of the request and asks again): they leave the session's history and its stored
    transcript too, and the chat is told once.

    The stored messages are rewritten in one transaction that commits the run's queued
    records first (its user turn, its finished steps), so whatever the run wrote loses the
    images as well. A store that fails here is logged: this process sends the images no more,
    and after a restart the model refuses them again and they are left out then.
    """

    def __init__(
        self, ledger: ConversationLedger, session: Session, shown: NoticeFirst, output: RunOutput
    ) -> None:
        self._ledger = ledger
        self._session = session
        self._session_id = session.session_id  # the run's, should /new start another
        self._shown = shown
        self._output = output
        self._told = False

    async def __call__(self, refused: frozenset[str], held: list[Message]) -> None:
        session = self._session
        session.rewritten(without_images(session.history, refused))
        try:
            changed = await self._ledger.rewrite_messages(
                self._session_id, lambda message: without_image(message, refused)
            )
        except StoreError as exc:
            log.error("the refused image(s) could not be left out of the transcript: %s", exc)
        except Exception:
            log.exception("leaving the refused image(s) out of the transcript failed")
        else:
            log.info("left %d refused image(s) out of %d stored message(s)", len(refused), changed)
        if not self._told:
            self._told = True
            self._shown.block(BlockReply(text=_images_left_out_notice(len(refused), held)))
            self._output.flush()  # alone, not joined to the answer's first block


def _images_left_out_notice(count: int, held: Sequence[Message]) -> str:
    """The one line telling the chat that ``count`` images the model refused, held by the
    messages ``held``, were left out."""
    it, image = ("them", f"the {count} images") if count > 1 else ("it", "the image")
    if held and all(message.role == "user" for message in held):
        return f"I could not use {image} you sent (the model refused {it}), so I left {it} out."
    return (
        f"I could not use {image} in this conversation (the model refused {it}), "
        f"so I left {it} out."
    )


def _new_recording(directory: Path, stem: str) -> TextIO:
    """A new file for a run's events: ``stem.jsonl``, or ``stem.2.jsonl``… when taken.

    Never appends to an earlier recording: a run number whose count did not reach the store
    before a crash is used again by the next process, and its events must stay apart.
    """
    for attempt in itertools.count(1):
        name = f"{stem}.jsonl" if attempt == 1 else f"{stem}.{attempt}.jsonl"
        try:
            return (directory / name).open("x", encoding="utf-8")
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


__all__ = ["Runner"]
