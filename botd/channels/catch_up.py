"""Catching up: what a chat platform delivered while botd was not listening, read back.

Telegram keeps a bot's updates for a day and hands them over at the next poll; Discord's
gateway does not redeliver what was sent while no session was open (botd stopped, a
connection that could not resume, a shard moving between nodes), and Slack gives up on an
event after a few retries. Both keep the chats' history: after such a gap the adapter reads
it and hands what it missed to the sink exactly as if it had arrived live.

*Where*: the store's catch-up marks (``CatchUpMarks``), one per chat or thread botd accepted
a message of its history in, or kept one as context (a group where it only listens is read
too: what was said there is context for its next answer). Each mark names the newest such
message, moved in the transaction that took it; ``max_chats`` marks are read per catch-up,
the most recently active first.

*What*: each chat's messages after its mark, oldest first, within ``max_age`` seconds of
now; older ones are counted (up to ``SKIP_COUNTED`` per chat) and logged, not taken. The
platform's reader (``History``) decides what counts (not the bot's own, not another bot's
unless allowed: as the live path would) and bounds its pages. A message taken both live and
from the history is accepted once: the router's dedupe ledger knows its ids either way.

*In order*: live messages of a chat wait at the gate (``before_live``) while its catch-up
is due or under way, so what was missed is accepted before what comes after it. The gate
closes when the connection is made (``close_gate``), before a message can arrive, and opens
for each chat once its history was taken (or could not be read), for all of them when the
connection resumed without a gap (``open_gate``) or when catching up is off.

A chat whose history cannot be read (a permission, a channel gone) is logged and left; a
message the sink refuses (the store failing) ends the catch-up, to be tried at the next
connection. Reads go through the platform SDK's own rate-limit handling.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ..config.schema import CatchUpSection
from ..ops.outages import span
from ..store.protocols import CatchUpMarks
from ..store.records import ChatMark

__all__ = ["SKIP_COUNTED", "CatchUp", "CatchUpSettings", "History", "Missed"]

log = logging.getLogger(__name__)

SKIP_COUNTED = 500
"""How many messages older than ``max_age`` one chat's reader counts before it goes on from
the age limit (the log then says "at least")."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CatchUpSettings:
    """A channel's ``catch_up`` section, as the adapters take it."""

    max_age: float = 3600.0
    max_chats: int = 100

    @classmethod
    def of(cls, section: CatchUpSection) -> CatchUpSettings:
        return cls(section.max_age, section.max_chats)


@dataclass(frozen=True, slots=True)
class Missed(Generic[T]):
    """One chat's messages after its mark: those to take, oldest first, and how many were
    older than the age limit (``more_skipped``: more than counted)."""

    messages: Sequence[T] = ()
    skipped: int = 0
    more_skipped: bool = False


class History(Protocol[T]):
    """A platform's reader of the chats one connection serves."""

    async def read(self, mark: ChatMark, cutoff: float) -> Missed[T] | None:
        """The messages after ``mark`` in its chat, those before ``cutoff`` (wall-clock
        seconds) only counted; None when the chat is not this connection's (another
        shard's). Raises the platform's error when the history cannot be read."""
        ...

    async def take(self, message: T) -> None:
        """Hand ``message`` on as the live path does (returns once it was taken)."""
        ...


@dataclass(slots=True)
class _Tally:
    taken: int = 0
    skipped: int = 0
    more_skipped: bool = False
    chats: int = 0
    unreadable: list[str] = field(default_factory=list)


