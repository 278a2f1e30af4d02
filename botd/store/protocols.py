"""What the rest of botd needs from storage, as narrow protocols, one per kind of user.

Each consumer takes the protocol named for what it needs; only the wiring (``botd.app``,
``botd.wiring``) and the commands that open the state directory see a whole store
(``Store``, implemented by ``botd.store.sqlite.SqliteStore``). A network database fits
behind the same protocols: nothing here is a synchronous read.

* ``ConversationLedger``: what one conversation (``botd.conversation``) needs: its session
  and transcript, the steps of its runs, the states of its inbox entries and outbox pieces,
  the tool status its run shows (``StatusLines``), the live messages of its runs' previews
  (``PreviewLedger``), and what an earlier process left unfinished. ``ModelChoices``: what
  ``/model``, ``/status`` and ``/usage`` read and keep. ``ConversationStore``: both, for the
  registry.
* ``InboundLedger``: the router's: a message accepted with its dedupe ids in one
  transaction, ids recorded for what is no prompt, and (``Chatter``) the group lines kept
  for the next prompt, which ``botd.inbound.kept_context`` reads.
* ``Offsets``: where a channel account resumes its platform's update stream.
* ``CatchUpMarks``: in each chat, the newest message of its history botd took (moved by the
  accept or the keep of the message, in its transaction), from which an adapter reads what
  it missed while down (``botd.channels.catch_up``).
* ``EditorSessions``: the ACP channel's: the sessions editors opened (listed across
  restarts), and what a conversation said and its runs did (their tool calls, their
  thinking), replayed to an editor that loads its session.
* ``JobLedger``: the scheduler's jobs, their run log and the one-time imports.
* ``Pairing``: DM pairing's codes and approvals (``botd pairing`` and the router). It is
  apart from ``Store``: the SQLite backend keeps it in ``pairing.json``, the PostgreSQL
  backend in the database.
* ``ConversationInbox``: the dispatcher's reads of one conversation's inbox by the node that
  holds it, the conversations nobody holds, and the arrival signal (both backends).
* ``ApprovalLedger``: requests to approve tool calls, kept so a restart or another node
  finds them (``botd.approvals``).
* ``ButtonLedger``: the buttons botd put under each of its messages, the only choices a
  press of that message can be (``botd.buttons.presses``).
* ``MemoryLedger``: what botd keeps for a person or a group (``botd.memory``: the
  ``remember``, ``recall`` and ``forget`` tools, the prompt's note of it, ``/memory``).
* ``Forgetting``: a person's rows on every table (``botd.forget``: ``botd forget``,
  ``/forget me``; which rows are theirs: ``botd.store.forgetting``).
* ``PageReads``: what the web page (``botd.web``) shows: the conversations, one
  conversation's messages and pieces with their delivery state, the pending approvals.
* ``Pruning``: what the daily pruner forgets (with ``retention``, old transcript turns and
  memories too). ``StoreStatus``: what ``/healthz``,
  ``/metrics`` and ``botd status`` read (the backlog, whether writes fail).

The work of a conversation held by lease (several nodes) writes through the store's view
fenced by that lease (``fenced(fence)``, on ``ConversationStore``, ``ApprovalLedger`` and
``JobLedger``: the fence is its ``RunScope``'s, passed explicitly): such a write is made only
while the lease holds.

Three kinds of method, by what the caller may rely on when it returns:

* ``async def`` reads, and ``async def`` writes that must be durable before botd acts on
  them (a message is accepted before the platform is told, a piece is written before it is
  sent): awaited. The SQLite store groups the writes of one loop iteration into one commit
  (``botd/store/sqlite/deferred.py``); a compaction or a rewrite waits for the records queued
  before it.
* ``..._soon`` records and the other deferred records (a piece was sent, an entry answered,
  a run started, a step finished, a channel's offset, a job's next run time): queued without
  I/O and committed with the next group commit; nobody waits, and a crash loses at most the
  last moment's records, which the conversation's state machine (and the inbound ledger, for
  an offset) treats as a crash just before them. ``append_messages_later`` is the same with a
  future for the one caller that reads the outcome; ``commit_soon`` asks for that commit now.
* plain attributes kept in memory (``StoreStatus.health``, ``Pairing.is_approved``): no
  I/O beyond a file's timestamp.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, Self

from ..chat import Button, InboundMessage, MessageRef, Target
from ..cluster.fencing import Fence
from .errors import StoreHealth
from .forgetting import Forgotten, Person
from .overview import ConversationSummary, LoggedPiece
from .records import (
    CHATTER_RETENTION_SECONDS,
    ApprovalState,
    ChatMark,
    EditorSession,
    InboxBacklog,
    InboxEntry,
    InboxState,
    JobFire,
    KeptLine,
    MemoryItem,
    MemoryOwner,
    ModelUsage,
    OutboxEntry,
    PendingCode,
    PostedButtons,
    RunRecord,
    RunSteps,
    SaidLine,
    SessionRecord,
    StatusKind,
    StatusLine,
    StoredApproval,
    StoredJob,
    StoredPreview,
    UsageTotals,
    Welcome,
)

if TYPE_CHECKING:
    from ..agent.compaction import CompactionResult
    from ..events import Message  # types only: a command that reads no transcript loads none


class StatusLines(Protocol):
    """The tool status each conversation's run shows (``agent.tool_progress``), kept from
    the moment it shows until it is removed, so a run resumed after a crash removes what
    the crashed one left behind."""

    async def keep_status_line(self, conversation_key: str, line: StatusLine) -> None:
        """``line`` shows in the conversation now (kept again: nothing changes)."""
        ...

    async def status_lines(self, conversation_key: str) -> list[StatusLine]:
        """What the conversation's runs show and did not remove, oldest first."""
        ...

    async def forget_status_line(
        self, conversation_key: str, kind: StatusKind, message_id: str
    ) -> None:
        """The status ``message_id`` of ``kind`` was removed from the chat."""
        ...


