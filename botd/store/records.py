"""The records the store's protocols take and return, the same for every backend.

Plain frozen dataclasses (and the constants that say how long things are kept): what a
session, an inbox entry, an outbox piece, a kept chatter line, a run's token usage, a
scheduled job and its run look like to the rest of botd, whichever database holds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ..chat import Attachment, Button, InboundMessage, MessageRef, Target
from ..events import Message

DEFAULT_INBOUND_RETENTION_SECONDS = 7 * 24 * 3600.0
"""How long inbound ids are kept: far beyond any platform's redelivery window."""


CHATTER_RETENTION_SECONDS = 7 * 24 * 3600.0
"""Chatter older than this is dropped: a week-old remark is no context for today's question."""


USAGE_KINDS: tuple[str, ...] = ("input", "output", "cache_read", "cache_write")
"""The kinds of token counted, as ``/usage`` and the metrics name them."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session: a conversation's transcript from its start (or its last ``/new``)."""

    session_id: str
    conversation_key: str
    created_at: float
    updated_at: float
    message_count: int
    """Messages in the live transcript (what ``load_transcript`` returns)."""
    summary: str | None
    """The latest compaction summary, if the transcript was ever compacted."""
    active: bool
    """Whether this is the session that its conversation key currently uses."""
    runs: int = 0
    """Runs the session started (the number of its latest run; see ``count_run_soon``)."""


InboxState = Literal["accepted", "running", "answered", "failed", "skipped"]


FINISHED_STATES = ("answered", "failed", "skipped")


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """One accepted message not yet answered (as ``unfinished_inbox`` returns it)."""

    id: int
    message: InboundMessage
    """The message as accepted, ``inbox_id`` set."""
    state: InboxState
    session_id: str | None
    user_turn_id: int | None
    """The transcript row of the user turn its run wrote (None: no run started)."""
    attempts: int
    seq: int = 0
    """Its place in its conversation, in commit order (PostgreSQL; 0 where the backend
    keeps none)."""


@dataclass(frozen=True, slots=True)
class InboxBacklog:
    """The accepted messages not finished yet (``accepted`` or ``running``)."""

    count: int
    oldest_age: float | None
    """Seconds since the oldest of them was accepted (None: there is none)."""


StatusKind = Literal["message", "assistant"]
"""How a run's tool status shows: a status line message, or an assistant thread's status
(Slack), whose ``message_id`` is the thread's."""


@dataclass(frozen=True, slots=True)
class StatusLine:
    """A tool status a run shows in a chat, kept until it is removed (``StatusLines``)."""

    kind: StatusKind
    target: Target
    message_id: str


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A piece written but never confirmed sent."""

    id: int
    anchor: int | None
    seq: int
    kind: str
    target: Target
    text: str
    media: tuple[str, ...] = ()
    """The files the piece uploads (URLs or local paths)."""
    audio_as_voice: bool = False
    written_at: float = 0.0
    """When the piece was written (the store's clock: wall-clock seconds)."""
    buttons: tuple[tuple[Button, ...], ...] = ()
    """The rows of buttons under the piece's last message."""


@dataclass(frozen=True, slots=True)
class StoredPreview:
    """The live messages a run showed its answer in (an ``edit`` preview, or a Slack stream
    and the messages after it), as last written: a resumed run finishes those instead of
    posting its answer beside them."""

    refs: tuple[MessageRef, ...]
    streaming: bool = False
    """Whether the first message was a native stream still open when this was written."""


@dataclass(frozen=True, slots=True)
class KeptLine:
    """One kept message: who said it, what, and the files it came with."""

    id: int
    sender_id: str
    sender_name: str
    text: str
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True)
class ChatMark:
    """Where botd last took a message in one chat (or one thread of it): the newest message
    of its history accepted or kept as context there, by the platform's id, and when."""

    chat_id: str
    thread_id: str | None
    message_id: str
    marked_at: float

    @property
    def where(self) -> str:
        """The history this mark is in: the thread's id, else the chat's."""
        return self.thread_id or self.chat_id


@dataclass(frozen=True, slots=True)
class EditorSession:
    """An ACP session an editor opened on a channel instance (``EditorSessions``): its
    id, the editor's working directory, a title (the start of its first prompt) and when
    it last changed (made, loaded, prompted)."""

    session_id: str
    cwd: str
    title: str | None
    updated_at: float


MemoryKind = Literal["user", "group"]
"""Whose memory: one person's (offered only in their direct chats) or one group's."""


