"""Long texts Telegram's apps split: one paste sent as several messages.

A Telegram message holds at most 4096 characters, and the apps send a longer text as
several messages, one right after another. Answered as they come, the first part would get
an answer of its own (to half a log, half a question) and the rest another. ``SplitPastes``
marks such parts as one post: a text of ``LONG_TEXT`` characters or more opens a paste for
its chat and sender, and their next message sent within ``WINDOW`` seconds of it belongs to
it (and keeps it open if it is long too). The adapter gives the parts the paste's id as
their album, so the sessions answer them together, as they do a photo album.

Times are when Telegram says each message was sent (whole seconds), not when botd reads
it: a backlog read at once after a restart is not one paste for being read together.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

LONG_TEXT = 4000
"""A text this long may have been cut by the app (the limit is 4096, cut at a word)."""

WINDOW = 2.0
"""Seconds between two parts' send times (Telegram gives whole seconds)."""

_KEPT = 60.0
"""Seconds (botd's clock) an open paste is remembered: its next part comes long before."""

_MEMORY = 10_000
"""Open pastes remembered at most (one per chat and sender)."""


class SplitPastes:
    """See the module docstring."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._open: OrderedDict[tuple[str, str], tuple[str, float, float]] = OrderedDict()
        """(chat, sender) -> (paste id, its latest part's send time, when botd read it),
        the least recently read first."""

    def paste_of(
        self, chat_id: str, sender_id: str, message_id: str, text: str, sent_at: float
    ) -> str | None:
        """The paste this message is a part of (an id for its album), or None."""
        now = self._clock()
        while self._open and (
            len(self._open) > _MEMORY or now - next(iter(self._open.values()))[2] > _KEPT
        ):
            self._open.popitem(last=False)
        key = (chat_id, sender_id)
        found = self._open.pop(key, None)
        paste = None
        if found is not None and 0 <= sent_at - found[1] <= WINDOW:
            paste = found[0]
        if len(text) >= LONG_TEXT:
            paste = paste or f"paste:{chat_id}:{message_id}"
            self._open[key] = (paste, sent_at, now)  # the next part may follow
        return paste


__all__ = ["LONG_TEXT", "WINDOW", "SplitPastes"]
