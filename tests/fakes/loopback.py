"""Serving a fake's aiohttp application on a loopback port."""

from __future__ import annotations

from typing import Any

from aiohttp import web


async def serve(app: web.Application, port: int = 0, **options: Any) -> tuple[web.AppRunner, int]:
    """Start ``app`` on 127.0.0.1 (``port`` 0: a free one); the runner, to clean up, and the
    port it listens on. ``options`` go to ``web.AppRunner`` (``shutdown_timeout`` …)."""
    runner = web.AppRunner(app, **options)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, int(runner.addresses[0][1])
