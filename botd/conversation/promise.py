"""The one place where a conversation's inbox entries and outbox pieces change state.

The package docstring (``botd.conversation``) draws the machine; this module is it. Every
transition is a named method of ``Promise`` (or of the ``PieceJournal`` and ``RunEnd`` it
hands out), written through the ``ConversationLedger``; nothing else in botd writes an
entry's or a piece's state. Accepting (nothing -> accepted) is the inbound side's, in one
transaction with the message's dedupe keys (``Store.accept_inbound``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..chat import MessageRef, PieceKey, Target
from ..cluster.fencing import RunScope
from ..delivery import Delivery, Outgoing
from ..events import Message
from ..store import InboxEntry, InboxState, OutboxEntry, StoredPreview
from ..store.protocols import ConversationLedger
from ..subscriber import BlockReply

log = logging.getLogger(__package__)

OUTCOME_STATES: dict[str, InboxState] = {"cancelled": "skipped", "error": "failed"}
"""An entry's final state by how its run ended (anything else: answered)."""


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What an earlier process left unfinished, made ready to go on."""

    entries: list[InboxEntry] = field(default_factory=list)
    """Entries accepted or running, oldest first: queued again as they came."""
    resumed_turns: dict[int, int] = field(default_factory=dict)
    """Running entries whose run goes on from its transcript, to their user turn's row."""
    unsent: list[OutboxEntry] = field(default_factory=list)
    """Pieces written and never confirmed whose run is over: sent as it is taken over."""
    resent: dict[int, list[OutboxEntry]] = field(default_factory=dict)
    """Unconfirmed pieces of resumed runs whose platform recognises a piece sent again, by
    the run's anchor: sent again (keyed) before the run goes on (``posted_before``)."""