class PreviewLedger(Protocol):
    """The live messages each run shows its answer in (an ``edit`` preview, a Slack stream),
    kept by the run's anchor like its pieces, so a run resumed after a crash or a takeover
    finishes those messages instead of posting the answer beside them."""

    async def preview_keep(
        self, anchor: int, refs: Sequence[MessageRef], *, streaming: bool = False
    ) -> None:
        """The run anchored at ``anchor`` shows its answer in ``refs`` (the first a native
        stream still open when ``streaming``); replaces what was kept before. Awaited:
        durable before the run shows more."""
        ...

    async def preview_of(self, anchor: int) -> StoredPreview | None:
        """What ``preview_keep`` last kept for ``anchor`` (None: nothing)."""
        ...


class ConversationLedger(StatusLines, PreviewLedger, Protocol):
    """What one conversation needs from storage (see the module docstring)."""

    # -- the conversation's session: its transcript since its start or its last /new --------

    async def open_session(self, conversation_key: str) -> SessionRecord:
        """The conversation's active session, created when it has none."""
        ...

    async def start_session(self, conversation_key: str) -> SessionRecord:
        """A new session for the conversation (``/new``, a reset by policy)."""
        ...

    async def stored_session(self, conversation_key: str) -> SessionRecord | None:
        """The active session, if the conversation has one (nothing is created)."""
        ...

    async def transcript(self, session_id: str) -> list[Message]:
        """The session's live transcript, in order."""
        ...

    def count_run_soon(self, session_id: str) -> None: ...

    # -- the steps of a run -----------------------------------------------------------------

    def append_messages_soon(self, session_id: str, messages: Sequence[Message]) -> None: ...

    def append_messages_later(
        self, session_id: str, messages: Sequence[Message]
    ) -> asyncio.Future[None]: ...

    def record_usage_soon(
        self, conversation_key: str, session_id: str, run_id: str, usage: Sequence[ModelUsage]
    ) -> None: ...

    def commit_soon(self) -> None:
        """Commit what is queued now (at the end of this loop iteration), lazy records
        included; nobody waits for it."""
        ...

    async def compact(self, session_id: str, result: CompactionResult) -> None:
        """Keep a compaction: its summary replaces the messages it summarized, after the
        records queued before it. ``StaleCompactionError`` when the transcript changed since."""
        ...

    async def rewrite_messages(
        self, session_id: str, rewrite: Callable[[Message], Message | None]
    ) -> int:
        """Give the live messages ``rewrite`` changes their new form (after the records
        queued before it, so a step written a moment ago is rewritten too); how many changed."""
        ...

    # -- inbox entries ----------------------------------------------------------------------

    def start_inbox_run(
        self,
        ids: Sequence[int],
        *,
        session_id: str,
        run_id: str,
        user_turn: Sequence[Message] = (),
    ) -> None:
        """accepted -> running, with the run's user turn (a lazy record)."""
        ...

    def finish_inbox(self, ids: Sequence[int], state: InboxState) -> None:
        """-> answered | failed | skipped (a record)."""
        ...

    async def unfinished_entries(self) -> list[InboxEntry]:
        """Every accepted or running entry of every conversation, oldest first (a takeover
        reads one conversation's: ``ConversationInbox.conversation_backlog``)."""
        ...

    async def trim_interrupted(self, session_id: str, user_turn_id: int) -> bool: ...

    # -- outbox pieces ----------------------------------------------------------------------

    async def outbox_add(
        self,
        anchor: int | None,
        seq: int,
        kind: str,
        target: Target,
        text: str,
        *,
        media: Sequence[str] = (),
        audio_as_voice: bool = False,
        buttons: Sequence[Sequence[Button]] = (),
    ) -> int:
        """A piece written before it is sent: its key once committed; ``buttons``: rows of
        buttons under its last message, sent again with it after a crash."""
        ...

    def outbox_sent(self, row_id: int, message_ids: Sequence[str]) -> None: ...

    def outbox_failed(self, row_id: int) -> None: ...

    async def outbox_sent_texts(self, anchors: Sequence[int]) -> list[str]: ...

    async def unconfirmed_pieces(self) -> list[OutboxEntry]:
        """Every piece written and never confirmed, oldest first."""
        ...

    async def outbox_supersede(self, row_ids: Sequence[int]) -> None: ...