class CatchUp:
    """One connection's catch-ups and the gate its live messages pass (see the module
    docstring). ``label`` starts its log lines (``discord[default]``)."""

    def __init__(
        self,
        label: str,
        settings: CatchUpSettings,
        marks: CatchUpMarks | None,
        *,
        channel: str,
        account: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._label = label
        self.settings = settings
        self._marks = marks
        self._channel = channel
        self._account = account
        self._clock = clock
        self._loading: asyncio.Event | None = None
        """Set once the marks are read (None: the gate is open)."""
        self._pending: dict[str, asyncio.Event] = {}
        """The chats whose catch-up is due or under way, by where their history is."""
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self._marks is not None and self.settings.max_age > 0

    def close_gate(self) -> None:
        """From now on live messages wait for the next catch-up to read its marks (called
        as a connection is made, before it can deliver anything)."""
        if self.enabled and self._loading is None:
            self._loading = asyncio.Event()

    def open_gate(self) -> None:
        """Let every live message through (the connection resumed: nothing was missed)."""
        loading, self._loading = self._loading, None
        if loading is not None:
            loading.set()

    async def before_live(self, where: str) -> None:
        """Return once a live message of the history ``where`` may be handed on."""
        loading = self._loading
        if loading is not None:
            await loading.wait()
        pending = self._pending.get(where)
        if pending is not None:
            await pending.wait()

    def start(self, history: History[T]) -> None:
        """Catch up in the background with ``history`` (a catch-up still running is
        replaced: the new one reads from the marks as they are now)."""
        if not self.enabled:
            self.open_gate()
            return
        self.close_gate()
        previous, self._task = self._task, None
        if previous is not None:
            previous.cancel()
        self._task = asyncio.create_task(self._run(history, previous), name="catch-up")

    async def stop(self) -> None:
        """End a catch-up under way and open the gate."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._release_all()

    async def _run(self, history: History[T], previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        try:
            await self._catch_up(history)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: catching up failed", self._label)
        finally:
            if asyncio.current_task() is self._task:
                self._release_all()

    async def _catch_up(self, history: History[T]) -> None:
        assert self._marks is not None
        limit = self.settings.max_chats
        try:
            marks = await self._marks.chat_marks(self._channel, self._account, limit=limit + 1)
        except Exception as exc:
            log.warning("%s: not catching up: the store cannot be read (%s)", self._label, exc)
            return
        left_out = len(marks) > limit
        marks = marks[:limit]
        for mark in marks:
            self._pending.setdefault(mark.where, asyncio.Event())
        loading, self._loading = self._loading, None
        if loading is not None:
            loading.set()
        cutoff = self._clock() - self.settings.max_age
        tally = _Tally()
        for mark in marks:
            try:
                await self._chat(history, mark, cutoff, tally)
            finally:
                self._release(mark.where)
        self._report(tally, len(marks), left_out)

    async def _chat(
        self, history: History[T], mark: ChatMark, cutoff: float, tally: _Tally
    ) -> None:
        try:
            missed = await history.read(mark, cutoff)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            tally.unreadable.append(mark.where)
            log.warning(
                "%s: the history of %s cannot be read to catch up: %s",
                self._label,
                mark.where,
                " ".join(str(exc).split()) or type(exc).__name__,
            )
            return
        if missed is None:
            return
        tally.chats += 1
        tally.skipped += missed.skipped
        tally.more_skipped |= missed.more_skipped
        for message in missed.messages:
            await history.take(message)  # a refusal (the store failing) ends the catch-up
            tally.taken += 1

    def _report(self, tally: _Tally, marked: int, left_out: bool) -> None:
        skipped = f"{'at least ' if tally.more_skipped else ''}{tally.skipped}"
        line = (
            f"{self._label}: caught up on {tally.chats} chat(s): {tally.taken} missed "
            f"message(s) taken, {skipped} older than {span(self.settings.max_age)} skipped"
        )
        if left_out:
            line += f" (only the {marked} most recently active chats read: catch_up.max_chats)"
        if tally.unreadable:
            line += f"; {len(tally.unreadable)} chat(s) could not be read"
        level = logging.INFO if tally.taken or tally.skipped or left_out else logging.DEBUG
        log.log(level, "%s", line)

    def _release(self, where: str) -> None:
        pending = self._pending.pop(where, None)
        if pending is not None:
            pending.set()

    def _release_all(self) -> None:
        self.open_gate()
        for where in list(self._pending):
            self._release(where)
