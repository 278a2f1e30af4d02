"""Slack's refusals as botd's channel errors: ``SlackError`` carries Slack's own error
string and whether trying again may help; ``connection_error`` is one for a failure below
HTTP."""

from __future__ import annotations

import aiohttp

from ..errors import ChannelError, ChannelStartError

TRANSIENT_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)
"""Slack's ``ok: false`` errors that say the fault was Slack's and may pass."""


class SlackError(ChannelError):
    """Slack refused a Web API call; ``error`` is Slack's own error string."""

    def __init__(
        self,
        method: str,
        error: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(
            f"slack {method} failed: {error}",
            retryable=retryable,
            retry_after=retry_after,
            maybe_delivered=maybe_delivered,
        )
        self.method = method
        self.error = error


class SlackStartError(SlackError, ChannelStartError):
    """Starting failed: Slack refused the token or the connection, or was not reachable."""


def connection_error(method: str, exc: BaseException) -> SlackError:
    """A failure below HTTP: retryable; maybe carried out unless it never connected."""
    reason = str(exc) or type(exc).__name__
    never_sent = isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError)
    return SlackError(
        method, f"cannot reach Slack: {reason}", retryable=True, maybe_delivered=not never_sent
    )


__all__ = ["TRANSIENT_ERRORS", "SlackError", "SlackStartError", "connection_error"]
