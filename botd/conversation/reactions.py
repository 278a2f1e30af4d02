"""``StatusReactions``: a message's status shown as the bot's reaction on it.

A message accepted for a run gets the ``taken`` reaction; when its entry ends (``Promise``),
the reaction becomes ``done`` (answered: the answer's last piece is out), ``failed`` (the run
failed and the user was told), or goes away (skipped: ``/stop``, ``/new`` or an interrupt cut
it). Messages answered together (a batch of the queue mode, an album, steering) end
together, so each gets the final reaction. Chat commands get none: their answer is the
status.

What a message shows follows its inbox entry, not this process's memory of it: a takeover
(a restart's, or another node's) hands the unfinished entries to ``taken`` again as it queues
them, once the channels can send, and their end sets the final reaction as it would have.
Setting ``taken`` again is harmless (each platform takes a reaction already there as done).

Reactions are cosmetic and never hold up an answer: each is set in a task of its own, after
the one before it on the same message (so ``done`` never lands before ``taken``), and the
platform's budget lets them go after answers (``botd.channels.budget``). A change that has
not gone yet when the next one comes (it waits for the one before it, or for its turn in the
budget) is out of date and cancelled, having sent nothing: at saturation a ``taken`` that
waited behind answers until the answer was out is never sent, and ``done`` is one call
instead of two. A change whose call is under way is let finish. Nothing is retried: a
platform's refusal (a missing permission or scope, an emoji it does not have) is logged once
per channel and reason, in the platform's words. Which emoji a message gets, if
any, is the ``rules``' call (the live config: ``reactions`` per channel and per group, and
its ``scope``: direct chats, groups, or the messages that mention the bot).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..bounded import Recent
from ..channels.base import ReactionSetter
from ..channels.budget import waits_for_turn
from ..chat import InboundMessage, MessageRef, Target
from ..store import InboxState
from .tasks import TaskOwner

log = logging.getLogger(__name__)

StatusEmoji = tuple[str, str, str]
"""A message's taken, done and failed reactions."""

ReactionRules = Callable[[InboundMessage], StatusEmoji | None]
"""The reactions a message gets (None: none), as the config in force says."""

LOGGED_MEMORY = 256
"""How many (channel, reason) refusals are remembered as logged."""


@dataclass(slots=True)
class _Marked:
    """A message whose status is shown: where, with which emoji, what it shows (as far as
    this process set it), and its latest change."""

    ref: MessageRef
    emoji: StatusEmoji
    shown: str | None = None
    changes: list[asyncio.Task[None]] = field(default_factory=list)
    """Its changes not known to have ended, in order."""
    calling: asyncio.Task[None] | None = None
    """The change whose call to the platform has begun (it may wait for its turn in the
    budget: then it can still be withdrawn)."""


class StatusReactions:
    """See the module docstring. ``adapters`` is the live map of channel -> adapter (the
    channel keeper changes it); an adapter that is no ``ReactionSetter`` shows nothing."""

    def __init__(self, adapters: Mapping[str, object], rules: ReactionRules) -> None:
        self._adapters = adapters
        self._rules = rules
        self._marked: dict[int, _Marked] = {}
        self._tasks = TaskOwner()
        self._logged: Recent[tuple[str, str], None] = Recent(LOGGED_MEMORY)

    def taken(self, message: InboundMessage) -> None:
        """``message`` (an inbox entry) was accepted for a run: show ``taken`` on it."""
        inbox_id = message.inbox_id
        if inbox_id is None or not message.reactable:
            return
        emoji = self._rules(message)
        adapter = self._adapters.get(message.channel)
        if emoji is None or not isinstance(adapter, ReactionSetter):
            return
        target = Target(message.channel, message.chat_id, message.account_id, message.thread_id)
        marked = self._marked.get(inbox_id) or _Marked(
            MessageRef(target, message.message_id), emoji
        )
        self._marked[inbox_id] = marked
        self._change(marked, emoji[0])

    def ended(self, ids: Sequence[int], state: InboxState) -> None:
        """Entries ``ids`` ended in ``state``: ``done`` (answered), ``failed``, or no
        reaction (skipped) in place of ``taken``."""
        for inbox_id in ids:
            marked = self._marked.pop(inbox_id, None)
            if marked is None:
                continue  # not shown (a command, reactions off) or ended already
            _, done, failed = marked.emoji
            self._change(marked, {"answered": done, "failed": failed}.get(state))

    def _change(self, marked: _Marked, emoji: str | None) -> None:
        earlier = [change for change in marked.changes if not change.done()]
        if earlier:
            latest = earlier[-1]
            if latest is not marked.calling or waits_for_turn(latest):
                latest.cancel()  # nothing of it went: this change replaces it
        task = self._tasks.spawn(
            self._set(marked, emoji, earlier), f"reaction:{marked.ref.message_id}"
        )
        marked.changes = [*earlier, task]

    async def _set(
        self, marked: _Marked, emoji: str | None, earlier: list[asyncio.Task[None]]
    ) -> None:
        """Show ``emoji`` (None: nothing) on the message, once its earlier changes are done."""
        if earlier:
            await asyncio.wait(earlier)  # this message's changes in order
        ref = marked.ref
        adapter = self._adapters.get(ref.target.channel)
        if not isinstance(adapter, ReactionSetter):
            return  # the channel went away (a reload)
        marked.calling = asyncio.current_task()
        # After a restart nothing is known to be shown: the taken reaction set again is.
        try:
            await adapter.set_reaction(ref, emoji, replacing=marked.shown)
        except Exception as exc:
            self._refused(ref.target.channel, str(exc) or type(exc).__name__)
        else:
            marked.shown = emoji

    def _refused(self, channel: str, reason: str) -> None:
        """Log a refusal once per channel and reason (the platform says it every time)."""
        if (channel, reason) in self._logged:
            return
        self._logged.remember((channel, reason), None)
        log.warning("%s: a status reaction was not set (not retried): %s", channel, reason)

    async def settle(self) -> None:
        """Wait until every reaction under way is set (or refused)."""
        await self._tasks.settle()

    async def close(self, grace: float) -> None:
        """Let reactions under way finish within ``grace`` seconds, then cancel the rest."""
        running = self._tasks.running()
        if running:
            await asyncio.wait(running, timeout=grace)
        await self._tasks.close()


__all__ = ["ReactionRules", "StatusEmoji", "StatusReactions"]
