"""Showing "typing…" in the chats: no more often than it shows, never over a tool status.

The typing indicator is cosmetic: a failure is logged and never reaches the run. It is sent
at most once per conversation every ``typing_interval`` seconds (the platforms keep it showing
about that long), across runs too, unless a message was sent there since (which clears it on
the platforms: the sender says so, ``message_sent``). While a thread's assistant status shows
which tool runs (``status.py``), "typing…" is not sent there: it would replace that status.

When it is shown is the run's business (``RunOutbox``: only when the run is visibly slow);
this is what each call does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..chat import Target
from .routing import ChannelRoutes, ChatKey, chat_key

log = logging.getLogger(__name__)

_TYPED_KEPT = 1024
"""Past this many remembered typing times, the expired ones are dropped."""


class TypingIndicator:
    """Shows "typing…" per conversation, throttled (see the module docstring)."""

    def __init__(
        self,
        routes: ChannelRoutes,
        *,
        interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._routes = routes
        self._interval = interval
        self._clock = clock
        self._typed_at: dict[ChatKey, float] = {}
        self._held: set[ChatKey] = set()
        """Conversations showing a run's tool status as their assistant status."""

    async def typing(self, target: Target) -> None:
        """Show "typing…" in ``target``'s conversation, unless it shows already."""
        now = self._clock()
        key = chat_key(target)
        if key in self._held:
            return  # the thread's status says which tool runs: "typing…" must not replace it
        last = self._typed_at.get(key)
        if last is not None and now - last < self._interval:
            return  # the last one still shows
        if len(self._typed_at) >= _TYPED_KEPT:
            self._typed_at = {k: t for k, t in self._typed_at.items() if now - t < self._interval}
        self._typed_at[key] = now
        try:
            await self._routes.adapter_for(target).typing(target)
        except Exception as exc:
            log.warning("%s typing in %s failed: %s", target.channel, target.chat_id, exc)

    def message_sent(self, target: Target) -> None:
        """A message goes to ``target``'s conversation: it clears "typing…" there, so a slow
        run after it may show it again."""
        if self._typed_at:
            self._typed_at.pop(chat_key(target), None)

    def hold(self, target: Target, held: bool) -> None:
        """Whether an assistant status shows in ``target``'s thread now (no "typing…")."""
        if held:
            self._held.add(chat_key(target))
        else:
            self._held.discard(chat_key(target))


__all__ = ["TypingIndicator"]
