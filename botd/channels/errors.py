"""The errors a channel adapter raises: one family for every platform.

A caller that posts, edits or starts a channel catches ``ChannelError`` without knowing the
platform. Each adapter's own error class derives from these and keeps the platform's own
words in its message (Telegram's description, Slack's error string, Discord's text), which
is what an operator needs to act on. This module imports no SDK.

Each error also says what the caller may do about it, so the delivery layer can retry
without knowing the platform:

* ``retryable``: the failure may pass (a 5xx, a 429, a refused, reset or timed-out
  connection); a refusal of the request itself (a 4xx: bad markup, a chat the bot left) is
  not, and trying again would only be refused again.
* ``retry_after``: seconds the platform asked to wait first (a 429's ``retry_after`` or
  ``Retry-After``), None when it asked nothing.
* ``maybe_delivered``: the request was sent and no answer came (a read timeout, a connection
  lost after sending), so the platform may have carried it out.
"""

from __future__ import annotations

__all__ = ["ChannelError", "ChannelStartError"]


class ChannelError(Exception):
    """A platform refused or failed a call; the message says why in the platform's words."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.maybe_delivered = maybe_delivered


class ChannelStartError(ChannelError):
    """A channel could not start (a rejected token, an unreachable server, refused intents).

    The message is one line, fit for a log line or a startup error: line breaks in the
    platform's text are folded into spaces.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(
            " ".join(message.split()),
            retryable=retryable,
            retry_after=retry_after,
            maybe_delivered=maybe_delivered,
        )
