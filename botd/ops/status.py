"""What botd's status is, read by one function for ``/healthz``, ``botd status`` (which
asks ``/healthz``) and the web page (``botd.web``): ``StatusReport.read``.

The report lists each channel's state, each component's (``{"status": "ok"}`` or
``{"status": "degraded", "reason": ...}``), and ``problems``: one line per thing that is not
well; ``status`` is ``ok`` when there is none (every channel ``"running"``, every component
healthy), else ``degraded``. ``botd`` says which process answers (``version``, ``pid``,
``node``), ``channel_errors`` each channel's problem, ``stats`` the work in hand
(``runs_in_flight``, ``inbox_backlog``, ``inbox_oldest_unanswered_seconds``,
``outbox_pending``: ``Metrics.stats``), ``runs`` this process's runs in flight and the last
ones that ended (``RunLog.view``), and ``node`` (with a ``node`` callable) the node's id,
backend, database and leases (``botd.ops.node.NodeHealth.view``). Reasons are masked: an
error's own text could quote a configured secret.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .. import __version__
from .logging import mask_secrets
from .metrics import Metrics
from .runs import RunLog

__all__ = ["StatusReport"]

log = logging.getLogger(__name__)


class StatusReport:
    """The status of this botd (see the module docstring).

    ``components`` maps a component's name to None while it is healthy, else to the reason
    it is not (in its own words, e.g. SQLite's ``database or disk is full``);
    ``channel_problems`` maps a channel that is not running to what its problem line says
    after its name (``down for 42 s (getUpdates failed: …)``; else its state is said).
    """

    def __init__(
        self,
        *,
        channel_states: Callable[[], dict[str, str]],
        metrics: Metrics,
        components: Callable[[], Awaitable[Mapping[str, str | None]]] | None = None,
        channel_problems: Callable[[], Mapping[str, str]] | None = None,
        node: Callable[[], Mapping[str, Any]] | None = None,
        runs: RunLog | None = None,
    ) -> None:
        self._channel_states = channel_states
        self._components = components or _no_components
        self._channel_problems = channel_problems or dict
        self._node = node
        self._runs = runs
        self.metrics = metrics

    async def read(self) -> dict[str, Any]:
        """The report; ``{"status": "error", ...}`` when it cannot be read (logged)."""
        try:
            channels = dict(self._channel_states())
            components = dict(await self._components())
            described = dict(self._channel_problems())
        except Exception:
            log.exception("health probe failed")
            return {"status": "error", "channels": {}, "components": {}}
        problems = [
            f"channel {n}: {described.get(n) or state}"
            for n, state in channels.items()
            if state != "running"
        ]
        problems += [f"{name}: {why}" for name, why in components.items() if why is not None]
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
            "botd": {"version": __version__, "pid": os.getpid(), "node": socket.gethostname()},
            "channel_errors": {name: mask_secrets(why) for name, why in described.items()},
            "stats": await self.metrics.stats(),
        }
        if self._runs is not None:
            body["runs"] = self._runs.view()
        if self._node is not None:
            body["node"] = dict(self._node())
        return body


async def _no_components() -> Mapping[str, str | None]:
    return {}
