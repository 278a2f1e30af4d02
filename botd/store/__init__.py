"""botd's persistent state behind narrow protocols: sessions and transcripts, the inbound
ledger and inbox, the outbox, kept chatter, offsets, token usage, the scheduler's jobs.

``protocols`` says what each part of botd needs of storage (``ConversationLedger``,
``InboundLedger``, ``Offsets``, ``JobLedger`` ...), ``records`` the records they take and
return, ``errors`` what they raise (``StoreWriteError`` for a storage fault, ``ContentRefused``
for a write refused for what it carries); ``pruner`` forgets what is kept no longer than needed.
The one implementation today is SQLite (``sqlite.SqliteStore``), which only the wiring
opens (``botd.app``); it hands each consumer the protocol that consumer needs.
"""

from __future__ import annotations

from .errors import (
    Clock,
    ContentRefused,
    StaleCompactionError,
    StoreError,
    StoreHealth,
    StoreOpenError,
    StoreWriteError,
    UnknownSessionError,
)
from .protocols import (
    ApprovalLedger,
    ButtonLedger,
    Chatter,
    ConversationLedger,
    ConversationStore,
    InboundLedger,
    JobLedger,
    ModelChoices,
    Offsets,
    Pairing,
    Pruning,
    StatusLines,
    Store,
    StoreStatus,
)
from .pruner import InboundPruner
from .records import (
    CHATTER_RETENTION_SECONDS,
    DEFAULT_INBOUND_RETENTION_SECONDS,
    FINISHED_STATES,
    USAGE_KINDS,
    ApprovalState,
    InboxBacklog,
    InboxEntry,
    InboxState,
    JobFire,
    KeptLine,
    ModelUsage,
    OutboxEntry,
    Outcome,
    PendingCode,
    PostedButtons,
    RunRecord,
    SessionRecord,
    StatusKind,
    StatusLine,
    StoredApproval,
    StoredJob,
    StoredPreview,
    UsageTotals,
)

__all__ = [
    "CHATTER_RETENTION_SECONDS",
    "DEFAULT_INBOUND_RETENTION_SECONDS",
    "FINISHED_STATES",
    "USAGE_KINDS",
    "ApprovalLedger",
    "ApprovalState",
    "ButtonLedger",
    "Chatter",
    "Clock",
    "ContentRefused",
    "ConversationLedger",
    "ConversationStore",
    "InboundLedger",
    "InboundPruner",
    "InboxBacklog",
    "InboxEntry",
    "InboxState",
    "JobFire",
    "JobLedger",
    "KeptLine",
    "ModelChoices",
    "ModelUsage",
    "Offsets",
    "OutboxEntry",
    "Outcome",
    "Pairing",
    "PendingCode",
    "PostedButtons",
    "Pruning",
    "RunRecord",
    "SessionRecord",
    "StaleCompactionError",
    "StatusKind",
    "StatusLine",
    "StatusLines",
    "Store",
    "StoreError",
    "StoreHealth",
    "StoreOpenError",
    "StoreStatus",
    "StoreWriteError",
    "StoredApproval",
    "StoredJob",
    "StoredPreview",
    "UnknownSessionError",
    "UsageTotals",
]
