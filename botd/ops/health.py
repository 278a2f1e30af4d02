"""The local health endpoint: ``/healthz`` (component states) and ``/metrics`` (Prometheus).

Both are routes on botd's HTTP server (``botd.http``) at ``health.host``/``health.port``,
which may be shared with other routes (Telegram's webhook, when its ``listen`` address is the
same). aiohttp is imported here and there only, and ``botd run`` imports this module only
when it serves the endpoint (``health.enabled``), so nothing else of the core pays for it.
``/metrics`` is ``prometheus_client``'s own handler over the daemon's registry: the text
format 0.0.4, or OpenMetrics when the scraper asks for it. A port another process holds is
``HealthPortInUse``, one line naming ``health.port`` (``botd run`` checks for it beforehand
with ``ports.listen_problem``, and says it in the same words).
"""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from ..http.routes import CannotListen, Route, Routes
from .ports import cannot_listen
from .status import StatusReport

__all__ = ["HealthEndpoint", "HealthPortInUse"]

log = logging.getLogger(__name__)


class HealthPortInUse(OSError):
    """The health endpoint cannot listen where ``health.host``/``health.port`` say."""


class HealthEndpoint:
    """``GET /healthz`` (``report``: ``StatusReport.read``, the same for ``botd status`` and
    the web page) and ``GET /metrics``.

    ``/healthz`` answers 200 when the report's ``status`` is ``ok``, else 503.
    """

    def __init__(self, report: StatusReport) -> None:
        self.report = report
        self._metrics = report.metrics
        self._serve_metrics = make_aiohttp_handler(report.metrics.registry)
        self._routes: list[Route] = []
        self.port: int | None = None
        """The port served on, once serving (the one bound, with port 0)."""

    async def serve(self, http: Routes, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve both routes on ``http`` at ``host``:``port``; returns the port.

        Raises ``HealthPortInUse`` when the port is taken or cannot be listened on."""
        if self._routes:
            raise RuntimeError("the health endpoint is served already")
        try:
            self._routes.append(
                await http.add("GET", "/healthz", self._healthz, host=host, port=port)
            )
            self._routes.append(
                await http.add("GET", "/metrics", self._scrape, host=host, port=port)
            )
        except CannotListen as exc:
            await self.stop()
            raise HealthPortInUse(cannot_listen(f"{exc.where}: {exc.strerror}")) from None
        port = self.port = self._routes[0].port
        log.info("health endpoint on http://%s:%d", host, port)
        return port

    async def stop(self) -> None:
        """Serve the routes no more; safe when not serving."""
        routes, self._routes = self._routes, []
        for route in routes:
            await route.remove()

    async def _scrape(self, request: web.Request) -> web.StreamResponse:
        """``/metrics``: the store's backlog read first (the collector cannot await it)."""
        await self._metrics.read_backlog()
        return await self._serve_metrics(request)

    async def _healthz(self, request: web.Request) -> web.Response:
        body = await self.report.read()
        return web.json_response(body, status=200 if body["status"] == "ok" else 503)
