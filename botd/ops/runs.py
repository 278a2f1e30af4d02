"""The runs of this process: those in flight and the last ones that ended, for the status
(``/healthz``, ``botd status``, the web page).

``RunLog`` is fed by the sessions' run hooks (``App.run_hooks``): a run starts, uses tokens,
ends with its stop reason (``end_turn``, ``max_tokens``, ``cancelled``, ``exception`` ...).
It is held in memory and bounded (``RECENT_RUNS``): the store keeps each run's tokens
(``run_usage``) but not its stop reason, and the status shows what this process did.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..chat import InboundMessage
from ..store import ModelUsage

__all__ = ["RECENT_RUNS", "RunLog"]

RECENT_RUNS = 20
"""How many ended runs the status lists."""


@dataclass
class _Run:
    conversation: str
    channel: str
    started: float
    tokens: dict[str, int] = field(default_factory=dict)
    ended: float | None = None
    stop_reason: str | None = None

    def view(self, now: float) -> dict[str, Any]:
        end = now if self.ended is None else self.ended
        shown: dict[str, Any] = {
            "conversation": self.conversation,
            "channel": self.channel,
            "started_at": round(self.started, 3),
            "seconds": round(max(0.0, end - self.started), 3),
            "tokens": dict(self.tokens),
        }
        if self.ended is not None:
            shown["stop_reason"] = self.stop_reason
        return shown


class RunLog:
    """Runs in flight, by conversation, and the last ``RECENT_RUNS`` that ended (see the
    module docstring). ``clock`` is wall-clock seconds."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._running: dict[str, _Run] = {}
        self._ended: deque[_Run] = deque(maxlen=RECENT_RUNS)

    def started(self, inbound: InboundMessage) -> None:
        key = inbound.conversation_key
        self._running[key] = _Run(key, inbound.channel, self._clock())

    def used(self, inbound: InboundMessage, usage: ModelUsage) -> None:
        key = inbound.conversation_key
        run = self._running.get(key)
        if run is None:
            # A run's usage is counted with its last transcript write, which may come just
            # after it was told ended: it is that run's, the conversation's latest.
            run = next((ended for ended in self._ended if ended.conversation == key), None)
        if run is None:
            return
        for kind, count in usage.counts().items():
            run.tokens[kind] = run.tokens.get(kind, 0) + count

    def ended(self, inbound: InboundMessage, stop_reason: str) -> None:
        run = self._running.pop(inbound.conversation_key, None)
        if run is None:
            return
        run.ended, run.stop_reason = self._clock(), stop_reason
        self._ended.appendleft(run)

    def view(self) -> dict[str, list[dict[str, Any]]]:
        """``in_flight`` (oldest first) and ``recent`` (the latest first), each run with its
        conversation, channel, start, seconds so far or taken and tokens; an ended run with
        its stop reason."""
        now = self._clock()
        running = sorted(self._running.values(), key=lambda run: run.started)
        return {
            "in_flight": [run.view(now) for run in running],
            "recent": [run.view(now) for run in self._ended],
        }
