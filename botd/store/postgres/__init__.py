"""The PostgreSQL store: botd's state in a database several nodes can share.

``PostgresStore`` implements every protocol of ``botd.store.protocols`` (``Store``) with
the SQLite store's meaning, method by method, over a ``psycopg_pool`` pool: ``base`` holds
the pool, the group commit (one flusher task of the store's own) and the store's health;
``ledger`` sessions, transcripts, inbox entries and outbox pieces; ``inbound`` dedupe ids,
accepts, chatter and offsets; ``jobs`` the scheduler's jobs, usage and model choices;
``approvals`` requests to approve tool calls; ``buttons`` the buttons under botd's
messages; ``schema`` the migrations; ``leases`` the lease table and the fence a write can
take; ``cluster`` what a conversation's owner reads and the arrival signal (cluster mode);
``status_lines`` the tool status a run shows; ``marks`` catch-up marks per chat;
``editor_sessions`` the ACP channel's sessions and what a conversation said; ``memory``
what botd keeps for a person or a group; ``forget`` a person's rows and retention;
``text`` the
adapters every connection writes strings with (a NUL as U+FFFD).

Needs the ``postgres`` extra (``pip install 'botd[postgres]'``): only the wiring imports it,
and only when ``store.backend`` is ``postgres``.
"""

from __future__ import annotations

from .approvals import ApprovalStore
from .base import describe
from .buttons import ButtonStore
from .cluster import ClusterStore
from .editor_sessions import EditorSessionStore
from .forget import ForgetStore
from .inbound import InboundStore
from .jobs import JobStore
from .ledger import LedgerStore
from .marks import MarkStore
from .memory import MemoryStore
from .overview import OverviewStore
from .schema import SCHEMA_VERSION
from .status_lines import StatusLineStore


class PostgresStore(
    LedgerStore,
    InboundStore,
    JobStore,
    ClusterStore,
    StatusLineStore,
    ApprovalStore,
    ButtonStore,
    MarkStore,
    EditorSessionStore,
    MemoryStore,
    ForgetStore,
    OverviewStore,
):
    """botd's state on PostgreSQL. Open with ``await PostgresStore.open(dsn)``; ``aclose``
    when done."""


__all__ = ["SCHEMA_VERSION", "PostgresStore", "describe"]