class ConversationInbox(Protocol):
    """The dispatcher's (``botd.conversation.dispatcher``): what the node holding a
    conversation reads of its inbox, what a node taking one over reads, the conversations no
    node holds, and the signal that a message arrived. ``seq`` is an entry's place in its
    conversation, in commit order (the SQLite store's inbox ids serve as it)."""

    async def conversation_backlog(
        self, conversation_key: str
    ) -> tuple[list[InboxEntry], list[OutboxEntry]]:
        """The conversation's unfinished entries in ``seq`` order, and the unconfirmed pieces
        of its runs, oldest first."""
        ...

    async def unanchored_pieces(self) -> list[OutboxEntry]:
        """Unconfirmed pieces of runs that answered no inbox entry (in no conversation's
        backlog), oldest first."""
        ...

    async def accepted_after(self, conversation_key: str, seq: int) -> list[InboxEntry]:
        """The conversation's ``accepted`` entries past ``seq``, in ``seq`` order."""
        ...

    async def accepted_places_after(self, conversation_key: str, seq: int) -> list[tuple[int, int]]:
        """``(inbox id, seq)`` of the conversation's ``accepted`` entries past ``seq``, in
        ``seq`` order: ``accepted_after`` without reading the messages back."""
        ...

    async def accepted_heads(self, conversation_keys: Sequence[str]) -> dict[str, int]:
        """The latest ``seq`` of an ``accepted`` entry of each conversation that has one."""
        ...

    def next_place(self, inbox_id: int, seq: int) -> int | None:
        """Without a read: the ``seq`` of the entry ``inbox_id``, if this process accepted it
        lately and it is known to come right after ``seq`` in its conversation (nothing
        between); None when that is not known (read the places). Asked once per entry."""
        ...

    async def unowned_conversations(self, limit: int = 100) -> list[str]:
        """Conversations with unfinished entries whose lease is absent or expired, at most
        ``limit``; a store that does not see the leases (they are in the process) gives
        every conversation with unfinished entries, and the caller skips those it holds."""
        ...

    async def signal_arrival(self, conversation_key: str) -> None:
        """Tell every listening node (this process's dispatcher, on one node) that the
        conversation has a new entry."""
        ...

    def listen_arrivals(self) -> AsyncIterator[str | None]:
        """Arrivals' conversation keys as they come; None after each (re)connection."""
        ...


class ModelChoices(Protocol):
    """The conversations' model choices and their token usage (``/model``, ``/usage``)."""

    async def model_choice(self, conversation_key: str) -> str | None:
        """The model ``/model`` chose for the conversation (None: the configured primary)."""
        ...

    async def set_model_choice(self, conversation_key: str, model: str | None) -> None:
        """Keep ``model`` as the conversation's choice; None goes back to the primary."""
        ...

    async def last_model(self, conversation_key: str) -> str | None:
        """The model that answered last in the conversation (None: none has yet)."""
        ...

    async def usage_totals(
        self, *, conversation_key: str | None = None, since: float | None = None
    ) -> UsageTotals:
        """The usage of one conversation, or of every run since ``since`` (or both)."""
        ...


