"""``Budget``: a bot's platform budget, spent answers first.

A platform limits what one bot may call: Telegram 30 requests a second per token, about 20
messages a minute per group and about one a second per chat. Every call of a bot asks its
``Budget`` for its turn (``take``) before it goes, and goes when the budget says, so the
platform is never asked past its limits (and never answers 429 for it). Each call comes in a
class (``Priority``):

* ``PRESS``: what a person's press of a button waits for: its answer (the spinner stops) and
  the choice shown in place of the buttons, before the reply the press brings;
* ``ANSWER``: what the user waits for: a reply's messages, a final edit, a delete;
* ``PREVIEW``: an answer under way: a preview's edits, a draft;
* ``STATUS``: a run's tool status line (``botd.delivery.status``);
* ``DECORATION``: typing, status reactions.

The bot's rate is one schedule of slots ``spacing`` apart, where an idle rate lets a burst
of ``burst`` go at once (``botd.cluster.budget``), in memory for a node alone, in the store
when several nodes share the bot, so together they stay under it. Limits of one chat (a
``Window``: so many calls in so many seconds, by key) are kept by the node that makes the
calls: a conversation's messages come from the node that holds it.
A call waits for every window it counts against, then for the next slot of the rate; when a
slot comes, it goes to the first call of the highest class that may go, so a decoration never
takes a slot an answer could use, and an answer that came after a decoration still goes
first. A call of a lower class may fill only half a window (at least one), which leaves the
rest to answers: a group's previews never use up the minute an answer needs. A call that
counts in no window of a chat may still ``follow`` it: it waits while a call of a higher
class waits for that chat's window, so a reaction never goes to a chat whose answer is held
back (it would be a call the platform might count against the chat, and it is out of date
by the time the answer goes).

A decoration given ``stale_after`` is dropped (``take`` answers False) when it has waited
that long: typing shown after the answer is noise. Its caller may also cancel it while it
waits (a status reaction replaced by the next one: ``botd.conversation.reactions``): a call
cancelled before its turn never goes and costs nothing.

The margin: a slot reserved is the time the call may start, not the time the platform counts
it (the event loop's lag and the network move it by a little), so the rate's spacing and each
window are ``margin`` wider than the platform's numbers. A slot nobody could use within
``LATE`` seconds is let go.

A 429 is not handled here: it reaches the caller, which backs off as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from ..cluster.budget import LocalRate, SharedRate
from .base import SendScope

__all__ = ["Budget", "Priority", "Window", "paced_as", "waits_for_turn"]

log = logging.getLogger(__name__)

LATE = 0.1
"""Seconds a reserved slot may be used after its time; later, it is let go."""

WINDOWS_KEPT = 1024
"""How many chats' windows are kept before the quiet ones are let go."""

BATCH = 4
"""The most slots reserved at once (when as many calls wait)."""


_waiting_tasks: set[asyncio.Task[Any]] = set()
"""The tasks waiting in a budget for their call's turn (of any budget of this process)."""


