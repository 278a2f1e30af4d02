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
    """A write failed for a storage reason (disk full, I/O error, read-only, corruption).

    ``reason`` is SQLite's own words, e.g. ``database or disk is full``.
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.reason = reason
        super().__init__(f"{path}: {reason}")


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
        """None while healthy, else the latest failure in SQLite's words (and its kind)."""
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


__all__ = [
    "Clock",
    "StaleCompactionError",
    "StoreError",
    "StoreHealth",
    "StoreOpenError",
    "StoreWriteError",
    "UnknownSessionError",
]
