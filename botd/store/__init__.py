"""Persistent state in one SQLite file: sessions, transcripts, the inbound ledger, offsets and
the scheduler's jobs.

``Store`` is the one class the rest of botd opens (``Store.open(state_dir)``). Its parts live
in their own modules over one shared connection (``base``): ``transcripts`` (sessions and
their append-only transcripts), ``inbound`` (dedupe ids, their daily pruning, offsets) and
``jobs`` (scheduled jobs and their run log), ``inbox`` (every accepted message and its state) and
``outbox`` (every reply piece, written before it is sent), ``chatter`` (group messages kept for
the bot's next turn there), ``usage`` (token usage per run, the conversations' model choices).
``schema`` holds the migrations. ``protocols`` says what the rest of botd needs of it
(``ConversationLedger``: what one conversation needs), so that only the wiring sees the
whole ``Store``.
"""

from __future__ import annotations

from .base import (
    BUSY_TIMEOUT_MS,
    DB_FILENAME,
    Clock,
    StoreError,
    StoreHealth,
    StoreOpenError,
    StoreWriteError,
)
from .chatter import CHATTER_RETENTION_SECONDS, ChatterStore, KeptLine
from .inbound import DEFAULT_INBOUND_RETENTION_SECONDS, InboundPruner, InboundStore
from .inbox import InboxBacklog, InboxEntry, InboxState, InboxStore
from .jobs import RunRecord, ScheduleStore, StoredJob
from .outbox import OutboxEntry, OutboxStore
from .schema import SCHEMA_VERSION
from .transcripts import (
    SessionRecord,
    StaleCompactionError,
    UnknownSessionError,
)
from .usage import USAGE_KINDS, ModelUsage, UsageStore, UsageTotals

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CHATTER_RETENTION_SECONDS",
    "DB_FILENAME",
    "DEFAULT_INBOUND_RETENTION_SECONDS",
    "SCHEMA_VERSION",
    "USAGE_KINDS",
    "Clock",
    "InboundPruner",
    "InboxBacklog",
    "InboxEntry",
    "InboxState",
    "KeptLine",
    "ModelUsage",
    "OutboxEntry",
    "RunRecord",
    "SessionRecord",
    "StaleCompactionError",
    "Store",
    "StoreError",
    "StoreHealth",
    "StoreOpenError",
    "StoreWriteError",
    "StoredJob",
    "Unanswered",
    "UnknownSessionError",
    "UsageStore",
    "UsageTotals",
]


class Store(InboxStore, OutboxStore, InboundStore, ScheduleStore, ChatterStore, UsageStore):
    """botd's SQLite state. Open with ``Store.open(state_dir)``; close when done."""
