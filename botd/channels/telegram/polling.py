"""Long polling that confirms to Telegram only what botd accepted: ``PollingBot``.

Telegram forgets an update once a ``getUpdates`` asks for a higher offset. PTB asks for the
next batch as soon as it queued the last one; here each ``getUpdates`` first waits until every
update it would confirm was handled (the sink returned, i.e. the router accepted the message
into the durable inbox) and confirms no further than that, so an update botd had not accepted
when it died is delivered again at the next start. (At shutdown, PTB's last confirming call
waits a bounded time, ``CONFIRM_WAIT_AT_STOP``, and confirms only what was handled.) The
first ``getUpdates`` resumes from the offset the adapter saved.

Under a lease (several nodes) no ``getUpdates`` goes out once the lease is past its deadline,
PTB's last confirming one at a stop included. A 409 Conflict (another poller on the same
token) and a stalled long poll are logged in Telegram's words and retried with capped,
jittered backoff; a token revoked while running is reported through ``on_down``.
``unanswered_for`` says how long Telegram has left the polls unanswered past their own
timeout (the adapter gives the poller lease up past a bound).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from telegram import Update
from telegram.error import Conflict, InvalidToken, TelegramError
from telegram.ext import ExtBot

from ...cluster.leases import Lease
from ...retry import Backoff
from ..base import PlatformLink

__all__ = ["CONFIRM_WAIT_AT_STOP", "PollingBot"]

log = logging.getLogger(__name__)

CONFIRM_WAIT_AT_STOP = 5.0
"""How long PTB's last confirming ``getUpdates`` at shutdown waits for updates in hand."""