class VoiceChoices(Protocol):
    """Which conversations chose spoken replies (``/voice on``)."""

    async def voice_replies(self, conversation_key: str) -> bool:
        """Whether the conversation's answers are spoken (``/voice on``)."""
        ...

    async def set_voice_replies(self, conversation_key: str, on: bool) -> None:
        """Keep whether the conversation's answers are spoken."""
        ...


class ConversationStore(ConversationLedger, ModelChoices, VoiceChoices, Protocol):
    """What the conversations' registry is given: the ledger and the model choices."""

    def fenced(self, fence: Fence | None) -> Self:
        """This store for the work of one conversation held by ``fence``'s lease (its
        ``RunScope.fence``): every write made through it (but a piece's sent mark, the
        buttons under a posted message and an approval's decision, facts about the
        platform) is made only while that lease holds at its epoch, checked in the write's
        own transaction; a write of a lost lease raises ``LeaseLost`` (awaited) or is
        dropped (a record). None: this store itself, unfenced. A backend that cannot be
        shared by several nodes (SQLite) has nothing to fence against: it returns itself."""
        ...


class ApprovalLedger(Protocol):
    """Requests to approve tool calls (``botd.approvals``): opened by the run that waits,
    decided by a press on any node, read back by a run resumed after a restart."""

    def fenced(self, fence: Fence | None) -> Self:
        """This ledger for a run of a conversation held by ``fence``'s lease: a request is
        written only while the lease holds (a decision is a fact about a press: it is made
        whoever holds the conversation). None: this ledger (``ConversationStore.fenced``)."""
        ...

    async def open_approval(self, approval: StoredApproval) -> StoredApproval:
        """Keep a new request, committed; when one with its ``key`` is kept already, that
        one, unchanged (a resumed run finds the request its interrupted attempt made)."""
        ...

    async def approval_posted(self, key: str, messages: Sequence[MessageRef]) -> None:
        """The request's messages are posted (committed when this returns)."""
        ...

    async def approval(self, key: str) -> StoredApproval | None: ...

    async def approval_for_token(self, token: str) -> StoredApproval | None: ...

    async def decide_approval(
        self, token: str, state: ApprovalState, decided_by: str = ""
    ) -> StoredApproval | None:
        """Decide a pending request, committed: the request as decided now, or None when it
        was not pending (decided already, or unknown). Of two decisions at once, on one node
        or two, exactly one is taken."""
        ...

    async def granted(self, grant: str) -> StoredApproval | None:
        """The standing grant of the exact call ``grant`` names (a request with that
        ``grant`` decided ``always`` and not revoked); None: there is none."""
        ...

    async def grants(self, chat: str) -> Sequence[StoredApproval]:
        """The standing grants of ``chat`` (``StoredApproval.grant_chat``), oldest first."""
        ...

    async def revoke_grant(self, token: str, revoked_by: str) -> bool:
        """Revoke the standing grant decided through ``token``, committed; False when it is
        not one (any more)."""
        ...


class ButtonLedger(Protocol):
    """The buttons botd put under its messages, by message: what a press of one is checked
    against (``botd.buttons.presses``), on any node."""

    def buttons_posted_soon(self, posted: PostedButtons) -> None:
        """Record the buttons now under ``posted.message`` (deferred; a message recorded
        again has its buttons replaced)."""
        ...

    async def posted_buttons(self, message: MessageRef, answered_key: str) -> PostedButtons | None:
        """The buttons botd put under ``message`` (its channel, account, chat and id), and
        whether the inbound id ``answered_key`` of its channel is recorded (a press of it
        counted); None: botd recorded no buttons there."""
        ...


class Chatter(Protocol):
    """Group lines not addressed to the bot, kept for its next prompt in that conversation."""

    async def keep_chatter(
        self, channel: str, keys: Sequence[str], message: InboundMessage, *, limit: int
    ) -> bool:
        """Record the message's dedupe ids and, unless any was seen before, keep it as
        chatter of its conversation (its newest ``limit`` lines are kept), in one
        transaction. Whether it was a repeat."""
        ...

    async def kept_chatter(
        self, conversation_key: str, *, read_by: str | None = None
    ) -> list[KeptLine]:
        """The conversation's kept lines, oldest first (none older than
        ``CHATTER_RETENTION_SECONDS``); ``read_by``: only those after the mark of that
        reader (a member's conversation in a user-scoped group, which shares the group's
        lines: ``accept_inbound``'s ``chatter_read_by``)."""
        ...


