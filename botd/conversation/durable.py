"""The sessions' side of the durable inbox and outbox.

* ``OutboxJournal`` writes a run's blocks and final replies to the store's outbox before they
  are sent and marks them sent after (the ``RunJournal`` the run's outbox calls).
* ``TranscriptWriter`` writes each message of a run to the transcript when it is finished
  (the user's turn when the run starts, every assistant message and tool result when it
  ends), so a crash loses at most the step that was under way.
* ``resume_plan`` reads what a previous process left unfinished: the inbox rows to run again,
  in order, and the outbox pieces it wrote but never confirmed.

Inbox states as the sessions set them: ``running`` when a run starts on a message (every
message of a collected batch; the run writes their one user turn); ``answered`` when the run
ended (collected messages too: the run answered them together); ``failed`` when the model or
the run failed; ``skipped`` when ``/stop``, ``/new`` or an ``interrupt`` dropped the message or
cancelled its run (or its files being read before the run). A run, or a reading of files,
cancelled because botd shuts down marks nothing: its messages stay ``running`` (or
``accepted``, when still waiting or being prepared) and the next start resumes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..agent.loop import AgentRun
from ..chat import MessageRef, Target
from ..delivery import Outgoing, RunOutput
from ..events import AgentEvent, Message
from ..store import InboxEntry, OutboxEntry, Store
from ..subscriber import BlockReply, PartialReply

log = logging.getLogger(__package__)

INTERRUPTED_NOTICE = "(The answer was interrupted by a restart; continuing.)"
"""Posted once before a resumed answer goes on, when the interrupted one had shown something."""


class OutboxJournal:
    """One run's pieces in the store's outbox, keyed by the run's ``anchor`` inbox id."""

    def __init__(self, store: Store, anchor: int | None, target: Target) -> None:
        self._store = store
        self._anchor = anchor
        self._target = target

    async def written(self, piece: Outgoing, text: str) -> int:
        reply = piece.reply
        media = reply.media_urls if isinstance(reply, BlockReply) else []
        voice = isinstance(reply, BlockReply) and reply.audio_as_voice
        return await self._store.outbox_add(
            self._anchor,
            piece.seq,
            piece.kind,
            self._target,
            text,
            media=media,
            audio_as_voice=voice,
        )

    def sent(self, key: int, refs: Sequence[MessageRef]) -> None:
        self._store.outbox_sent(key, [ref.message_id for ref in refs])

    def failed(self, key: int) -> None:
        self._store.outbox_failed(key)


class NoticeFirst:
    """A run's output with a one-line notice going out before its first piece.

    The notice (None: none) says why the answer is what it is: a resumed run's that it was
    interrupted (only when the interrupted attempt had shown something), a run in a
    conversation the reset policy just started over that it starts over. It goes out only if
    the run has something to add: an answer the chat already shows in full gets no notice.
    """

    def __init__(self, output: RunOutput, notice: str | None) -> None:
        self._output = output
        self._notice_text = notice

    def _notice(self) -> None:
        if self._notice_text is not None:
            text, self._notice_text = self._notice_text, None
            self._output.block(BlockReply(text=text))
            self._output.flush()  # alone, not joined to the answer's first block

    def block(self, reply: BlockReply) -> None:
        self._notice()
        self._output.block(reply)

    def partial(self, reply: PartialReply) -> None:
        self._notice()
        self._output.partial(reply)

    def final(self, reply: BlockReply) -> None:
        self._notice()
        self._output.final(reply)


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
        store: Store,
        session_id: str,
        *,
        written: int = 0,
        keep_writing: Callable[[], bool] = lambda: True,
    ) -> None:
        self._store = store
        self._session_id = session_id
        self.written = written
        self._keep_writing = keep_writing
        self.run: AgentRun | None = None

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
            self._store.append_messages_soon(self._session_id, unwritten)

    def flush_later(self, messages: Sequence[Message]) -> asyncio.Future[None] | None:
        """Write the run's messages past those written already with the store's next
        commit; the future tells when they are in (None: nothing to write)."""
        unwritten = self._unwritten(messages)
        return self._store.append_messages_later(self._session_id, unwritten) if unwritten else None

    def _unwritten(self, messages: Sequence[Message]) -> Sequence[Message]:
        """The messages past those written already (none while botd shuts down), counted
        as written from now on."""
        if len(messages) <= self.written or not self._keep_writing():
            return ()
        unwritten, self.written = messages[self.written :], len(messages)
        return unwritten


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What an earlier process left unfinished."""

    entries: list[InboxEntry] = field(default_factory=list)
    """Inbox rows to run again, oldest first (running ones flagged by their user turn)."""
    resumed_turns: set[int] = field(default_factory=set)
    """Inbox ids whose user turn is in the transcript: their run continues from it."""
    unsent: list[OutboxEntry] = field(default_factory=list)
    """Pieces written and never confirmed whose run is over: to send now."""


def resume_plan(store: Store) -> ResumePlan:
    """Read the unfinished inbox and outbox and make the transcripts resumable.

    A running message whose user turn is still live has its transcript trimmed to the last
    finished step; one whose turn is gone (a ``/new`` since) runs again from its text.
    Unconfirmed pieces of runs that resume are left to them (the resumed run produces
    them again and skips what the chat shows); those of finished runs are sent.
    """
    entries = store.unfinished_inbox()
    resumed: set[int] = set()
    trimmed: dict[int, bool] = {}
    for entry in entries:
        if entry.state != "running" or entry.user_turn_id is None or entry.session_id is None:
            continue
        turn = entry.user_turn_id
        if turn not in trimmed:
            trimmed[turn] = store.trim_interrupted(entry.session_id, turn)
        if trimmed[turn]:
            resumed.add(entry.id)
    open_ids = {entry.id for entry in entries}
    unsent: list[OutboxEntry] = []
    superseded: list[int] = []
    for piece in store.outbox_pending():
        if piece.anchor is not None and piece.anchor in open_ids:
            superseded.append(piece.id)
        else:
            unsent.append(piece)
    store.outbox_supersede(superseded)
    return ResumePlan(entries, resumed, unsent)


__all__ = [
    "INTERRUPTED_NOTICE",
    "NoticeFirst",
    "OutboxJournal",
    "ResumePlan",
    "TranscriptWriter",
    "resume_plan",
]