class Promise:
    """The transitions of the entries and pieces of every conversation (see the package
    docstring), over one ledger; ``under`` is the same for the work of one conversation on
    this node, written through the store's view fenced by its lease, its sends made for its
    ``RunScope``."""

    __slots__ = ("_ledger", "_on_end", "_resent", "scope")

    def __init__(
        self,
        ledger: ConversationLedger,
        on_end: Callable[[Sequence[int], InboxState], None] | None = None,
    ) -> None:
        """``on_end`` hears of every entry that ended, with its state, once it is recorded
        (the status reactions)."""
        self._ledger = ledger
        self._on_end = on_end
        self._resent: dict[int, list[OutboxEntry]] = {}
        self.scope: RunScope | None = None
        """The conversation whose work this is (``under``; None: of none, unfenced)."""

    def under(self, scope: RunScope, ledger: ConversationLedger) -> Promise:
        """The transitions of ``scope``'s conversation, written through ``ledger`` (the
        store's view fenced by its lease); the pieces to send again are this promise's."""
        view = Promise(ledger, self._on_end)
        view._resent = self._resent
        view.scope = scope
        return view

    # -- entries: accepted -> running -> answered | failed | skipped --------------------------

    def running(
        self, ids: Sequence[int], *, session_id: str, run_id: str, user_turn: Sequence[Message]
    ) -> None:
        """accepted -> running: a run starts on ``ids``; its user turn is written in the same
        transaction (none for a resumed run: its turn is in the transcript). A lazy record:
        lost in a crash, the entries are accepted still and their run starts over."""
        if ids:
            self._ledger.start_inbox_run(
                ids, session_id=session_id, run_id=run_id, user_turn=user_turn
            )

    def answered(self, ids: Sequence[int | None]) -> None:
        """-> answered: the run's last piece is out (or a command's answer was sent)."""
        self.end(ids, "answered")

    def failed(self, ids: Sequence[int | None]) -> None:
        """-> failed: the run or the model failed, or the answer was refused (user told)."""
        self.end(ids, "failed")

    def skipped(self, ids: Sequence[int | None]) -> None:
        """-> skipped: ``/stop``, ``/new`` or an interrupt dropped the entry or cut its run."""
        self.end(ids, "skipped")

    def end(self, ids: Sequence[int | None], state: InboxState) -> None:
        """-> ``state`` (None ids: messages not from the inbox); a failed write is logged."""
        known = [inbox_id for inbox_id in ids if inbox_id is not None]
        if not known:
            return
        try:
            self._ledger.finish_inbox(known, state)
        except Exception:
            log.exception("marking inbox messages %s %s failed", known, state)
            return  # still open: resumed (and shown as ended) after a restart
        if self._on_end is not None:
            self._on_end(known, state)

    def run_end(
        self, ids: Sequence[int], steered: Callable[[], list[int]], closing: Callable[[], bool]
    ) -> RunEnd:
        """What ends a run's entries, once: ``ids``, and the steering it took."""
        return RunEnd(self, ids, steered, closing, self.scope)

    # -- pieces: written -> sent | failed | superseded ----------------------------------------

    def journal(self, anchor: int | None, target: Target) -> PieceJournal:
        """The run's journal: each piece written before it is sent, marked after."""
        return PieceJournal(self._ledger, anchor, target)

    async def posted_before(
        self, anchor: int | None, delivery: Delivery | None = None
    ) -> list[str]:
        """What an interrupted attempt of the run anchored at ``anchor`` posted, in order.

        Its pieces a crash left unconfirmed on a platform that recognises a piece sent again
        (``ResumePlan.resent``) are sent again first, keyed: the chat shows each once, and
        the run goes on after them. Those a stop or shutdown cuts short are superseded."""
        if anchor is None:
            return []
        pieces = self._resent.pop(anchor, []) if delivery is not None else []
        if delivery is not None and pieces:
            try:
                await self.send_unconfirmed(delivery, pieces)
            except asyncio.CancelledError:
                await self._ledger.outbox_supersede([piece.id for piece in pieces])
                raise
        return await self._ledger.outbox_sent_texts([anchor])

    async def send_unconfirmed(self, delivery: Delivery, pieces: Sequence[OutboxEntry]) -> None:
        """written -> sent | failed: pieces that a crash left unconfirmed, in order, each with
        its ``PieceKey``: where the platform recognises it (``Capabilities.resend_window``)
        the chat shows it once; elsewhere it may show it twice (the documented ambiguous
        window)."""
        for piece in pieces:
            key = PieceKey.of(piece.id, piece.text, written_at=piece.written_at, unconfirmed=True)
            try:
                if piece.media:  # the files are fetched and uploaded anew, from their references
                    refs = await delivery.send_text(
                        piece.target,
                        piece.text,
                        media=piece.media,
                        audio_as_voice=piece.audio_as_voice,
                        piece=key,
                        buttons=piece.buttons,
                        scope=self.scope,
                    )
                elif piece.buttons:  # the same buttons as the first time
                    refs = await delivery.send_text(
                        piece.target, piece.text, piece=key, buttons=piece.buttons, scope=self.scope
                    )
                else:
                    refs = await delivery.send_text(
                        piece.target, piece.text, piece=key, scope=self.scope
                    )
            except Exception:
                log.exception("sending an unconfirmed reply to %s failed", piece.target.chat_id)
                self._ledger.outbox_failed(piece.id)
            else:
                self._ledger.outbox_sent(piece.id, [ref.message_id for ref in refs])

    # -- resume: the same machine, started from stored state ----------------------------------

    async def plan(
        self,
        entries: Sequence[InboxEntry],
        pieces: Sequence[OutboxEntry],
        resendable: Callable[[OutboxEntry], bool] = lambda piece: False,
    ) -> ResumePlan:
        """Make what an earlier process (or node) left of one conversation ready to go on:
        its ``entries`` (accepted or running, in order) and its unconfirmed ``pieces``, read
        when the dispatcher took it over.

        A running entry whose user turn is still live has its transcript trimmed to the last
        finished step (its run goes on from there); one whose turn is gone (a ``/new`` since)
        runs again from its text. Unconfirmed pieces of runs that go on are superseded (the
        run produces them again and skips what the chat shows), unless the run goes on from
        its transcript and ``resendable`` says their platform recognises them sent again:
        those are sent again, keyed, before the run goes on. Those of finished runs are sent
        now (``ResumePlan.unsent``).
        """
        ledger = self._ledger
        entries = list(entries)
        resumed: dict[int, int] = {}
        trimmed: dict[int, bool] = {}
        for entry in entries:
            if entry.state != "running" or entry.user_turn_id is None or entry.session_id is None:
                continue
            turn = entry.user_turn_id
            if turn not in trimmed:
                trimmed[turn] = await ledger.trim_interrupted(entry.session_id, turn)
            if trimmed[turn]:
                resumed[entry.id] = turn
        open_ids = {entry.id for entry in entries}
        unsent: list[OutboxEntry] = []
        superseded: list[int] = []
        resent: dict[int, list[OutboxEntry]] = {}
        previewed: dict[int, bool] = {}
        for piece in pieces:
            if piece.anchor is None or piece.anchor not in open_ids:
                unsent.append(piece)
            elif piece.anchor in resumed and resendable(piece):
                if piece.kind == "final":
                    # A final shown in the run's preview carries no key to find it by: the
                    # run makes it again, into that same preview, instead.
                    if piece.anchor not in previewed:
                        previewed[piece.anchor] = await ledger.preview_of(piece.anchor) is not None
                    if previewed[piece.anchor]:
                        superseded.append(piece.id)
                        continue
                resent.setdefault(piece.anchor, []).append(piece)
            else:
                superseded.append(piece.id)
        await ledger.outbox_supersede(superseded)
        self._resent.update(resent)
        return ResumePlan(entries, resumed, unsent, resent)


