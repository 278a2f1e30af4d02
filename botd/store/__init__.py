"""Persistent state in one SQLite file: sessions, transcripts, the inbound ledger, offsets and
the scheduler's jobs.

``Store`` is the one class the rest of botd opens (``Store.open(state_dir)``). Its parts live
in their own modules over one shared connection (``base``): ``transcripts`` (sessions and
their append-only transcripts), ``inbound`` (dedupe ids, their daily pruning, offsets) and
``jobs`` (scheduled jobs and their run log). ``schema`` holds the migrations.
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
from .inbound import DEFAULT_INBOUND_RETENTION_SECONDS, InboundPruner, InboundStore
from .jobs import RunRecord, ScheduleStore, StoredJob
from .schema import SCHEMA_VERSION
from .transcripts import (
    SessionRecord,
    StaleCompactionError,
    TranscriptStore,
    UnknownSessionError,
)

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DB_FILENAME",
    "DEFAULT_INBOUND_RETENTION_SECONDS",
    "SCHEMA_VERSION",
    "Clock",
    "InboundPruner",
    "RunRecord",
    "SessionRecord",
    "StaleCompactionError",
    "Store",
    "StoreError",
    "StoreHealth",
    "StoreOpenError",
    "StoreWriteError",
    "StoredJob",
    "UnknownSessionError",
]


class Store(TranscriptStore, InboundStore, ScheduleStore):
    """botd's SQLite state. Open with ``Store.open(state_dir)``; close when done."""
