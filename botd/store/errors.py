"""What any store raises, and the record of its failing writes (``StoreHealth``).

Backend-neutral: the SQLite store (``botd.store.sqlite``) raises these, and so would any
other backend, so that callers catch ``StoreError`` whatever sits behind the protocols.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class StoreError(Exception):
    """The store cannot be used (closed, or a database this botd does not understand)."""


class StoreOpenError(StoreError):
    """The database cannot be opened; the message is one line naming the file and the fix."""


class StoreWriteError(StoreError):
    """A write failed for a storage reason (disk full, I/O error, read-only, corruption; a
    database server that cannot be reached).

    ``where`` names the database (the SQLite file, or the server without its password);
    ``reason`` is the database's own words, e.g. ``database or disk is full``.
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class ContentRefused(StoreError):
    """A write the database refused for what it carries, not for its storage: a number out
    of a column's range, a value too long for an index, text the database cannot encode.

    Only that write is undone (the others of its transaction commit) and only its caller
    hears of it; the store stays healthy. Written again as it is, it would be refused again,
    so the caller skips it or answers for it once instead of trying again. ``kind`` names the
    write (the store method); ``reason`` is the database's (or the driver's) own words.
    """

    def __init__(self, where: Path | str, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        super().__init__(f"{where}: {kind} was refused for its content: {reason}")


class StoreHealth:
    """Which kinds of write failed last time they were tried, and why.

    A kind is the store method that wrote (``seen_inbound``, ``append_messages`` ...). The
    store is degraded while a kind's last attempt failed. A commit of a kind that had failed
    shows the fault is over and clears every kind (one that still fails marks it again at
    its next try); a commit of a kind that never failed clears nothing, because a full disk
    can still take a small in-place update (a channel's offset) while every new row fails.
    """

    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._failing: dict[str, tuple[str, float]] = {}  # kind -> reason, since

    @property
    def ok(self) -> bool:
        return not self._failing

    @property
    def reason(self) -> str | None:
        """None while healthy, else the latest failure in the database's words (and its kind)."""
        if not self._failing:
            return None
        kind, (reason, _since) = max(self._failing.items(), key=lambda item: item[1][1])
        others = len(self._failing) - 1
        more = f" (and {others} other kind{'s' if others > 1 else ''})" if others else ""
        return f"{reason} (writing {kind}){more}"

    def failed(self, kind: str, reason: str) -> None:
        if self.ok:
            log.error("store degraded: %s failed to write: %s", kind, reason)
        self._failing[kind] = (reason, self._clock())

    def succeeded(self, kind: str) -> None:
        if kind in self._failing:
            self._failing.clear()
            log.warning("store recovered: %s writes again", kind)


class UnknownSessionError(KeyError):
    """A session id that the store has no record of."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id

    def __str__(self) -> str:
        return f"unknown session {self.session_id!r}"


class StaleCompactionError(StoreError):
    """A compaction computed from a transcript that has since changed in the store."""


class ChatterKept(Exception):
    """An accept asked to go only while its conversation keeps no chatter found some:
    nothing was written (not even the ids); the caller reads the lines and accepts again,
    consuming them. Not a failure of the store."""


__all__ = [
    "ChatterKept",
    "Clock",
    "ContentRefused",
    "StaleCompactionError",
    "StoreError",
    "StoreHealth",
    "StoreOpenError",
    "StoreWriteError",
    "UnknownSessionError",
]
