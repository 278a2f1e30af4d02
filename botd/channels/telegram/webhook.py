"""Telegram's webhook: updates POSTed to botd, answered 200 only once botd accepted them.

python-telegram-bot has a webhook server of its own (on tornado), but it answers 200 as soon
as the update is in its queue, before any handler ran: an update botd then failed to accept
(the store down) or died with would be lost, since Telegram forgets what was answered 200.
This handler, a route on botd's own HTTP server (aiohttp, which the fakes, Slack and Discord
already use; tornado would be one more server library for one route) at the ``listen``
address, awaits the handling instead:

* a request without ``X-Telegram-Bot-Api-Secret-Token`` equal to the secret given to
  ``setWebhook`` (compared in constant time) gets 403 and is not read further;
* a body that is not an update gets 400;
* an update is handed on and answered 200 once it was accepted (or ignored, like a message
  type botd does not take), and 503 when it was not: Telegram delivers it again later.

Updates are handled one at a time in the order they arrive (``setWebhook`` asks for one
connection at a time too), as polling hands them on.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

log = logging.getLogger(__name__)

Handle = Callable[[dict[str, Any]], Awaitable[bool]]
"""Takes one update (Telegram's JSON); True once it was accepted or ignored, False when it was
not accepted (Telegram should send it again)."""


class WebhookHandler:
    """Answers Telegram's update POSTs (module docstring): the route the adapter serves at its
    ``listen`` address on botd's HTTP server."""

    def __init__(self, handle: Handle, *, secret: str) -> None:
        self._handle = handle
        self._secret = secret.encode("utf-8")
        self._one_at_a_time = asyncio.Lock()

    async def __call__(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode("utf-8")
        if not hmac.compare_digest(given, self._secret):
            log.warning("telegram webhook: a request without the right secret token (403)")
            return web.Response(status=403, text="forbidden")
        try:
            update = await request.json()
        except ValueError:
            return web.Response(status=400, text="not JSON")
        if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
            return web.Response(status=400, text="not an update")
        async with self._one_at_a_time:
            try:
                accepted = await self._handle(update)
            except Exception:
                log.exception("telegram webhook: handling update %s failed", update["update_id"])
                accepted = False
        if not accepted:
            return web.Response(status=503, text="not accepted; send it again")
        return web.Response(status=200)


__all__ = ["SECRET_HEADER", "Handle", "WebhookHandler"]
