"""What a run records of its steps: the transcript written as the run goes, and whether
its last messages reached it.

* ``TranscriptWriter`` writes each message of a run to the transcript when it is finished
  (the user's turn with the run's start, every assistant message calling tools and their
  results as they end, the closing message with the run's end), so a crash loses at most the
  step that was under way.
* ``Saving`` knows, once the last write committed, whether the run's messages are in the
  transcript; until then they stay out of the session's history.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from ..agent.loop import AgentTurn
from ..cluster.fencing import RunScope, lost_in
from ..events import AgentEvent, Message
from ..store import StoreError
from ..store.protocols import ConversationLedger
from .session import Session

log = logging.getLogger(__package__)


class TranscriptWriter:
    """Appends a run's messages to the transcript as each one is finished.

    A step the run goes on from (an assistant message calling tools, their results) is
    written when it ends. An assistant message that calls no tool is usually the run's
    last: it is left to the run's end (``flush_later``), where it commits with the run's
    other closing records. Losing it in a crash changes nothing: a resumed run drops a
    closing assistant message anyway and asks the model again from the step before.

    ``written`` counts the run's messages already in the store (the user turn, when the
    inbox wrote it with the run's start). ``keep_writing`` is asked before each write: false
    while botd shuts down, so a run cancelled then leaves only finished steps behind.
    """

    def __init__(
        self,
        ledger: ConversationLedger,
        session_id: str,
        *,
        written: int = 0,
        keep_writing: Callable[[], bool] = lambda: True,
    ) -> None:
        self._ledger = ledger
        self._session_id = session_id
        self.written = written
        self._keep_writing = keep_writing
        self.run: AgentTurn | None = None

    def on_event(self, event: AgentEvent) -> None:
        if event.type != "message_end" or self.run is None:
            return
        ended = event.message
        if ended.role == "assistant" and not ended.tool_calls():
            return  # the run's closing message, most likely: written with its end
        self.flush(self.run.messages)

    def flush(self, messages: Sequence[Message]) -> None:
        """Write the run's messages past those written already."""
        unwritten = self._unwritten(messages)
        if unwritten:
            self._ledger.append_messages_soon(self._session_id, unwritten)

    def flush_later(self, messages: Sequence[Message]) -> asyncio.Future[None] | None:
        """Write the run's messages past those written already with the store's next
        commit; the future tells when they are in (None: nothing to write)."""
        unwritten = self._unwritten(messages)
        return (
            self._ledger.append_messages_later(self._session_id, unwritten) if unwritten else None
        )

    def _unwritten(self, messages: Sequence[Message]) -> Sequence[Message]:
        """The messages past those written already (none while botd shuts down), counted
        as written from now on."""
        if len(messages) <= self.written or not self._keep_writing():
            return ()
        unwritten, self.written = messages[self.written :], len(messages)
        return unwritten


class Saving:
    """Whether a run's messages reached the transcript, known once their write committed.

    Until then they stay out of the session's history; a write that failed leaves the
    history as stored, is logged, and the run's user is told (``UNSAVED_NOTICE``) — unless
    it failed because the conversation's lease is lost (``lease_lost``): then the next
    holder resumes the run from the store, and the loss is told once, by the dispatcher.
    """

    def __init__(
        self,
        ledger: ConversationLedger,
        session: Session,
        added: list[Message],
        scope: RunScope | None = None,
    ) -> None:
        self._ledger = ledger
        self._session = session
        self._added = added
        self._scope = scope
        self.pending: asyncio.Future[None] | None = None
        """The write still to commit (None: done, or nothing was left to write)."""
        self._saved = False
        self.lease_lost = False
        """The write failed because the conversation's lease is lost (an expected end)."""

    def kept(self) -> None:
        self._session.run_kept(self._added)
        self._saved = True

    def failed(self, exc: BaseException) -> None:
        session = self._session
        session.run_lost()
        count, key = len(self._added), session.conversation_key
        if lost_in(exc) is not None or (self._scope is not None and self._scope.abandoned):
            self.lease_lost = True
            log.debug("%d message(s) of the run in %s not saved: %s", count, key, exc)
        elif isinstance(exc, StoreError):
            log.error("%d message(s) of the run in %s could not be saved: %s", count, key, exc)
        else:
            # A write failing for its own reason (text SQLite cannot take, a bug) must not
            # cut the cleanup short: the finals still go out and the user is told.
            log.error(
                "%d message(s) of the run in %s could not be saved",
                count,
                key,
                exc_info=exc,
            )
        self._saved = False

    async def settled(self) -> bool:
        """True once the messages are in the transcript; False when they could not be."""
        pending, self.pending = self.pending, None
        if pending is not None:
            if not pending.done():
                self._ledger.commit_soon()  # nothing else committed it: now
            try:
                # Shielded: a cancel arriving now must not drop the write it waits for.
                await asyncio.shield(pending)
            except Exception as exc:
                self.failed(exc)
            else:
                self.kept()
        return self._saved


__all__ = ["Saving", "TranscriptWriter"]
