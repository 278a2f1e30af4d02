"""Fencing: the work of a conversation owned by lease carries its lease, and neither writes
nor sends once the lease may belong to another node.

The lease is part of the conversation's ``RunScope``, which the dispatcher gives the
conversation when this node takes it (``Fence``; None on a node alone, which has nothing to
fence against), and which is passed explicitly from there: to its runs, the store, the
delivery, the tools and each adapter call (no context variable carries it). Two checks read
it:

* the store's: a write made through the conversation's view of the store
  (``store.fenced(fence)``) is written only if the lease row still names this holder and
  epoch, unexpired, checked in the write's own transaction (the PostgreSQL store checks a
  batch's fences in one statement). A write of a lost lease is not made: an awaited one
  raises ``LeaseLost``, a record is dropped. A piece's sent mark is the exception: it is a
  fact about the platform.
* the delivery's (``Fence.check_send``): no send starts when less than the fence's
  ``margin`` of the lease is left by this node's own clock. A send refused so gives the
  lease up (``Lease.lost``): the run stops without posting and its entries stay for the next
  holder. The check is made again inside each platform's SDK, after its own rate limiter,
  with the fence the adapter was given with the send (``channels.base.SendScope``): the
  Telegram adapter's transport checks each buffer of a request as it hands it to the socket
  (so a node frozen mid-request does not finish it when it thaws), discord.py's requests as
  they start, the Slack client each call. A send held up past the lease's end is not
  written. The SDK wraps the ``LeaseLost`` raised inside it in its own error; ``lost_in``
  finds it again.

With no fence (the SQLite backend, the router, the scheduler) nothing is checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .leases import Lease, LeaseLost


@dataclass(frozen=True, eq=False, slots=True)
class Fence:
    """A lease as the work under it sees it: whose it is and how near its end a send may
    still start."""

    lease: Lease
    holder: str
    margin: float
    """Seconds of the lease that must be left for a send to start."""

    @property
    def name(self) -> str:
        return self.lease.name

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def lost(self) -> bool:
        return self.lease.lost.is_set()

    def give_up(self, why: str = "given up by its work") -> None:
        """Give the lease up (``Lease.lost``, for ``why``): the conversation's work stops and
        the next holder resumes it from the store."""
        self.lease.lose(why)

    def check_send(self, now: float) -> None:
        """Raise ``LeaseLost`` (and give the lease up) when a send may not start at ``now``."""
        if self.lease.valid_for(now) >= self.margin:
            return
        self.give_up("too near its end to send")
        raise LeaseLost(
            f"lease {self.name} (epoch {self.epoch}) is too near its end to send: not sent"
        )


@dataclass(frozen=True, slots=True)
class RunScope:
    """What a conversation's work runs under on this node: the conversation, and the fence
    of its lease (None: unfenced, on a node alone or for work of no lease). Passed explicitly
    to its runs, the store, the delivery, the tools and the adapters' sends."""

    conversation: str
    fence: Fence | None = None

    def check_send(self) -> None:
        """Before a send to a platform: ``LeaseLost`` when the fence forbids it now."""
        if self.fence is not None:
            self.fence.check_send(time.monotonic())

    @property
    def abandoned(self) -> bool:
        """The work belongs to a lease this node lost (it ends nothing more)."""
        return self.fence is not None and self.fence.lost


def lost_in(exc: BaseException) -> LeaseLost | None:
    """The ``LeaseLost`` behind ``exc`` (itself, or its cause or context, however deep),
    as a platform SDK wraps what its HTTP client's hook raised."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, LeaseLost):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


__all__ = ["Fence", "LeaseLost", "RunScope", "lost_in"]
