"""The errors a channel adapter raises: one family for every platform.

A caller that posts, edits or starts a channel catches ``ChannelError`` without knowing the
platform. Each adapter's own error class derives from these and keeps the platform's own
words in its message (Telegram's description, Slack's error string, Discord's text), which
is what an operator needs to act on. This module imports no SDK.
"""

from __future__ import annotations

__all__ = ["ChannelError", "ChannelStartError"]


class ChannelError(Exception):
    """A platform refused or failed a call; the message says why in the platform's words."""


class ChannelStartError(ChannelError):
    """A channel could not start (a rejected token, an unreachable server, refused intents).

    The message is one line, fit for a log line or a startup error: line breaks in the
    platform's text are folded into spaces.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))
