"""What the rest of botd needs from storage, as narrow protocols; ``Store`` implements them.

``ConversationLedger`` is what one conversation (``botd.conversation``) needs: its session
and transcript, the steps of its runs, the states of its inbox entries and outbox pieces,
and what an earlier process left unfinished. ``ModelChoices`` is what ``/model`` and
``/usage`` read and keep. Only the wiring sees the whole ``Store``.

Three kinds of method, by what the caller may rely on when it returns:

* ``async def`` reads, and ``async def`` writes that must be durable before botd acts on
  them (a piece is written before it is sent): awaited, so a network database fits behind
  them.
* ``..._soon`` / deferred records (a piece was sent, an entry answered, a run started, a step
  finished): queued and committed with the next group commit (``store/deferred.py``); nobody
  waits, and a crash loses at most the last moment's records, which the conversation's state
  machine treats as a crash just before them. ``append_messages_later`` is the same with a
  future for the one caller that reads the outcome; ``commit_soon`` and ``flush_deferred``
  ask for that commit now.
* direct writes (``compact``, ``rewrite_messages``): committed before they return; the agent
  loop calls the second from a synchronous callback. SQLite does them on the loop thread in
  well under a millisecond.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from ..chat import Target
from ..events import Message
from .inbox import InboxEntry, InboxState
from .outbox import OutboxEntry
from .transcripts import SessionRecord
from .usage import ModelUsage, UsageTotals

if TYPE_CHECKING:
    from ..agent.compaction import CompactionResult


class ConversationLedger(Protocol):
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

    def commit_soon(self) -> None: ...

    def flush_deferred(self) -> None: ...

    def compact(self, session_id: str, result: CompactionResult) -> None: ...

    def rewrite_messages(
        self, session_id: str, rewrite: Callable[[Message], Message | None]
    ) -> int: ...

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
        """Every accepted or running entry, oldest first (what resume starts from)."""
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
    ) -> int:
        """A piece written before it is sent: its key once committed."""
        ...

    def outbox_sent(self, row_id: int, message_ids: Sequence[str]) -> None: ...

    def outbox_failed(self, row_id: int) -> None: ...

    async def outbox_sent_texts(self, anchors: Sequence[int]) -> list[str]: ...

    async def unconfirmed_pieces(self) -> list[OutboxEntry]:
        """Every piece written and never confirmed, oldest first."""
        ...

    async def outbox_supersede(self, row_ids: Sequence[int]) -> None: ...


class ModelChoices(Protocol):
    """The conversations' model choices and their token usage (``/model``, ``/usage``)."""

    def model_choice(self, conversation_key: str) -> str | None: ...

    def set_model_choice(self, conversation_key: str, model: str | None) -> None: ...

    def last_model(self, conversation_key: str) -> str | None: ...

    def usage_totals(
        self, *, conversation_key: str | None = None, since: float | None = None
    ) -> UsageTotals: ...


class ConversationStore(ConversationLedger, ModelChoices, Protocol):
    """What the conversations' registry is given: the ledger and the model choices."""


__all__ = ["ConversationLedger", "ConversationStore", "ModelChoices"]
