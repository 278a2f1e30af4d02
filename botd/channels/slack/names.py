"""Slack senders' names: the one a message brings along, else ``users.info``, remembered.

A message event carries its sender's profile (``user_profile``) only sometimes, and without a
name the model sees the sender as a bare id (``[id U0123]``) and cannot address people. So
``SenderNames.of`` asks ``users.info`` for a sender whose message brings no name, once per
user for ``NAME_TTL`` seconds (a failure for ``FAILED_TTL``: a workspace of strangers costs
one call per person, not per message, and a passing failure is tried again soon), within
``LOOKUP_TIMEOUT`` seconds (the message waits for it before Slack is acknowledged). A
failure leaves the id alone; a token without the ``users:read`` scope is logged once, with
what to add.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ...bounded import Recent

log = logging.getLogger(__name__)

__all__ = ["FAILED_TTL", "LOOKUP_TIMEOUT", "NAME_TTL", "SenderNames", "profile_name"]

NAME_TTL = 3600.0
FAILED_TTL = 300.0
LOOKUP_TIMEOUT = 2.0
_MEMORY = 4096


def profile_name(profile: Any) -> str:
    """The name to show from a Slack profile object: display name, real name, or name."""
    if not isinstance(profile, Mapping):
        return ""
    for field in ("display_name", "real_name", "name"):
        value = profile.get(field)
        if value:
            return str(value)
    return ""


class SenderNames:
    """See the module docstring."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        timeout: float = LOOKUP_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._clock = clock
        self._known: Recent[str, tuple[str | None, float]] = Recent(_MEMORY)
        """By user id: the name (None: the lookup failed) and when it was looked up."""
        self._told_scope = False

    async def of(self, user: str, brought: str = "") -> str:
        """``user``'s name: ``brought`` (what the message carried) when there is one, else
        the remembered or looked-up one; empty when Slack does not say."""
        if brought or not user:
            return brought
        now = self._clock()
        known = self._known.get(user)
        if known is not None:
            name, when = known
            if now - when < (FAILED_TTL if name is None else NAME_TTL):
                self._known.touch(user)
                return name or ""
        name = await self._look_up(user)
        self._known.remember(user, (name, now))
        return name or ""

    async def _look_up(self, user: str) -> str | None:
        """The user's name ("" when Slack has none); None when the lookup failed."""
        try:
            async with asyncio.timeout(self._timeout):
                response = await self._client.users_info(user=user)
        except SlackApiError as exc:
            error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
            if error == "missing_scope":
                if not self._told_scope:
                    self._told_scope = True
                    log.warning(
                        "slack: users.info refused (missing_scope): senders show as ids; "
                        "add the users:read scope and reinstall the app to show their names"
                    )
            else:
                log.info("slack: no name for %s (users.info: %s)", user, error or exc)
            return None
        except TimeoutError:
            log.info("slack: no name for %s (users.info: no answer in %gs)", user, self._timeout)
            return None
        except (aiohttp.ClientError, OSError) as exc:
            log.info("slack: no name for %s (users.info: %s)", user, exc or type(exc).__name__)
            return None
        found = response.get("user")
        if not isinstance(found, Mapping):
            return ""
        return profile_name(found.get("profile")) or str(found.get("real_name") or "")
