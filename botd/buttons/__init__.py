"""Buttons under the bot's messages, and what happens when one is pressed.

The agent offers choices with the ``[[buttons: ...]]`` reply directive or the message tool's
``buttons`` field (``botd.buttons.layout`` checks and shapes them); each platform renders
them (an inline keyboard, Block Kit ``actions``, Discord components). A press comes back
through the router like a message from the presser, ``(pressed: <label>)``, unless its value
starts with a prefix another part of botd registered in ``PressHandlers`` (the approvals
use ``approval:``): then that handler takes it and says what the presser is told.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ..chat import InboundMessage

log = logging.getLogger(__name__)

PressHandler = Callable[[InboundMessage], Awaitable[str | None]]
"""Takes the presser's message (``message.press`` set) and returns the short answer shown to
the presser (Telegram's callback answer, a Discord ephemeral reply; None: nothing shown)."""


class PressHandlers:
    """Who takes presses whose value starts with a registered prefix, instead of the
    conversation."""

    def __init__(self) -> None:
        self._handlers: dict[str, PressHandler] = {}

    def register(self, prefix: str, handler: PressHandler) -> None:
        """Send presses of values starting with ``prefix`` (e.g. ``approval:``) to ``handler``
        from now on; a prefix registered again gets the new handler."""
        if not prefix:
            raise ValueError("a press handler needs a non-empty prefix")
        self._handlers[prefix] = handler

    def unregister(self, prefix: str) -> None:
        self._handlers.pop(prefix, None)

    def handler_for(self, value: str) -> PressHandler | None:
        """The handler of ``value``'s prefix (the longest registered one that matches);
        None: the press goes into the conversation."""
        best: str | None = None
        for prefix in self._handlers:
            if value.startswith(prefix) and (best is None or len(prefix) > len(best)):
                best = prefix
        return None if best is None else self._handlers[best]


__all__ = ["PressHandler", "PressHandlers"]