class InboundLedger(Chatter, ButtonLedger, Protocol):
    """What the router needs: dedupe ids and accepted messages, each in one transaction,
    and the buttons a press is checked against."""

    async def accept_inbound(
        self,
        channel: str,
        keys: Sequence[str],
        message: InboundMessage,
        *,
        consume_chatter: tuple[str, int] | None = None,
        unless_chatter_kept: bool = False,
        chatter_read_by: str | None = None,
    ) -> int | None:
        """Record the message's dedupe ids and the message, atomically: its inbox id once
        committed, or None when any id was seen before (then only the ids are recorded).
        ``consume_chatter`` (conversation key, last kept line id) deletes the chatter the
        message carries in the same transaction. ``unless_chatter_kept``: if the message's
        conversation keeps chatter (what ``kept_chatter`` would return), nothing is written
        and ``ChatterKept`` is raised; the check is in the accept's own transaction, so a
        message whose conversation keeps nothing is accepted without reading the lines
        first (one round trip, not two). ``chatter_read_by``: the lines ``consume_chatter``
        names are shared by several conversations and stay kept; this reader's mark moves
        past them instead, in the same transaction."""
        ...

    async def seen_inbound(self, channel: str, *keys: str) -> bool:
        """Record a message's ids in one transaction; True if any was recorded before."""
        ...


class Offsets(Protocol):
    """Where a channel account resumes its platform's update stream after a restart."""

    async def get_offset(self, channel: str, account: str) -> str | None:
        """The account's saved position (Telegram's update offset, say), if any."""
        ...

    def set_offset_soon(self, channel: str, account: str, value: str) -> None:
        """Save the account's position with a later group commit (a record: one lost in a
        crash only has the platform send some messages again, which the inbound ledger
        drops as repeats). Saved positions are applied in the order given; on a database
        shared by several nodes a numeric position never moves backwards."""
        ...


class CatchUpMarks(Protocol):
    """Where each chat's history was last taken from, for reading what came after it."""

    async def chat_marks(self, channel: str, account: str, *, limit: int) -> list[ChatMark]:
        """The chats of ``channel``'s ``account`` where botd accepted a message of their
        history or kept one as context, each with the newest such message, the most
        recently marked first, at most ``limit``."""
        ...


class EditorSessions(Protocol):
    """The ACP channel's sessions, kept so that a restart still lists and replays them."""

    async def keep_editor_session(
        self, channel: str, session_id: str, cwd: str, *, title: str | None = None
    ) -> None:
        """Record that ``channel``'s session ``session_id`` was made, loaded or prompted
        now, in ``cwd``: made if new, its cwd replaced, its time moved; ``title`` is kept
        only if it has none yet."""
        ...

    async def editor_session(self, channel: str, session_id: str) -> EditorSession | None:
        """``channel``'s session ``session_id``, if it was kept."""
        ...

    async def editor_sessions(
        self,
        channel: str,
        *,
        cwd: str | None = None,
        after: EditorSession | None = None,
        limit: int,
    ) -> list[EditorSession]:
        """``channel``'s sessions (only those in ``cwd`` if given), the most recently
        changed first (ties by id), starting past ``after`` (the last of the page before),
        at most ``limit``."""
        ...

    async def conversation_said(self, conversation_key: str) -> list[SaidLine]:
        """What ``conversation_key``'s chat showed, oldest first: the text of each message
        accepted from the user and of each piece sent for them. Only what the inbox and the
        outbox still hold (finished rows are pruned after the inbound retention). Each line
        names its inbox row (``SaidLine.turn``)."""
        ...

    async def conversation_runs(self, conversation_key: str) -> list[RunSteps]:
        """The runs of ``conversation_key``'s inbox rows that the inbox still holds, oldest
        first: for each, the rows it answered and what it added to the transcript after
        their user turn (the rows a compaction folded included: the store keeps them)."""
        ...


