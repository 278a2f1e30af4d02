"""The local health endpoint: ``/healthz`` (component states) and ``/metrics`` (Prometheus).

aiohttp is imported here only, so nothing else of the core pays for it. A port another
process holds is ``HealthPortInUse``, one line naming ``health.port`` (``port_in_use`` checks
for it beforehand).
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable, Mapping

from aiohttp import web

from .logging import mask_secrets
from .metrics import Metrics

__all__ = ["HealthPortInUse", "HealthServer", "port_in_use"]

log = logging.getLogger(__name__)


class HealthPortInUse(OSError):
    """The health endpoint cannot listen where ``health.host``/``health.port`` say."""


def _cannot_listen(host: str, port: int, exc: OSError) -> HealthPortInUse:
    if exc.errno == errno.EADDRINUSE:
        why = "is in use by another process (another botd?)"
    else:
        why = f"cannot be listened on ({exc.strerror or exc})"
    return HealthPortInUse(
        f"health.port {port} on {host} {why}: set another health.port, or health.enabled: false"
    )


def port_in_use(host: str, port: int) -> str | None:
    """Why the health endpoint could not listen on ``host``:``port`` now (one line naming
    ``health.port``), or None when it could. A check before start, not a reservation."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return str(_cannot_listen(host, port, exc))
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
            try:
                probe.bind(address)
            except OSError as exc:
                return str(_cannot_listen(host, port, exc))
    return None


class HealthServer:
    """``GET /healthz`` (channel and component states as JSON) and ``GET /metrics``.

    ``/healthz`` answers 200 with ``status: ok`` when every channel is ``"running"`` and
    every component (the store, say) is healthy, else 503 with ``status: degraded``. The body
    lists each channel's state, each component's (``{"status": "ok"}`` or ``{"status":
    "degraded", "reason": ...}``), and ``problems``: one line per thing that is not well.

    ``components`` maps a component's name to None while it is healthy, else to the reason
    it is not (in its own words, e.g. SQLite's ``database or disk is full``);
    ``channel_problems`` maps a channel that is not running to what its problem line says
    after its name (``down for 42 s (getUpdates failed: …)``; else its state is said).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        channel_states: Callable[[], dict[str, str]],
        metrics: Metrics,
        components: Callable[[], Mapping[str, str | None]] | None = None,
        channel_problems: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self._host = host
        self._port = port
        self._channel_states = channel_states
        self._components = components or dict
        self._channel_problems = channel_problems or dict
        self._metrics = metrics
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/metrics", self._metrics_handler)
        self.port: int | None = None
        """The bound port, once started."""

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with ``port=0``).

        Raises ``HealthPortInUse`` when the port is taken or cannot be listened on."""
        if self._runner is not None:
            raise RuntimeError("health server already started")
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise _cannot_listen(self._host, self._port, exc) from None
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        port = self.port = int(runner.addresses[0][1])
        log.info("health endpoint on http://%s:%d", self._host, port)
        return port

    async def stop(self) -> None:
        """Stop serving; safe to call when not started."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        try:
            channels = dict(self._channel_states())
            components = dict(self._components())
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
        body = {
            "status": "degraded" if problems else "ok",
            "channels": channels,
            "components": {
                name: {"status": "ok"} if why is None else {"status": "degraded", "reason": why}
                for name, why in components.items()
            },
            "problems": problems,
        }
        return web.json_response(body, status=503 if problems else 200)

    async def _metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self._metrics.render().encode(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )
