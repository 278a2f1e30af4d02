"""Slack's Web API as botd calls it: ``FencedWebClient`` (slack_sdk's client, checking a
conversation's lease as each call is made) and ``WebAPI.call`` (429s waited out, every other
failure raised as a ``SlackError`` that says whether trying again may help).

Every call first takes its turn in the bot's budget (``budget``: chat.postMessage paced per
channel, answers before reactions and statuses). The SDK's automatic retries are off (a slow
success must never be posted twice); only a 429, where Slack clearly refused the request, is
retried here after its ``Retry-After``. Other
failures raise ``SlackError`` (``errors``) marked retryable or not; the delivery layer decides
whether to try again.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Awaitable, Callable
from ssl import SSLContext
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.web.file_upload_v2_result import FileUploadV2Result

from ...cluster.fencing import Fence
from ...net.proxy import AiohttpProxy, aiohttp_proxy
from ...retry import retry_after
from ..budget import Budget, Priority
from .budget import take_turn
from .errors import TRANSIENT_ERRORS, SlackError, connection_error

__all__ = ["MAX_RETRY_AFTER", "RATE_LIMIT_ATTEMPTS", "FencedWebClient", "WebAPI"]

log = logging.getLogger(__name__)

RATE_LIMIT_ATTEMPTS = 3
"""How often a call refused with 429 is tried in all."""
MAX_RETRY_AFTER = 60.0


class FencedWebClient(AsyncWebClient):
    """slack_sdk's Web API client; a ``fenced`` view of it checks a conversation's lease as
    each call is made (after the adapter's waits for a 429): a call held up past the lease's
    end is not made."""

    fence: Fence | None = None
    """The lease the calls of this view are made under (None: unfenced)."""
    socks: AiohttpProxy | None = None
    """A SOCKS proxy every call goes through (``through``); an HTTP one is the SDK's ``proxy``."""

    def through(self, proxy: AiohttpProxy) -> None:
        """Send every call through ``proxy`` (all None: direct, whatever the environment
        says: the SDK read ``HTTPS_PROXY`` when it was built, and this undoes it)."""
        self.proxy = proxy.url
        self.socks = proxy if proxy.socks is not None else None

    def fenced(self, fence: Fence | None) -> FencedWebClient:
        """This client for the calls of one send made under ``fence``: a shallow copy (the
        token, the session and the settings are the client's own) that checks it."""
        if fence is None:
            return self
        view = copy.copy(self)
        view.fence = fence
        return view

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        if self.fence is not None:
            self.fence.check_send(time.monotonic())
        if self.socks is None:
            return await super().api_call(api_method, **kwargs)
        # The SDK opens a plain session per call when given none; through SOCKS, a session
        # per call over the proxy's connector, closed with the call as the SDK's would be.
        async with aiohttp.ClientSession(connector=self.socks.connector()) as session:
            view = copy.copy(self)
            view.session = session
            return await AsyncWebClient.api_call(view, api_method, **kwargs)

    async def _upload_file(
        self,
        *,
        url: str,
        data: bytes,
        logger: logging.Logger,
        timeout: int,
        proxy: str | None,
        ssl: SSLContext | None,
    ) -> FileUploadV2Result:
        # files_upload_v2's upload to the URL Slack issued does not go through api_call:
        # through SOCKS, it gets a session over the proxy's connector too.
        if self.socks is None:
            return await super()._upload_file(
                url=url, data=data, logger=logger, timeout=timeout, proxy=proxy, ssl=ssl
            )
        async with aiohttp.ClientSession(connector=self.socks.connector()) as session:
            view = copy.copy(self)
            view.session = session
            return await AsyncWebClient._upload_file(
                view, url=url, data=data, logger=logger, timeout=timeout, proxy=proxy, ssl=ssl
            )


class WebAPI:
    """One Slack app's Web API: its ``client`` and the ``call`` every request goes through,
    paced by ``budget`` (the bot's)."""

    def __init__(
        self, *, bot_token: str, base_url: str, budget: Budget, proxy: str | None = None
    ) -> None:
        """``proxy``: the section's ``proxy:`` (a URL, ``direct``; None: the environment's
        ``HTTPS_PROXY``/``HTTP_PROXY``, as slack_sdk reads them)."""
        self.budget = budget
        # retry_handlers=[]: no SDK retries at all (None would mean the default handlers).
        self.client = FencedWebClient(token=bot_token, base_url=base_url, retry_handlers=[])
        if proxy is not None:
            self.client.through(aiohttp_proxy(proxy, base_url))
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        """How the wait a 429 asks for is waited out."""

    async def call(
        self,
        method: str,
        func: Callable[..., Awaitable[AsyncSlackResponse]],
        /,
        *,
        paced: Priority | None = None,
        **kwargs: Any,
    ) -> AsyncSlackResponse:
        """Call the Web API; retry only a 429 after its Retry-After, raise ``SlackError``.
        ``paced``: the call's class in the bot's budget (None: from the method).

        The error says whether trying again may help: a 5xx, a 429, one of Slack's own
        faults (``TRANSIENT_ERRORS``) or a failed connection may pass; Slack's refusals
        (``channel_not_found``, ``not_in_channel``, ...) will not.
        """
        for attempt in range(1, RATE_LIMIT_ATTEMPTS + 1):
            await take_turn(self.budget, method, kwargs, paced)
            try:
                return await func(**kwargs)
            except SlackApiError as exc:
                response = exc.response
                status = response.status_code
                hint = retry_after(response.headers, cap=MAX_RETRY_AFTER)
                if status == 429 and attempt < RATE_LIMIT_ATTEMPTS:
                    delay = 1.0 if hint is None else hint
                    log.warning("slack %s rate limited; retrying in %.1fs", method, delay)
                    await self.sleep(delay)
                    continue
                error = response.get("error") if isinstance(response.data, dict) else None
                transient = status >= 500 or status == 429 or error in TRANSIENT_ERRORS
                raise SlackError(
                    method,
                    str(error or f"HTTP {status}"),
                    retryable=transient,
                    retry_after=hint if transient else None,
                ) from exc
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise connection_error(method, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover
