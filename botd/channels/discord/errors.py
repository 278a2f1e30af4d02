"""Discord's refusals as botd's errors: ``DiscordError`` (a call refused, with Discord's
status and words, marked retryable or not), ``DiscordStartError`` (a start that failed) and
``refusals``, which turns discord.py's exceptions into them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import aiohttp
import discord

from ...retry import retry_after
from ..errors import ChannelError, ChannelStartError

__all__ = ["DiscordError", "DiscordStartError", "refusals"]


class DiscordError(ChannelError):
    """Discord refused a call; the message carries its HTTP status and Discord's own text.

    ``status`` is 0 when no HTTP answer came (the connection failed or timed out).
    """

    def __init__(
        self,
        action: str,
        status: int,
        text: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(
            f"Discord {action}: {status or 'no answer:'} {text}".rstrip(),
            retryable=retryable,
            retry_after=retry_after,
            maybe_delivered=maybe_delivered,
        )
        self.status = status
        self.text = text


class DiscordStartError(ChannelStartError):
    """The adapter could not connect: bad token, refused intents, or no READY in time."""


@contextlib.contextmanager
def refusals(action: str) -> Iterator[None]:
    """Turn discord.py's errors into ``DiscordError`` (no SDK object leaves the adapter).

    discord.py already waits out 429s and retries some 5xx itself; what still comes out as a
    5xx, a 429 (``RateLimited``) or a failed connection may pass and is marked retryable.
    A 4xx is Discord refusing the request (missing permissions, an unknown channel).
    """
    try:
        yield
    except discord.RateLimited as exc:
        hint = retry_after(exc.retry_after)
        raise DiscordError(action, 429, str(exc), retryable=True, retry_after=hint) from exc
    except discord.HTTPException as exc:
        transient = exc.status >= 500 or exc.status == 429
        hint = retry_after(exc.response.headers) if exc.status == 429 else None
        raise DiscordError(
            action, exc.status, exc.text, retryable=transient, retry_after=hint
        ) from exc
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        never_sent = isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError)
        reason = str(exc) or type(exc).__name__
        raise DiscordError(
            action,
            0,
            f"cannot reach Discord: {reason}",
            retryable=True,
            maybe_delivered=not never_sent,
        ) from exc
