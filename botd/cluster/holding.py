"""Work that only one node may do at a time, run while this node holds its lease.

A platform allows one connection per bot account for some of its work: one Telegram
``getUpdates`` poller per token, one Discord gateway session per shard. On several nodes that
work is held under a lease (``telegram:<account>``, ``discord:<account>:<shard>``):
``hold_lease`` claims it, runs the work while it holds it, and when the lease is lost (its
renewal failed: the database away, the process paused past the TTL) cancels the work at once
and goes back to standby. A node on standby tries the claim again every third of the TTL, so
the work moves to another node within about the TTL of its holder's death.

Work whose platform cannot be reached from this node (its polls unanswered, its gateway
gone) past a bound of its own ends by raising ``PlatformUnreachable``: the lease is given up
at once (expired, so another node may claim it now), and this node waits a whole TTL before
it claims again, so a node on standby that can reach the platform (it tries every third of
the TTL) takes the work over first. If none can, the work comes back to a node later.

Each change of state is logged once, in one line naming the lease and the role:
``telegram:main poller: standby (held by node-b)``, ``... holding (epoch 4)``; the retries
in between say nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .leases import Lease, LeaseKeeper

__all__ = ["PlatformUnreachable", "hold_lease"]

log = logging.getLogger(__name__)

Work = Callable[[Lease], Awaitable[None]]
"""The work done while holding: runs until cancelled (the lease lost or the holding ended)."""


class PlatformUnreachable(Exception):
    """Raised by held work whose platform this node has not reached for longer than the
    work's bound: the lease is given up so that another node takes the work over."""


class _Said:
    """The last state line logged, so each change is said once."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.last = ""

    def say(self, state: str, *, level: int = logging.INFO) -> None:
        if state != self.last:
            self.last = state
            log.log(level, "%s: %s", self.label, state)


async def _holder(leases: LeaseKeeper, name: str) -> str:
    """Who holds ``name`` now, by its row in the lease table (``?`` when it cannot tell): a
    node on standby asks this at each retry, so it reads that row alone, never the table
    (which has a row per conversation ever answered)."""
    try:
        holder = await leases.table.holder(name)
    except Exception:
        return "?"
    return holder or "?"


async def hold_lease(leases: LeaseKeeper, name: str, role: str, work: Work) -> None:
    """Run ``work`` whenever this node holds the lease ``name``, until cancelled.

    ``role`` names the work in the log lines (``poller``, ``gateway``). On cancellation the
    work is cancelled and the lease released, so another node may claim it at once. Work that
    ends by itself (it failed) gives the lease up too and is tried again at the next claim.
    """
    said = _Said(f"{name} {role}")
    retry = leases.renew_every
    try:
        while True:
            try:
                lease = await leases.try_claim(name)
            except Exception as exc:  # the database is away: nobody can claim meanwhile
                said.say(
                    f"standby (cannot claim: {' '.join(str(exc).split())})", level=logging.WARNING
                )
                await asyncio.sleep(retry)
                continue
            if lease is None:
                if leases.holding(name) is None:
                    said.say(f"standby (held by {await _holder(leases, name)})")
                await asyncio.sleep(retry)
                continue
            said.say(f"holding (epoch {lease.epoch})")
            gave_up = await _while_held(leases, lease, work, said)
            # Given up for an unreachable platform: a whole TTL, so another node claims first.
            await asyncio.sleep(leases.ttl if gave_up else retry)
    finally:
        held = leases.holding(name)
        if held is not None:
            try:
                await leases.release(held)
            except Exception as exc:  # it expires by itself
                log.warning("%s: not released (%s); it expires by itself", said.label, exc)


async def _while_held(leases: LeaseKeeper, lease: Lease, work: Work, said: _Said) -> bool:
    """``work(lease)`` until the lease is lost (then cancelled) or the work ends; True when
    it ended because its platform is unreachable (the lease given up)."""
    running = asyncio.ensure_future(work(lease))
    lost = asyncio.ensure_future(lease.lost.wait())
    try:
        await asyncio.wait({running, lost}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        lost.cancel()
        if not running.done():
            running.cancel()
        await asyncio.wait({running, lost})
    if lease.lost.is_set():
        said.say(f"lost (epoch {lease.epoch}), stopped; standby", level=logging.WARNING)
        return False
    failure = None if running.cancelled() else running.exception()
    if isinstance(failure, PlatformUnreachable):
        said.say(f"giving the lease up: {failure}; standby", level=logging.WARNING)
    else:
        said.say(f"ended ({failure or 'by itself'}); giving the lease up", level=logging.WARNING)
    await leases.release(lease)
    return isinstance(failure, PlatformUnreachable)