class JobLedger(Protocol):
    """The scheduler's jobs, each job's run log, and the imports done once."""

    def fenced(self, fence: Fence | None) -> Self:
        """This ledger for a run of a conversation held by ``fence``'s lease (a reminder the
        run sets or cancels): its writes are made only while the lease holds. None: this
        ledger (``ConversationStore.fenced``)."""
        ...

    async def load_jobs(self) -> list[StoredJob]:
        """Every job, by id."""
        ...

    async def get_job(self, job_id: str) -> StoredJob | None: ...

    async def save_job(self, job: StoredJob) -> None:
        """Add a job, or replace the one with its id."""
        ...

    async def delete_job(self, job_id: str) -> bool:
        """Remove a job; False if there was none. Its run log is kept."""
        ...

    async def fire_job(
        self,
        job_id: str,
        due: datetime,
        next_run_time: datetime | None,
        prompt: InboundMessage | None,
        *,
        keep: bool = False,
    ) -> JobFire:
        """Fire one run of a job, in one transaction: a compare-and-set of its next run time
        from ``due`` to ``next_run_time``, and the accept of ``prompt`` into the inbox under
        its ``message_id`` as dedupe key. When the stored next run time is not ``due`` (or
        the job is gone) nothing is written: the run was fired elsewhere, or the job changed.
        ``prompt`` None moves the next run time alone (a run missed beyond its grace). A job
        with no ``next_run_time`` is done: removed, or with ``keep`` kept with none (a
        configured one-shot, which the config sync would otherwise add again)."""
        ...

    async def add_job_run(self, record: RunRecord, *, keep: int) -> None:
        """Append to a job's run log, keeping its last ``keep`` records."""
        ...

    async def job_runs(self, job_id: str) -> list[RunRecord]:
        """Each recorded run of the job, oldest first."""
        ...

    async def imported(self, name: str) -> bool:
        """Whether the import called ``name`` was done."""
        ...

    async def import_jobs(self, name: str, jobs: Sequence[StoredJob], *, detail: str = "") -> bool:
        """Add ``jobs`` (ids present already are left alone) and record the import ``name``,
        in one transaction; False, with nothing changed, when it was done before."""
        ...


class MemoryLedger(Protocol):
    """What botd keeps in memory for a person or a group (``botd.memory``), each row under
    its owner (``MemoryOwner``) and its author: the user who had it written (for a person's
    own memory, that person). A person's rows, their memory and what they had a group keep,
    are those of their channel and author (``memories`` by ``channel, author``), deleted in
    one statement. Writes take no lease fence: a memory is no conversation's state."""

    async def remember(
        self, owner: MemoryOwner, author: str, text: str, *, max_items: int
    ) -> MemoryItem | None:
        """Keep ``text`` in ``owner``'s memory: the kept item, or None (nothing written)
        when that memory holds ``max_items`` already; the count is checked in the write's
        own transaction."""
        ...

    async def memories(self, owner: MemoryOwner) -> list[MemoryItem]:
        """Everything kept in ``owner``'s memory, oldest first."""
        ...

    async def forget_memory(self, owner: MemoryOwner, memory_id: int) -> bool:
        """Drop the item ``memory_id`` of ``owner``'s memory; False when it has none such
        (another owner's id drops nothing)."""
        ...


class Forgetting(Protocol):
    """Forgetting a person (``botd forget``, ``/forget me``): every row of theirs, on every
    table (``botd.store.forgetting`` says which rows are theirs)."""

    async def forget_person(self, person: Person) -> Forgotten:
        """Remove ``person``'s rows in one transaction; the counts per table."""
        ...


class Pruning(Protocol):
    """What the daily pruner forgets (``botd.store.pruner``)."""

    async def prune_kept(self, older_than_seconds: float) -> int:
        """``retention``: drop transcript lines and memories older than the cut; how many.
        A transcript loses whole turns (up to its first user turn after the cut), all of
        them once its session is idle since the cut, unless an unfinished entry runs in it."""
        ...

    async def prune_inbound(self, older_than_seconds: float) -> int:
        """Forget inbound ids first seen more than ``older_than_seconds`` ago; how many."""
        ...

    async def prune_finished(self, older_than_seconds: float) -> int:
        """Forget finished inbox rows and sent or failed outbox pieces older than the cut."""
        ...

    async def prune_chatter(self, older_than_seconds: float = CHATTER_RETENTION_SECONDS) -> int:
        """Drop chatter kept more than ``older_than_seconds`` ago; how many lines."""
        ...