class PollingBot(ExtBot[int]):
    """PTB's bot, with the polling policies PTB has no setting for.

    The first ``getUpdates`` resumes from the saved offset. A 409 Conflict (another poller
    on the token) is waited out with jittered backoff and reported as "no updates", instead
    of PTB's retry loop logging a traceback on every attempt. A long poll that Telegram (or
    a proxy) accepts but never answers is abandoned after its timeout plus ``stall_grace``
    and retried the same way, so a stalled connection cannot silence the bot. Every poll
    tells ``link`` whether Telegram answered: a failed one (no connection, a 5xx, a stall, a
    409) that it did not, one that returned that it did.
    """

    def __init__(
        self,
        *args: Any,
        resume_offset: int,
        label: str,
        backoff: Backoff,
        stall_grace: float,
        on_down: Callable[[str], None] | None = None,
        link: PlatformLink | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._on_down = on_down
        self._link = link or PlatformLink()
        self._resume_offset = resume_offset
        self._label = label
        self._backoff = backoff
        self._stall_grace = stall_grace
        # Every update below this id went through the handlers; the first that failed is
        # asked for again (and what follows it: the router drops those as seen).
        self._handled_below = resume_offset
        self._failed_from: int | None = None
        self._progress = asyncio.Event()
        self._lease: Lease | None = None
        self._answered_at = time.monotonic()
        """When Telegram last answered a long poll (a 409 is an answer too)."""
        self._poll_seconds = 0.0
        """The long poll's own timeout: how long a healthy poll may go unanswered."""

    def unanswered_for(self, now: float) -> float:
        """Seconds past a long poll's own timeout that Telegram has not answered one."""
        return max(0.0, now - self._answered_at - self._poll_seconds)

    def poll_under(self, lease: Lease, offset: int) -> None:
        """Poll as the holder of ``lease`` (several nodes), from the stored ``offset``: no
        ``getUpdates`` goes out once the lease is past its deadline, and the offset is saved
        only while it holds."""
        self._lease = lease
        self._answered_at = time.monotonic()
        self._resume_offset = max(self._resume_offset, offset)
        self._handled_below = max(self._handled_below, offset)
        if self._failed_from is not None and self._failed_from < offset:
            self._failed_from = None

    @property
    def holding(self) -> bool:
        """Whether this node may poll and save the offset now (always on a single node)."""
        lease = self._lease
        return lease is None or lease.valid_for(time.monotonic()) > 0

    async def _while_not_holding(self) -> bool:
        """Wait while the lease is past its deadline but not yet renewed or lost; True when
        it is lost (polling is being stopped: Telegram is not asked again)."""
        lease = self._lease
        while lease is not None and not self.holding:
            if lease.lost.is_set():
                return True
            try:
                async with asyncio.timeout(0.2):
                    await lease.lost.wait()
            except TimeoutError:
                pass
        return False

    @property
    def confirmed(self) -> int:
        """The offset Telegram may be told: every update below it was accepted or ignored."""
        return self._handled_below if self._failed_from is None else self._failed_from

    def held_back(self, update_id: int) -> bool:
        """Whether ``update_id`` comes after one that was not accepted: it is asked for
        again with it, so handing it on now would put it before that one."""
        return self._failed_from is not None and update_id > self._failed_from

    def handled(self, update_id: int, *, ok: bool | None = None) -> None:
        """An update went through the handlers; ``ok``: its message was accepted (True) or
        its sink raised (False); None: no message of it went to the sink."""
        self._handled_below = max(self._handled_below, update_id + 1)
        if ok is False:
            first = self._failed_from
            self._failed_from = update_id if first is None else min(first, update_id)
        elif ok and self._failed_from == update_id:
            self._failed_from = None
        self._progress.set()

    async def _until_handled(self, offset: int, limit: float | None) -> None:
        """Wait until every update below ``offset`` was handled (or ``limit`` seconds)."""
        try:
            async with asyncio.timeout(limit):
                while self._handled_below < offset:
                    self._progress.clear()
                    await self._progress.wait()
        except TimeoutError:
            log.warning(
                "%s: updates below %d not handled in time; left with Telegram",
                self._label,
                offset,
            )

    async def get_updates(self, *args: Any, **kwargs: Any) -> tuple[Update, ...]:
        poll = kwargs.get("timeout") or 0
        poll_seconds = poll.total_seconds() if hasattr(poll, "total_seconds") else float(poll)
        wanted = int(kwargs.get("offset") or 0)
        if not self.holding and await self._while_not_holding():
            return ()  # the lease went to another node: it polls now
        if not poll_seconds and self.unanswered_for(time.monotonic()) > 0:
            # PTB's last confirming call, while Telegram leaves the polls unanswered (the
            # poller lease given up for it): it would fail too, with PTB's traceback. The
            # offset handled is saved already; the next poller starts from it.
            return ()
        # Confirm to Telegram only what was handled: the rest is delivered again.
        await self._until_handled(wanted, None if poll_seconds else CONFIRM_WAIT_AT_STOP)
        if self._failed_from is not None and poll_seconds:
            await self._back_off(f"update {self._failed_from} was not accepted; asking again")
        kwargs["offset"] = max(min(wanted, self.confirmed), self._resume_offset)
        if poll_seconds:
            self._poll_seconds = poll_seconds
        try:
            updates = await asyncio.wait_for(
                super().get_updates(*args, **kwargs), poll_seconds + self._stall_grace
            )
        except Conflict as exc:
            if not poll_seconds:
                raise  # PTB's final offset-committing call at shutdown: don't wait
            self._answered_at = time.monotonic()  # Telegram answered: another poller
            self._link.unreachable(f"getUpdates refused: {exc.message}")
            await self._back_off(f"getUpdates refused ({exc.message})")
            return ()
        except TimeoutError:
            stalled = f"getUpdates stalled for {poll_seconds + self._stall_grace:.0f}s"
            self._link.unreachable(stalled)
            await self._back_off(stalled)
            return ()
        except InvalidToken as exc:  # revoked while running: the daemon restarts the channel
            if not poll_seconds or self._on_down is None:
                raise  # (PTB would end polling with a traceback)
            self._on_down(f"getUpdates: the token was rejected ({exc.message})")
            await self._back_off(f"getUpdates refused the token ({exc.message})")
            return ()
        except TelegramError as exc:  # PTB's loop logs it (error_callback) and polls again
            if poll_seconds:
                self._link.unreachable(f"getUpdates failed: {exc.message}")
            raise
        if poll_seconds:
            self._answered_at = time.monotonic()
            self._link.reachable()
        if self._backoff.failures:
            log.info("%s: polling again", self._label)
            self._backoff.reset()
        if updates and not self.holding:
            # The lease ran out while this poll was out (the node paused, say): the updates go
            # unconfirmed, to the next poller. Handed to PTB, whose updater is being stopped,
            # they would be logged as dropped (CRITICAL), which they are not.
            return ()
        return updates

    async def _back_off(self, what: str) -> None:
        delay = self._backoff.next_delay()
        log.warning(
            "%s: %s; retry %d in %.1fs",
            self._label,
            what,
            self._backoff.failures,
            delay,
        )
        await asyncio.sleep(delay)
