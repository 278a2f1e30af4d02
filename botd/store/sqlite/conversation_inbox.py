"""What the dispatcher reads of one conversation's inbox (``ConversationInbox``), and the
arrival signal, within the one process that uses the file.

An entry's place in its conversation (``InboxEntry.seq``) is its inbox id: ids are given in
commit order (one connection, each transaction written whole in one step), so a
conversation's ids are its accept order, with gaps where other conversations' entries fell.
The reads go through the partial index ``inbox_unfinished_by_conversation`` (the waiting rows
only, by conversation and id).

The leases are in the process (``botd.cluster.leases.ProcessLeases``), not in the file, so
``unowned_conversations`` is every conversation with unfinished entries: the dispatcher skips
those it holds. No other process can accept into the file (the state dir's lock), so an
arrival is told to the listeners in this process (each ``listen_arrivals`` iteration has a
queue of its own); with none listening it is dropped, as a ``NOTIFY`` nobody ``LISTEN``s to
is, and the dispatcher's poll finds the entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from ..records import InboxEntry, OutboxEntry
from ..rows import OUTBOX_COLUMNS, outbox_entry_from_row
from .deferred import DeferredWrites
from .inbox import ENTRY_COLUMNS, inbox_entry

_ENTRY = f"SELECT {ENTRY_COLUMNS} FROM inbox "
_WAITING = "state IN ('accepted', 'running')"
"""The partial index's condition: a read that names it can use the index."""


class ConversationInboxStore(DeferredWrites):
    """``ConversationInbox`` on SQLite (see the module docstring)."""

    _arrival_listeners: set[asyncio.Queue[str]] | None = None

    async def conversation_backlog(
        self, conversation_key: str
    ) -> tuple[list[InboxEntry], list[OutboxEntry]]:
        """The conversation's unfinished entries in order, and the unconfirmed pieces of its
        runs (finished or not), oldest first; after the records queued before it."""
        self.flush_deferred()
        conn = self._connection()
        rows = conn.execute(
            _ENTRY + f"WHERE conversation_key = ? AND {_WAITING} ORDER BY id",
            (conversation_key,),
        ).fetchall()
        # The pending pieces (the partial index ``outbox_waiting``), each to its anchor's row.
        pieces = conn.execute(
            f"SELECT {', '.join('o.' + c for c in OUTBOX_COLUMNS.split(', '))} "
            "FROM outbox o JOIN inbox i ON i.id = o.anchor "
            "WHERE o.state = 'pending' AND i.conversation_key = ? ORDER BY o.id",
            (conversation_key,),
        ).fetchall()
        return [inbox_entry(row) for row in rows], [outbox_entry_from_row(row) for row in pieces]

    async def accepted_after(self, conversation_key: str, seq: int) -> list[InboxEntry]:
        """The conversation's ``accepted`` entries past ``seq`` (an inbox id), in order."""
        rows = (
            self._connection()
            .execute(
                _ENTRY + f"WHERE conversation_key = ? AND {_WAITING} AND state = 'accepted' "
                "AND id > ? ORDER BY id",
                (conversation_key, seq),
            )
            .fetchall()
        )
        return [inbox_entry(row) for row in rows]

    def next_place(self, inbox_id: int, seq: int) -> int | None:
        """Never known here: a conversation's ids have gaps (other conversations' entries
        fall between), so what comes next is read (``accepted_places_after``)."""
        return None

    async def accepted_places_after(self, conversation_key: str, seq: int) -> list[tuple[int, int]]:
        """``(inbox id, seq)`` of the conversation's ``accepted`` entries past ``seq``, in
        order (the two are one here): ``accepted_after`` without the messages."""
        rows = (
            self._connection()
            .execute(
                f"SELECT id FROM inbox WHERE conversation_key = ? AND {_WAITING} "
                "AND state = 'accepted' AND id > ? ORDER BY id",
                (conversation_key, seq),
            )
            .fetchall()
        )
        return [(int(row[0]), int(row[0])) for row in rows]

    async def accepted_heads(self, conversation_keys: Sequence[str]) -> dict[str, int]:
        """The latest id of an ``accepted`` entry of each of the conversations that have one
        (one read of the waiting rows, whatever the number of keys)."""
        if not conversation_keys:
            return {}
        wanted = set(conversation_keys)
        rows = (
            self._connection()
            .execute(
                f"SELECT conversation_key, max(id) FROM inbox WHERE {_WAITING} "
                "AND state = 'accepted' GROUP BY conversation_key"
            )
            .fetchall()
        )
        return {str(key): int(seq) for key, seq in rows if key in wanted}

    async def unowned_conversations(self, limit: int = 100) -> list[str]:
        """Every conversation with unfinished entries, the one waiting longest first.

        The store does not see the leases (they are in the process): the caller skips the
        conversations it holds. ``limit`` is not applied: the held ones, first in line while
        they run, would crowd the others out of any page."""
        rows = (
            self._connection()
            .execute(
                f"SELECT conversation_key FROM inbox WHERE {_WAITING} "
                "GROUP BY conversation_key ORDER BY min(id)"
            )
            .fetchall()
        )
        return [str(row[0]) for row in rows]

    async def unanchored_pieces(self) -> list[OutboxEntry]:
        """Unconfirmed pieces of runs that answered no inbox entry, oldest first; after the
        records queued before it."""
        self.flush_deferred()
        rows = (
            self._connection()
            .execute(
                f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE state = 'pending' "
                "AND anchor IS NULL ORDER BY id"
            )
            .fetchall()
        )
        return [outbox_entry_from_row(row) for row in rows]

    async def signal_arrival(self, conversation_key: str) -> None:
        """Tell every listener in this process that the conversation has a new entry."""
        for queue in self._arrival_listeners or ():
            queue.put_nowait(conversation_key)

    async def listen_arrivals(self) -> AsyncIterator[str | None]:
        """The keys of arrivals as they are signalled, for as long as the caller iterates;
        None first (nothing signalled before was heard)."""
        if self._arrival_listeners is None:
            self._arrival_listeners = set()
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._arrival_listeners.add(queue)
        try:
            yield None
            while True:
                yield await queue.get()
        finally:
            self._arrival_listeners.discard(queue)


__all__ = ["ConversationInboxStore"]
