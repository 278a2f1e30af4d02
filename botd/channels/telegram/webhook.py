"""Telegram's webhook: updates POSTed to botd, answered 200 only once botd accepted them.

python-telegram-bot has a webhook server of its own (on tornado), but it answers 200 as soon
as the update is in its queue, before any handler ran: an update botd then failed to accept
(the store down) or died with would be lost, since Telegram forgets what was answered 200.
This small aiohttp server (aiohttp is what the fakes, Slack and Discord already use; tornado
would be one more server library for one route) awaits the handling instead:

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


class WebhookServer:
    """Serves ``path`` on ``host``:``port`` for Telegram's update POSTs (module docstring)."""

    def __init__(self, handle: Handle, *, secret: str, host: str, port: int, path: str) -> None:
        self._handle = handle
        self._secret = secret.encode("utf-8")
        self._host = host
        self._port = port
        self._path = path
        self._runner: web.AppRunner | None = None
        self._one_at_a_time = asyncio.Lock()
        self.port: int | None = None
        """The port listened on once started (useful with port 0)."""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(self._path, self._post)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = next(
            (int(address[1]) for address in runner.addresses if isinstance(address, tuple)),
            self._port,
        )

    async def stop(self) -> None:
        """Stop listening; an update being handled is answered first."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _post(self, request: web.Request) -> web.Response:
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


__all__ = ["SECRET_HEADER", "Handle", "WebhookServer"]
