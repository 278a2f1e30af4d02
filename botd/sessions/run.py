"""One agent run of a session: the agent, its subscriber, the recording, the transcript.

``Runner.run`` opens the run's output on the delivery, builds an ``AgentRun`` whose events
feed a ``StreamSubscriber`` (and, when asked, a JSONL recording for ``botd replay``), and
hands the subscriber's replies to the output as they come: blocks in ``blocks`` mode,
partial replies in ``edit`` mode, the final replies after the run. Without streamed blocks
the finals are built without block dedupe, so the answer is never lost. Whatever the run
added (also when it was cancelled) is appended to the transcript in the store. When the store
fails (disk full, I/O error) the failure is logged and the user is told in one line.

``Runner.compact_if_needed`` folds older turns into a summary once the transcript outgrows
the model's context budget.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..agent.loop import AgentRun, RunResult
from ..agent.tools import Tool
from ..agent.types import Provider
from ..chat import InboundMessage, Target
from ..compaction import compact_transcript, estimate_tokens, summarizer_for
from ..delivery import Delivery, RunOutput
from ..events import AgentEvent, Message, TextContent, event_to_json
from ..store import Store, StoreError
from ..subscriber import Origin, StreamSubscriber
from .session import Session
from .settings import RunHooks, SessionSettings, call_hook

log = logging.getLogger(__package__)

NOT_HANDLED_NOTICE = (
    "Sorry, I could not handle your message: botd's storage is failing. Please try again later."
)
"""Told when the store fails before the run could answer."""
UNSAVED_NOTICE = (
    "Note: botd could not save this exchange (its storage is failing), so I will not remember it."
)
"""Told after an answer whose transcript the store could not take."""


class Runner:
    """Runs one prompt of a session at a time (the manager sees to that)."""

    def __init__(
        self,
        store: Store,
        provider: Provider,
        delivery: Delivery,
        settings: SessionSettings,
        tools: Callable[[InboundMessage], Sequence[Tool]],
        hooks: RunHooks,
    ) -> None:
        self._store = store
        self._provider = provider
        self._delivery = delivery
        self._settings = settings
        self._options = settings.run_options()
        self._tools = tools
        self._hooks = hooks

    async def run(
        self,
        session: Session,
        inbound: InboundMessage,
        prompt: list[Message],
        arrived: float | None = None,
    ) -> None:
        """Answer ``prompt`` (on behalf of ``inbound``), which arrived at ``arrived``."""
        target = inbound.reply_target()
        hooks = self._hooks

        def first_reply() -> None:
            latency = None if arrived is None else max(0.0, time.monotonic() - arrived)
            call_hook(hooks.on_first_reply, inbound, latency)

        output = self._delivery.open_run(target, self._options, on_first_reply=first_reply)
        notice: str | None = None
        try:
            if not await self._answer(session, inbound, target, prompt, output):
                notice = UNSAVED_NOTICE
        except StoreError as exc:
            log.error("the message could not be handled: the store failed: %s", exc)
            notice = NOT_HANDLED_NOTICE
        finally:
            await output.close()  # every reply out, "typing…" stopped
        if notice is not None:
            await self._tell(target, notice)

    async def _tell(self, target: Target, text: str) -> None:
        try:
            await self._delivery.send_text(target, text)
        except Exception:
            log.exception("telling the chat that the store failed failed too")

    async def _answer(
        self,
        session: Session,
        inbound: InboundMessage,
        target: Target,
        prompt: list[Message],
        output: RunOutput,
    ) -> bool:
        """Run the agent; its replies go to ``output`` as they come, the finals at the end.

        False when what the run added could not be saved (the store failed)."""
        hooks = self._hooks
        mode = output.mode
        config = self._settings.subscriber
        if mode != "blocks":
            # Nothing streams as blocks: keep each assistant message whole for the finals
            # instead of the chunker's pieces, so the answer is one reply (or one preview).
            config = replace(config, chunking=None)
        subscriber = StreamSubscriber(
            config,
            # Without a block callback the subscriber cuts no blocks at all.
            on_block_reply=output.block if mode == "blocks" else None,
            on_partial_reply=output.partial if mode == "edit" else None,
            on_block_flush=output.flush if mode == "blocks" else None,
        )
        run = AgentRun(
            self._provider,
            self._tools(inbound),
            self._settings.loop,
            self._listener(session, subscriber),
            conversation_key=session.conversation_key,
            origin=target,
            # A stopped run shows nothing more: not the text it still had buffered, not the
            # closing flush. Only the stop's confirmation follows.
            on_cancel=output.cancel,
        )
        session.run = run
        session.working_on = "\n".join(
            c.text for m in prompt for c in m.content if isinstance(c, TextContent)
        )
        result: RunResult | None = None
        outcome = "exception"
        saved = True
        log.info("run started")
        call_hook(hooks.on_start, inbound)
        try:
            result = await run.run(session.history, prompt)
            outcome = result.stop_reason
        except asyncio.CancelledError:
            outcome = "cancelled"
            output.cancel()
            raise
        finally:
            log.info("run ended: %s", outcome)
            call_hook(hooks.on_end, inbound, outcome)
            saved = self._record(session, result.messages if result is not None else run.messages)
            if result is not None and result.stop_reason != "cancelled":
                finals = subscriber.final_replies(
                    block_streaming=mode == "blocks",
                    current_message_id=inbound.message_id,
                    origin=Origin(target.channel, target.route(), target.account_id),
                )
                for reply in finals:
                    output.final(reply)
        return saved

    def _record(self, session: Session, added: list[Message]) -> bool:
        """The run is over: keep what it added, and what steering it did not read.

        False when the store could not take it: logged, and the history stays as stored."""
        session.run = None
        session.working_on = ""
        consumed = {id(m) for m in added}
        session.steered = [m for m in session.steered if id(m) not in consumed]
        if added:
            try:
                self._store.append_messages(session.session_id, added)
            except StoreError as exc:
                session.runs_done += 1
                log.error(
                    "%d message(s) of the run in %s could not be saved: %s",
                    len(added),
                    session.conversation_key,
                    exc,
                )
                return False
            session.history.extend(added)
            if session.history_tokens >= 0:
                session.history_tokens += estimate_tokens(added)
        session.runs_done += 1
        return True

    def _listener(
        self, session: Session, subscriber: StreamSubscriber
    ) -> Callable[[AgentEvent], None]:
        """Where the run's events go: the subscriber, and the recording when one is kept."""
        directory = self._settings.record_events_dir
        if directory is None:
            return subscriber.handle
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{session.session_id}-{session.runs_done + 1:04d}.jsonl"
        handle = path.open("a", encoding="utf-8")

        def record(event: AgentEvent) -> None:
            subscriber.handle(event)
            handle.write(event_to_json(event) + "\n")
            if event.type == "agent_end":
                handle.close()

        return record

    async def compact_if_needed(self, session: Session) -> None:
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


__all__ = ["Runner"]
