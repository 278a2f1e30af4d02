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
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from .. import __version__
from ..http.routes import CannotListen, Route, Routes
from .logging import mask_secrets
from .metrics import Metrics
from .ports import cannot_listen

__all__ = ["HealthEndpoint", "HealthPortInUse"]

log = logging.getLogger(__name__)


class HealthPortInUse(OSError):
    """The health endpoint cannot listen where ``health.host``/``health.port`` say."""


class HealthEndpoint:
    """``GET /healthz`` (channel and component states as JSON) and ``GET /metrics``.

    ``/healthz`` answers 200 with ``status: ok`` when every channel is ``"running"`` and
    every component (the store, say) is healthy, else 503 with ``status: degraded``. The body
    lists each channel's state, each component's (``{"status": "ok"}`` or ``{"status":
    "degraded", "reason": ...}``), and ``problems``: one line per thing that is not well.

    ``components`` maps a component's name to None while it is healthy, else to the reason
    it is not (in its own words, e.g. SQLite's ``database or disk is full``);
    ``channel_problems`` maps a channel that is not running to what its problem line says
    after its name (``down for 42 s (getUpdates failed: …)``; else its state is said).
    ``node`` gives the ``node`` object of the body (``botd.ops.node.NodeHealth.view``: the
    node's id, backend, database and leases), read after ``components``.

    For ``botd status`` the body also has ``botd`` (``version``, ``pid``, ``node``: which
    process answers), ``channel_errors`` (each channel's problem, as in ``channel_problems``)
    and ``stats`` (``runs_in_flight``, ``inbox_backlog``, ``inbox_oldest_unanswered_seconds``,
    ``outbox_pending``: ``Metrics.stats``).
    """

    def __init__(
        self,
        *,
        channel_states: Callable[[], dict[str, str]],
        metrics: Metrics,
        components: Callable[[], Awaitable[Mapping[str, str | None]]] | None = None,
        channel_problems: Callable[[], Mapping[str, str]] | None = None,
        node: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self._channel_states = channel_states
        self._components = components or _no_components
        self._channel_problems = channel_problems or dict
        self._node = node
        self._metrics = metrics
        self._serve_metrics = make_aiohttp_handler(metrics.registry)
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
        try:
            channels = dict(self._channel_states())
            components = dict(await self._components())
            described = dict(self._channel_problems())
        except Exception:
            log.exception("health probe failed")
            return web.json_response(
                {"status": "error", "channels": {}, "components": {}}, status=503
            )
        problems = [
            f"channel {n}: {described.get(n) or state}"
            for n, state in channels.items()
            if state != "running"
        ]
        problems += [f"{name}: {why}" for name, why in components.items() if why is not None]
        # A reason is an error's own text, which could quote a configured secret.
        problems = [mask_secrets(problem) for problem in problems]
        components = {
            name: None if why is None else mask_secrets(why) for name, why in components.items()
        }
        body: dict[str, Any] = {
            "status": "degraded" if problems else "ok",
            "channels": channels,
            "components": {
                name: {"status": "ok"} if why is None else {"status": "degraded", "reason": why}
                for name, why in components.items()
            },
            "problems": problems,
        }
        body.update(await self._about(described))
        if self._node is not None:
            body["node"] = dict(self._node())
        return web.json_response(body, status=503 if problems else 200)

    async def _about(self, reasons: Mapping[str, str]) -> dict[str, Any]:
        """What ``botd status`` shows besides the states: which process answers, each down
        channel's error and the work in hand."""
        return {
            "botd": {"version": __version__, "pid": os.getpid(), "node": socket.gethostname()},
            "channel_errors": {name: mask_secrets(why) for name, why in reasons.items()},
            "stats": await self._metrics.stats(),
        }


async def _no_components() -> Mapping[str, str | None]:
    return {}