@dataclass(frozen=True, slots=True)
class MemoryOwner:
    """Whose memory a row is (``MemoryLedger``): a person on a channel instance (``kind``
    ``user``, ``id`` their user id) or a group chat on it (``group``, the chat id)."""

    channel: str
    kind: MemoryKind
    id: str


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One thing botd keeps in a memory: its row id, what it says, who had it written
    (``author``: for a person's own memory, that person) and when."""

    id: int
    text: str
    author: str
    created_at: float


SaidBy = Literal["user", "bot"]


@dataclass(frozen=True, slots=True)
class SaidLine:
    """One thing said in a conversation as its chat showed it: a message botd accepted
    from the user (its text), or a piece botd sent (its text as sent)."""

    by: SaidBy
    text: str
    at: float
    """When it was accepted or written (the store's clock)."""
    message_id: str | None = None
    """The platform's id of the user's message (None for botd's pieces)."""
    turn: int | None = None
    """The inbox row it belongs to: the user's message's own; for a piece, the message it
    answered (its anchor). ``RunSteps.inbox_ids`` names the same rows."""


@dataclass(frozen=True, slots=True)
class RunSteps:
    """What one run added to its conversation's transcript after its user turn: assistant
    messages (their thinking, text and tool calls) and tool results, in the transcript's
    order (``EditorSessions.conversation_runs``)."""

    inbox_ids: tuple[int, ...]
    """The inbox rows the run answered (several when queued messages were run as one)."""
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """The tokens one model used in one run."""

    model: str
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def counts(self) -> dict[str, int]:
        """The counts by kind (``USAGE_KINDS``)."""
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Summed usage over some runs."""

    runs: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


Outcome = Literal["submitted", "failed"]


@dataclass(frozen=True, slots=True)
class StoredJob:
    """One scheduled job as the store keeps it."""

    id: str
    kind: str
    """``cron``, ``every`` or ``at``."""
    trigger: dict[str, Any]
    """The trigger's data: ``expr`` and ``timezone``; ``seconds`` and ``start``; ``run_date``."""
    name: str
    """How listings show the job."""
    prompt: str
    target: Target
    conversation_key: str | None = None
    source: str | None = None
    """``config`` for a job the configuration owns; None for one made at run time."""
    fingerprint: str | None = None
    """A config job's definition as text, to tell whether the configuration changed it."""
    next_run_time: datetime | None = None
    heartbeat: int | None = None
    """A heartbeat check's acknowledgement bound (``JobSpec.heartbeat``); None: not one."""


@dataclass(frozen=True, slots=True)
class JobFire:
    """What ``JobLedger.fire_job`` did with one run of a job."""

    advanced: bool
    """Whether this call moved the job's next run time: the run was this caller's to fire.
    False when the stored next run time was no longer the one fired (another node fired
    it, or the job was changed or removed meanwhile): then nothing was written."""
    inbox_id: int | None = None
    """The prompt's inbox row, when it was accepted (None: no prompt was given, or its
    dedupe key was recorded before, by an earlier fire of the same run)."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of a job: when, and whether its prompt was handed over."""

    job_id: str
    at: datetime
    outcome: Outcome
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PendingCode:
    """A pairing code waiting for an admin: who asked, on which channel, and when."""

    code: str
    channel: str
    sender: str
    name: str | None
    """The sender's display name when the code was issued (None: not known)."""
    issued_at: float


@dataclass(frozen=True, slots=True)
class Welcome:
    """A sender approved by pairing who was not told yet that they can talk now, with the
    messages they wrote while they waited (``inbound_json`` text, oldest first)."""

    channel: str
    sender: str
    held: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PostedButtons:
    """The buttons botd put under one of its messages (``ButtonLedger``): the only choices a
    press of that message may count as, whatever data the presser's client sends."""

    message: MessageRef
    rows: tuple[tuple[Button, ...], ...]
    posted_at: float
    """When botd posted them (its own wall clock, to the fraction of a second): buttons
    from before a conversation's current session began are expired."""
    answered: bool = False
    """A press of the message counted already (one press per message counts)."""
    conversation: str | None = None
    """The conversation whose run posted them, where a press of them goes (None: not
    recorded, as for buttons posted before botd recorded it)."""

    def button(self, value: str) -> Button | None:
        """The button of the message whose value is ``value`` (None: no such button)."""
        for row in self.rows:
            for button in row:
                if button.value == value:
                    return button
        return None


ApprovalState = Literal["pending", "approved", "always", "denied", "expired", "stopped", "revoked"]
"""Where a request to approve a tool call is: waiting, decided by a press (``always``:
approved for this call and the like from then on, a choice an ACP agent offers), out of
time, or given up because its run was stopped."""


@dataclass(frozen=True, slots=True)
class StoredApproval:
    """A request to approve one tool call of a run (``agent.approvals``).

    ``key`` names the call: the same before a restart and after it, so a resumed run finds
    its request rather than asking again. ``token`` is the short id the request's buttons
    carry. ``messages`` are the request messages posted (one per approver's chat when asked
    there), empty until they are. ``deadline`` is wall-clock seconds: it holds across
    processes and nodes.
    """

    key: str
    token: str
    session_id: str
    call_id: str
    tool_name: str
    summary: str
    """What the request shows of the call: ``tool(arguments)``, bounded and redacted."""
    deadline: float
    state: ApprovalState = "pending"
    decided_by: str = ""
    """Who pressed (their display name), once approved or denied."""
    messages: tuple[MessageRef, ...] = ()
    created_at: float = 0.0
    decided_at: float | None = None
    grant: str | None = None
    """For a request that offers "always allow here": a digest of the exact call in its
    chat (``botd.approvals.grants``). Decided ``always``, the row is a standing grant: the
    same call in the same chat runs without asking, until revoked. None: no grant offered."""
    grant_chat: str | None = None
    """The chat a grant holds in (``<channel>:<account>:<chat id>``), to list its grants."""


__all__ = [
    "CHATTER_RETENTION_SECONDS",
    "DEFAULT_INBOUND_RETENTION_SECONDS",
    "FINISHED_STATES",
    "USAGE_KINDS",
    "ApprovalState",
    "InboxBacklog",
    "InboxEntry",
    "InboxState",
    "KeptLine",
    "MemoryItem",
    "MemoryKind",
    "MemoryOwner",
    "ModelUsage",
    "OutboxEntry",
    "Outcome",
    "PendingCode",
    "PostedButtons",
    "RunRecord",
    "SessionRecord",
    "StatusKind",
    "StatusLine",
    "StoredApproval",
    "StoredJob",
    "StoredPreview",
    "UsageTotals",
    "Welcome",
]