def waits_for_turn(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` waits in a budget for its call's turn: cancelled now, it sends
    nothing (a status reaction out of date before it could go)."""
    return task in _waiting_tasks


class Priority(IntEnum):
    """A call's class: lower goes first (see the module docstring)."""

    PRESS = 0
    ANSWER = 1
    PREVIEW = 2
    STATUS = 3
    DECORATION = 4


def paced_as(scope: SendScope | None) -> Priority | None:
    """The class the delivery gave a call with ``scope``: an answer's (``final``), a status
    line's, or None (the adapter's budget takes it from the method)."""
    if scope is None:
        return None
    if scope.final:
        return Priority.ANSWER
    if scope.status_line:
        return Priority.STATUS
    return None


@dataclass(frozen=True, slots=True)
class Window:
    """A platform limit: at most ``count`` calls in any ``seconds``."""

    count: int
    seconds: float


class _Log:
    """When the calls counted by one window went, as far back as the window reaches."""

    def __init__(self, window: Window, margin: float) -> None:
        self.count = window.count
        self.span = window.seconds * (1 + margin)
        self.times: deque[float] = deque()

    def wait(self, now: float, priority: Priority) -> float:
        """Seconds until a call of ``priority`` may count here (0: now). Classes below
        answers may fill half the window."""
        while self.times and self.times[0] <= now - self.span:
            self.times.popleft()
        allowed = self.count if priority <= Priority.ANSWER else max(1, self.count // 2)
        if len(self.times) < allowed:
            return 0.0
        return self.times[len(self.times) - allowed] + self.span - now


@dataclass(order=True)
class _Waiter:
    priority: Priority
    seq: int
    keys: tuple[Hashable, ...] = field(compare=False)
    follows: tuple[Hashable, ...] = field(compare=False)
    deadline: float | None = field(compare=False)
    turn: asyncio.Future[bool] = field(compare=False)


class Budget:
    """One bot's budget (see the module docstring). ``name`` names its rate in ``shared``
    (the platform and the bot's id: never a secret); ``rate`` is the bot's limit."""

    def __init__(
        self,
        name: str,
        rate: Window,
        shared: SharedRate | None = None,
        *,
        margin: float = 0.25,
        burst: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._local = LocalRate(clock)
        self._shared: SharedRate = shared or self._local
        self._spacing = rate.seconds * (1 + margin) / rate.count
        self._tolerance = (burst - 1) * self._spacing
        self._margin = margin
        self._clock = clock
        self._windows: dict[Hashable, _Log] = {}
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        self._slots: deque[float] = deque()
        self._wake = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._shared_down = False
        self.granted: Counter[Priority] = Counter()
        """Calls let go, by class."""
        self.dropped = 0
        """Calls dropped as stale."""

    async def take(
        self,
        priority: Priority,
        windows: Sequence[tuple[Hashable, Window]] = (),
        *,
        follows: Sequence[Hashable] = (),
        stale_after: float | None = None,
    ) -> bool:
        """Wait for this call's turn: True when it may go now, False when it waited
        ``stale_after`` seconds and is dropped. ``windows``: the limits it counts against,
        each by its key (one chat's, one group's); ``follows``: keys of windows it does not
        count against but stays behind (a chat's, for a reaction in it)."""
        for key, window in windows:
            if key not in self._windows:
                self._windows[key] = _Log(window, self._margin)
        deadline = None if stale_after is None else self._clock() + stale_after
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        keys = tuple(k for k, _ in windows)
        waiter = _Waiter(priority, next(self._seq), keys, tuple(follows), deadline, turn)
        self._waiting.append(waiter)
        if self._dispatcher is None:
            self._dispatcher = asyncio.create_task(self._dispatch(), name=f"budget:{self.name}")
        self._wake.set()
        task = asyncio.current_task()
        if task is not None:
            _waiting_tasks.add(task)
        try:
            return await turn
        except asyncio.CancelledError:
            self._wake.set()  # the dispatcher skips it; calls that follow it may go now
            raise
        finally:
            if task is not None:
                _waiting_tasks.discard(task)

    def waiting(self, priority: Priority) -> int:
        """How many calls of ``priority`` wait for their turn now."""
        return sum(1 for w in self._waiting if w.priority == priority and not w.turn.done())

    async def close(self) -> None:
        """Stop handing out turns; calls still waiting go at once (their client is closing)."""
        task, self._dispatcher = self._dispatcher, None
        while task is not None and not task.done():
            task.cancel()  # again, should an await inside it have swallowed the first
            await asyncio.wait({task}, timeout=1.0)
        for waiter in self._waiting:
            if not waiter.turn.done():
                waiter.turn.set_result(True)
        self._waiting.clear()

    # --- the dispatcher -----------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Hand each slot to the first call that may go, for as long as calls come; should
        it fail, every call waiting goes (unpaced, logged) rather than waiting for ever."""
        try:
            await self._hand_out()
        except Exception:
            log.exception("%s: the budget failed; calls waiting go unpaced", self.name)
            self._dispatcher = None
            for waiter in self._waiting:
                if not waiter.turn.done():
                    waiter.turn.set_result(True)
            self._waiting.clear()

    async def _hand_out(self) -> None:
        while True:
            now = self._clock()
            ready, wait = self._ready(now)
            if not ready:
                self._wake.clear()
                await self._pause(wait)
                continue
            while self._slots and self._slots[0] < now - LATE:
                self._slots.popleft()  # nobody could use it in time
            if not self._slots:
                await self._reserve(min(len(ready), BATCH))
                continue
            slot_in = self._slots[0] - now
            if slot_in > 0:
                # Until the slot, a call that comes or a waiting call's deadline (a stale
                # one is dropped then, not when the slot comes); then look again.
                self._wake.clear()
                await self._pause(slot_in if wait is None else min(slot_in, wait))
                continue
            self._slots.popleft()
            self._grant(ready[0], now)

    def _ready(self, now: float) -> tuple[list[_Waiter], float | None]:
        """The calls that may go now, first one first, and the seconds until the soonest
        deadline or window of the others (None: no call waits for a time)."""
        waiting = []
        for waiter in self._waiting:
            if waiter.turn.done():
                continue
            if waiter.deadline is not None and waiter.deadline <= now:
                waiter.turn.set_result(False)
                self.dropped += 1
                continue
            waiting.append(waiter)
        waiting.sort()
        self._waiting = waiting
        if len(self._windows) > WINDOWS_KEPT:
            self._forget_windows(now)
        ready: list[_Waiter] = []
        blocked: set[Hashable] = set()
        soonest: float | None = None
        for waiter in waiting:
            if waiter.deadline is not None:
                soonest = _earlier(soonest, waiter.deadline - now)
            if blocked.intersection(waiter.keys) or blocked.intersection(waiter.follows):
                continue  # a call of a higher class waits for the same window
            wait = max(
                (self._windows[key].wait(now, waiter.priority) for key in waiter.keys),
                default=0.0,
            )
            if wait > 0:
                blocked.update(waiter.keys)
                soonest = _earlier(soonest, wait)
            else:
                ready.append(waiter)
        return ready, soonest

    def _forget_windows(self, now: float) -> None:
        """Let go of the windows no call counts in any more (chats gone quiet)."""
        used = {key for waiter in self._waiting for key in waiter.keys}
        for key, window in list(self._windows.items()):
            if key not in used and (not window.times or window.times[-1] <= now - window.span):
                del self._windows[key]

    async def _pause(self, seconds: float | None) -> None:
        """Until a call comes or ``seconds`` pass (``asyncio.timeout``, not ``wait_for``,
        which on Python 3.11 may swallow a cancellation that comes as the wait ends)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _reserve(self, count: int) -> None:
        """Reserve ``count`` slots of the bot's rate (in memory when the store cannot be
        reached: a node cut off from it goes on by its own clock)."""
        try:
            delay = await self._shared.reserve(self.name, count, self._spacing, self._tolerance)
        except Exception as exc:
            if not self._shared_down:
                log.warning("%s: the shared budget cannot be read, paced alone: %s", self.name, exc)
            self._shared_down = True
            delay = await self._local.reserve(self.name, count, self._spacing, self._tolerance)
        else:
            if self._shared_down:
                log.info("%s: the shared budget is read again", self.name)
            self._shared_down = False
        now = self._clock()
        self._slots.extend(max(now, now + delay + i * self._spacing) for i in range(count))

    def _grant(self, waiter: _Waiter, now: float) -> None:
        for key in waiter.keys:
            self._windows[key].times.append(now)
        self.granted[waiter.priority] += 1
        waiter.turn.set_result(True)


def _earlier(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)