class Pairing(Protocol):
    """DM pairing: one-time codes for unknown senders, and the senders an admin approved.

    ``is_approved`` answers from what this process knows (the adapters ask it synchronously,
    before work only an admitted message needs); ``refresh`` brings that up to date with what
    another process (``botd pairing approve``, another node) changed, and the router awaits
    it before it turns an unknown sender away."""

    def is_approved(self, channel: str, sender: str) -> bool: ...

    async def refresh(self) -> None: ...

    async def issue(self, channel: str, sender: str, name: str | None = None) -> tuple[str, bool]:
        """The sender's pending code, and whether it was issued just now (a new code expires
        the channel's oldest beyond ``MAX_PENDING_PER_CHANNEL``)."""
        ...

    async def approve(self, channel: str, code: str) -> str | None:
        """Approve a pending code (any case); the sender it admits, or None."""
        ...

    async def revoke(self, channel: str, sender: str) -> bool:
        """Take back a sender's approval; False when they were not approved."""
        ...

    async def waiting(self) -> list[PendingCode]:
        """Every code still waiting for approval, by code."""
        ...

    async def approved(self) -> list[tuple[str, str, str | None]]:
        """``(channel, sender, name)`` of every approved sender, sorted."""
        ...

    async def channels(self) -> set[str]:
        """The channels that have a pending code or an approved sender."""
        ...

    async def hold(self, channel: str, sender: str, message: str) -> bool:
        """Keep ``message`` (``inbound_json``), written by a sender waiting for approval,
        with their pending code, to be answered once approved: at most ``HELD_AT_MOST`` per
        code, for as long as the code is valid. False: not kept (no code pending, or the
        limit reached)."""
        ...

    async def welcomes(self) -> list[Welcome]:
        """The senders approved (here or by another process) who were not told yet, with
        their held messages; on several nodes, each is handed to one node at a time."""
        ...

    async def welcomed(self, channel: str, sender: str) -> None:
        """``sender`` was told and their held messages taken: forget the welcome."""
        ...


class StoreStatus(Protocol):
    """What ``/healthz``, ``/metrics`` and ``botd status`` read of the store."""

    @property
    def health(self) -> StoreHealth:
        """Which kinds of write failed last time they were tried (in memory)."""
        ...

    async def inbox_backlog(self) -> InboxBacklog:
        """How many accepted messages are not finished, and the age of the oldest."""
        ...

    async def outbox_pending_count(self) -> int:
        """How many pieces are written and not confirmed sent."""
        ...

    @property
    def where(self) -> str:
        """The database, named without a password (the SQLite file, or
        ``postgresql://user@host:port/db``)."""
        ...

    async def probe(self, wait: float) -> int:
        """The schema version, read within about ``wait`` seconds; ``StoreError`` in the
        database's words when it cannot be reached."""
        ...


class PageReads(Protocol):
    """What the web page reads (``botd.store.overview``: the records and their queries)."""

    async def conversation_summaries(self, limit: int = 200) -> list[ConversationSummary]:
        """The conversations with any inbox row, the latest changed first."""
        ...

    async def conversation_pieces(self, conversation_key: str) -> list[LoggedPiece]:
        """A conversation's messages and the pieces written for them, in order, each with
        its delivery state."""
        ...

    async def pending_approvals(self) -> list[StoredApproval]:
        """The approval requests still pending, the oldest first."""
        ...


class Store(
    ConversationStore,
    ConversationInbox,
    InboundLedger,
    Offsets,
    CatchUpMarks,
    EditorSessions,
    PageReads,
    JobLedger,
    ApprovalLedger,
    ButtonLedger,
    MemoryLedger,
    Forgetting,
    Pruning,
    StoreStatus,
    Protocol,
):
    """The whole store, as the wiring sees it: every protocol above, and closing it."""

    async def aclose(self) -> None:
        """Commit what is queued and close (idempotent)."""
        ...


__all__ = [
    "ApprovalLedger",
    "ButtonLedger",
    "CatchUpMarks",
    "Chatter",
    "ConversationInbox",
    "ConversationLedger",
    "ConversationStore",
    "EditorSessions",
    "Forgetting",
    "InboundLedger",
    "JobLedger",
    "MemoryLedger",
    "ModelChoices",
    "Offsets",
    "PageReads",
    "Pairing",
    "PreviewLedger",
    "Pruning",
    "StatusLines",
    "Store",
    "StoreStatus",
    "VoiceChoices",
]