class RunEnd:
    """Ends a run's entries (and the steering it took) by how the run ended, once.

    Called with the run's last piece confirmation (so the state commits with that piece's
    sent mark), or after the run when it did not get that far. A run cancelled by the
    shutdown, or because this node let its conversation go (``closing``), ends nothing: its
    entries stay running and resume at the next start or takeover; nor does a run whose
    conversation's lease this node lost (fenced): the next holder resumes them.
    """

    def __init__(
        self,
        promise: Promise,
        ids: Sequence[int],
        steered: Callable[[], list[int]],
        closing: Callable[[], bool],
        scope: RunScope | None = None,
    ) -> None:
        self._promise = promise
        self._scope = scope
        self._ids = ids
        self._steered = steered
        self._closing = closing
        self._done = False

    def __call__(self, outcome: str | None) -> None:
        """``outcome``: how the run ended (None: it raised). Calls after the first do nothing."""
        if self._done:
            return
        self._done = True
        if self._scope is not None and self._scope.abandoned:
            return  # another node may own the conversation now: left for it to resume
        state = "failed" if outcome is None else OUTCOME_STATES.get(outcome, "answered")
        if self._closing() and state == "skipped":
            return  # cancelled by the shutdown or a let-go: left running, to resume
        self._promise.end([*self._ids, *self._steered()], state)


class PieceJournal:
    """One run's pieces in the outbox, keyed by the run's ``anchor`` entry (the delivery's
    ``RunJournal``): written (awaited, before the send) -> sent | failed (records); and the
    messages of its preview (the delivery's ``PreviewJournal``), kept by the same anchor."""

    def __init__(self, ledger: ConversationLedger, anchor: int | None, target: Target) -> None:
        self._ledger = ledger
        self._anchor = anchor
        self._target = target

    async def written(self, piece: Outgoing, text: str) -> int:
        reply = piece.reply
        media = reply.media_urls if isinstance(reply, BlockReply) else []
        voice = isinstance(reply, BlockReply) and reply.audio_as_voice
        return await self._ledger.outbox_add(
            self._anchor,
            piece.seq,
            piece.kind,
            self._target,
            text,
            media=media,
            audio_as_voice=voice,
            buttons=reply.buttons if isinstance(reply, BlockReply) else (),
        )

    def sent(self, key: int, refs: Sequence[MessageRef]) -> None:
        self._ledger.outbox_sent(key, [ref.message_id for ref in refs])

    def failed(self, key: int) -> None:
        self._ledger.outbox_failed(key)

    async def preview_left(self) -> StoredPreview | None:
        if self._anchor is None:
            return None
        return await self._ledger.preview_of(self._anchor)

    async def preview_posted(self, refs: Sequence[MessageRef], *, streaming: bool) -> None:
        if self._anchor is not None:
            await self._ledger.preview_keep(self._anchor, refs, streaming=streaming)


__all__ = ["OUTCOME_STATES", "PieceJournal", "Promise", "ResumePlan", "RunEnd"]
