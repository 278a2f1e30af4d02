"""Whether a user is one of a chat's admins, asked of the chat's platform through its
adapter (``channels.base.ChatAdmins``) and remembered for ``ttl`` seconds per channel, chat
and user, so that a busy group costs one lookup per person per while, not one per command.

A lookup that fails (the platform refuses, is unreachable, the adapter is not running or
cannot tell) counts as "not an admin": it is logged and remembered for ``failed_ttl``, a
shorter while, then asked again. It never raises.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from ..bounded import Recent
from ..channels.base import ChannelAdapter, ChatAdmins

log = logging.getLogger(__name__)

ADMINS_TTL = 300.0
"""Seconds an answer is remembered: a new admin counts within five minutes."""
FAILED_TTL = 30.0
"""Seconds a failed lookup counts as "not an admin" before it is tried again."""
REMEMBERED = 4096
"""How many answers are remembered at most (the least recently used go first)."""


class AdminLookups:
    """See the module docstring. ``adapters``: the live adapters by channel."""

    def __init__(
        self,
        adapters: Mapping[str, ChannelAdapter],
        *,
        ttl: float = ADMINS_TTL,
        failed_ttl: float = FAILED_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._adapters = adapters
        self._ttl = ttl
        self._failed_ttl = failed_ttl
        self._clock = clock
        self._known: Recent[tuple[str, str, str], tuple[bool, float]] = Recent(REMEMBERED)
        """By (channel, chat, user): whether an admin (a failure: False), and until when."""

    async def is_admin(self, channel: str, chat_id: str, user_id: str) -> bool:
        """Whether ``user_id`` is an admin of ``chat_id`` on ``channel``'s platform."""
        key = (channel, chat_id, user_id)
        now = self._clock()
        known = self._known.get(key)
        if known is not None and now < known[1]:
            self._known.touch(key)
            return known[0]
        answer, good_for = await self._look_up(channel, chat_id, user_id)
        self._known.remember(key, (answer, now + good_for))
        return answer

    async def _look_up(self, channel: str, chat_id: str, user_id: str) -> tuple[bool, float]:
        adapter = self._adapters.get(channel)
        if not isinstance(adapter, ChatAdmins):
            why = "it is not running" if adapter is None else "its platform cannot tell"
            log.warning(
                "whether %s is an admin of %s on %s is not known (%s): not an owner",
                user_id,
                chat_id,
                channel,
                why,
            )
            return False, self._failed_ttl
        try:
            return await adapter.is_chat_admin(chat_id, user_id), self._ttl
        except Exception as exc:
            log.warning(
                "looking up whether %s is an admin of %s on %s failed (%s): not an owner",
                user_id,
                chat_id,
                channel,
                exc,
            )
            return False, self._failed_ttl


__all__ = ["ADMINS_TTL", "FAILED_TTL", "AdminLookups"]
