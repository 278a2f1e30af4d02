"""The SQLite store: botd's state in one file, ``<state_dir>/botd.sqlite3``.

``SqliteStore`` implements every protocol of ``botd.store.protocols`` (``Store``, the whole
of them). Its parts live in their own modules over one shared connection (``base``), with
the group commit (``deferred``) and WAL checkpoints on a thread of their own
(``checkpoint``): ``transcripts`` (sessions and their append-only transcripts), ``inbound``
(dedupe ids and offsets), ``jobs`` (scheduled jobs and their run log), ``inbox`` (every
accepted message and its state), ``outbox`` (every reply piece, written before it is sent),
``chatter`` (group lines kept for the bot's next turn there), ``usage`` (token usage per run,
the conversations' model choices), ``status_lines`` (the tool status a run shows),
``approvals`` (requests to approve tool calls), ``buttons`` (the buttons under botd's
messages), ``conversation_inbox`` (what the dispatcher reads of one conversation's inbox,
and the arrival signal within the process), ``marks`` (catch-up marks per chat),
``editor_sessions`` (the ACP channel's sessions, and what a conversation said), ``memory``
(what botd keeps for a person or a group), ``forget`` (a person's rows, and retention).
``schema`` holds the migrations, ``text`` the connection that writes a NUL as U+FFFD.

Only the wiring and the commands that open the state directory import this package; every
other module takes the protocol it needs (``tests/test_import_graph.py`` checks it).
"""

from __future__ import annotations

from typing import Self

from ...cluster.fencing import Fence
from .approvals import ApprovalStore
from .base import BUSY_TIMEOUT_MS, DB_FILENAME, preflight
from .buttons import ButtonStore
from .chatter import ChatterStore
from .conversation_inbox import ConversationInboxStore
from .editor_sessions import EditorSessionStore
from .forget import ForgetStore
from .inbound import InboundStore
from .inbox import InboxStore
from .jobs import ScheduleStore
from .marks import MarkStore
from .memory import MemoryStore
from .outbox import OutboxStore
from .overview import OverviewStore
from .schema import SCHEMA_VERSION
from .status_lines import StatusLineStore
from .usage import UsageStore


class SqliteStore(
    InboxStore,
    OutboxStore,
    InboundStore,
    ScheduleStore,
    ChatterStore,
    UsageStore,
    StatusLineStore,
    ApprovalStore,
    ButtonStore,
    ConversationInboxStore,
    MarkStore,
    EditorSessionStore,
    MemoryStore,
    ForgetStore,
    OverviewStore,
):
    """botd's SQLite state. Open with ``SqliteStore.open(state_dir)``; close when done."""

    async def aclose(self) -> None:
        """``close``: commit what is queued and close the connection."""
        self.close()

    def fenced(self, fence: Fence | None) -> Self:
        """This store: one node alone has nothing to fence against (its dispatcher gives
        its conversations no fence), and a SQLite file is never shared by several nodes."""
        return self


__all__ = ["BUSY_TIMEOUT_MS", "DB_FILENAME", "SCHEMA_VERSION", "SqliteStore", "preflight"]
