"""What a conversation does with a message that arrives while a turn works, and which
waiting messages go into one prompt: the queue mode as a strategy, the album and debounce
windows, and the steering handed to a running agent.

* ``collect`` (the default): messages wait and are merged into one follow-up prompt after
  the run. People often send a thought in several short messages; this answers them together
  instead of once per line.
* ``followup``: each waiting message gets its own run afterwards, in order.
* ``steer``: the message is handed to the running agent, which reads it at the next tool
  boundary; if the run ends before one, it runs next as a follow-up. Answers keep the order
  the messages came in: a message that arrives while an earlier one waits its turn (one with
  files, which never steers) waits behind it, and steering no run read runs before the
  messages that came after it.
* ``interrupt``: the run is cancelled and the new message starts a fresh one.

Files sent together as one post (a Telegram album: one message per file, the caption on one
of them) are answered as one, in every mode: the first of them waits until no further part
has come for ``ALBUM_WINDOW`` seconds, and the parts go into one prompt. With a ``debounce``
(seconds, off by default) the same holds for any burst: a message waits until its
conversation has said nothing more for that long, and messages that came within it of each
other go into one prompt. The windows are measured by a ``Timer`` (the event loop's by
default), which tests replace so that no test sleeps through a window.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..chat import InboundMessage
from ..events import Message
from .settings import QueueMode

ALBUM_WINDOW = 1.0
"""Seconds a message that is part of an album waits after the album's latest part arrived,
for the rest of it (Telegram sends an album's files as separate messages, moments apart)."""

Arrival = Literal["wait", "steer", "interrupt"]
"""What a message arriving while a turn works does: waits its turn, steers the run, or
interrupts it."""


@dataclass(frozen=True, slots=True, eq=False)
class Waiting:
    """A message waiting for its turn, and when it arrived (by the windows' timer)."""

    message: InboundMessage
    arrived: float


class Timer(Protocol):
    """The clock the windows are measured by, and the wait for them."""

    def now(self) -> float: ...

    async def wait(self, seconds: float, wake: asyncio.Event) -> None:
        """Return after ``seconds``, or sooner once ``wake`` is set."""
        ...


class LoopTimer:
    """``time.monotonic`` and the event loop's timeouts."""

    def now(self) -> float:
        return time.monotonic()

    async def wait(self, seconds: float, wake: asyncio.Event) -> None:
        try:
            async with asyncio.timeout(seconds):
                await wake.wait()
        except TimeoutError:
            pass


@dataclass(frozen=True, slots=True)
class Windows:
    """How long a message waits for the rest of its album, or of a burst (``debounce``)."""

    debounce: float = 0.0
    album: float = ALBUM_WINDOW
    timer: Timer = field(default_factory=LoopTimer)

    def one_post(self, last: Waiting, then: Waiting) -> bool:
        """Whether ``then``, waiting after ``last``, goes into the same prompt: the same
        album, or sent within the debounce of it."""
        if same_album(then.message, last.message):
            return True
        return bool(self.debounce) and then.arrived - last.arrived <= self.debounce

    def wait_left(self, head: Waiting, pending: Sequence[Waiting]) -> float:
        """Seconds ``head`` still waits for more (0 or less: none). With a debounce anything
        waiting counts as more; without, the parts of its album."""
        if head.message.album is None and not self.debounce:
            return 0.0
        window = max(self.debounce, self.album if head.message.album is not None else 0.0)
        more = [w for w in pending if self.debounce or same_album(w.message, head.message)]
        latest = max((w.arrived for w in more), default=0.0)
        return latest + window - self.timer.now()


class QueueStrategy:
    """A queue mode: what an arriving message does while a turn works, and which waiting
    messages the next turn takes (the base: one post at a time, as ``followup``)."""

    name: QueueMode = "followup"

    def arriving(self, message: InboundMessage, *, running: bool) -> Arrival:
        """``running``: the turn's agent run has started (not only its preparation)."""
        return "wait"

    def take(
        self, pending: deque[Waiting], resumed: Mapping[int, int], windows: Windows
    ) -> list[Waiting]:
        """The next turn's messages, taken off ``pending`` (its head is not resumed)."""
        batch = [pending.popleft()]
        # An album's parts are one post, and so is a burst within the debounce: answered
        # together in every queue mode.
        while (
            pending
            and windows.one_post(batch[-1], pending[0])
            and resumed_turn(resumed, pending[0]) is None
        ):
            batch.append(pending.popleft())
        return batch


class Followup(QueueStrategy):
    name: QueueMode = "followup"


class Collect(QueueStrategy):
    name: QueueMode = "collect"

    def take(
        self, pending: deque[Waiting], resumed: Mapping[int, int], windows: Windows
    ) -> list[Waiting]:
        batch: list[Waiting] = []
        while pending and resumed_turn(resumed, pending[0]) is None:
            batch.append(pending.popleft())
        return batch


class Steer(QueueStrategy):
    name: QueueMode = "steer"

    def arriving(self, message: InboundMessage, *, running: bool) -> Arrival:
        # Files are read before a run starts: a message with files waits for the next run
        # instead of steering this one; so does one sent while a turn is being prepared.
        return "steer" if running and not message.attachments else "wait"


class Interrupt(QueueStrategy):
    name: QueueMode = "interrupt"

    def arriving(self, message: InboundMessage, *, running: bool) -> Arrival:
        return "interrupt"


STRATEGIES: Mapping[QueueMode, Callable[[], QueueStrategy]] = {
    "collect": Collect,
    "followup": Followup,
    "steer": Steer,
    "interrupt": Interrupt,
}


def strategy(mode: QueueMode) -> QueueStrategy:
    return STRATEGIES[mode]()


class Steering:
    """Steering handed to the running agent, with the entries it answers: what the run did
    not read runs next as a follow-up, in its place among the messages waiting (``first``);
    its entries end with the run that reads them."""

    def __init__(self) -> None:
        self._messages: list[tuple[Message, int | None]] = []
        self._ids: list[int] = []

    def __bool__(self) -> bool:
        return bool(self._messages)

    def add(self, message: Message, inbox_id: int | None) -> None:
        self._messages.append((message, inbox_id))
        if inbox_id is not None:
            self._ids.append(inbox_id)

    def read_by(self, added: Sequence[Message]) -> None:
        """The run is over: what it read (``added`` holds it) is no longer waiting."""
        self._messages = [
            (m, inbox_id) for m, inbox_id in self._messages if not any(m is a for a in added)
        ]

    def first(self) -> int | None:
        """The inbox entry of the earliest steering no run read (None: none, or not kept)."""
        ids = [inbox_id for _, inbox_id in self._messages if inbox_id is not None]
        return min(ids) if ids else None

    def take_messages(self) -> list[Message]:
        """What no run read, to run as a follow-up (taken off)."""
        taken, self._messages = self._messages, []
        return [m for m, _ in taken]

    def take_ids(self) -> list[int]:
        """The entries of the steering handed so far (taken off: they end with the run)."""
        taken, self._ids = self._ids, []
        return taken

    def clear(self) -> None:
        self._messages.clear()


def same_album(message: InboundMessage, other: InboundMessage) -> bool:
    return message.album is not None and message.album == other.album


def steering_goes_first(steering: Steering, pending: Sequence[Waiting]) -> bool:
    """Whether the steering no run read came before the first message waiting (it was
    accepted earlier), so it runs first: answers keep the order their messages came in."""
    first = steering.first()
    if not steering or not pending:
        return bool(steering)
    head = pending[0].message.inbox_id
    return first is not None and head is not None and first < head


def resumed_turn(resumed: Mapping[int, int], waiting: Waiting) -> int | None:
    """The user turn an interrupted run of ``waiting`` goes on from (None: not resumed)."""
    inbox_id = waiting.message.inbox_id
    return None if inbox_id is None else resumed.get(inbox_id)


__all__ = [
    "ALBUM_WINDOW",
    "Arrival",
    "LoopTimer",
    "QueueStrategy",
    "Steering",
    "Timer",
    "Waiting",
    "Windows",
    "resumed_turn",
    "same_album",
    "steering_goes_first",
    "strategy",
]
