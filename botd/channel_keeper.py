"""Each channel on its own: one that cannot start, or stops working, leaves the others be.

``ChannelKeeper.start_all`` starts every channel at once and waits for them at most
``START_WAIT`` seconds: a start that hangs (a server that accepts and never answers) goes on in
the background and holds up neither the other channels nor the daemon's readiness.
``ChannelKeeper.start`` starts one channel's adapter. When that fails (a closed port, a refused
token: any exception from ``start``) the channel is marked ``down`` with the reason in one
line, logged in one line (the traceback only with ``--debug``), and tried again after a
backoff delay (``CHANNEL_RETRY_FIRST``, doubling up to ``CHANNEL_RETRY_CAP``, jittered) with
a fresh adapter built from the current config, until it starts; then it is ``running`` again
and its backoff starts over. An adapter that reports a started channel dead
(``report_down``: its connection ended, its token was revoked) is stopped and retried the
same way. ``forget`` ends a channel's retries; ``close`` ends them all at shutdown.

The keeper also holds every adapter's life beyond its first start: it builds them
(``build_all``, with a ``ChannelContext`` whose channel events come back to it), applies a
reload (``reload``: a changed channel is stopped and started again alone under the new
settings, added and removed channels are started and stopped, their retries under the old
settings ended first) and stops them at shutdown (``stop_inbound``, then ``stop_all``). Nobody
else writes its states.

A running channel whose platform cannot be reached is another matter: its SDK reconnects by
itself, so nothing is restarted. Its adapter says so through its ``PlatformLink``
(``reachability``); once that has lasted ``health.down_after`` seconds the channel shows as
``down`` (``view``, ``down``, ``problems``: ``down for 42 s (the last error)``) until the
platform answers again (see ``botd.ops.outages``); the moment it answers again is told on
(``on_reachable``: delivery retries at once the replies that were waiting for it).

The states are ``starting``, ``running``, ``down`` (with ``reasons``) and ``stopped``;
``view`` and ``problems`` are what ``/healthz`` shows of them, ``down`` what ``/status`` says.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Set
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from .channels.base import ChannelAdapter, InboundSink
from .channels.registry import ChannelContext
from .config import BotdConfig
from .ops.outages import Outage, Reachability, span
from .retry import Backoff

__all__ = ["CHANNEL_RETRY_CAP", "CHANNEL_RETRY_FIRST", "START_WAIT", "ChannelHost", "ChannelKeeper"]

log = logging.getLogger(__name__)

CHANNEL_RETRY_FIRST = 2.0
"""Seconds before the first retry of a channel that failed (jitter makes it 1 to 2)."""
CHANNEL_RETRY_CAP = 300.0
"""The longest wait between two retries of a channel that keeps failing."""
START_WAIT = 5.0
"""How long the daemon's start waits for its channels before going on without the slow ones."""


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, or its type's name when it has none."""
    text = " ".join(str(exc).split())
    return text if text else type(exc).__name__


class ChannelHost(Protocol):
    """What the keeper keeps channels in: the live adapters, how one is built, what takes
    their messages and what follows the set of live channels (delivery, access)."""

    adapters: dict[str, ChannelAdapter]
    """The live adapters by channel; the keeper adds and removes entries."""
    sink: InboundSink

    def build_adapter(
        self, name: str, config: BotdConfig, context: ChannelContext
    ) -> ChannelAdapter | None: ...

    def update_channels(self, config: BotdConfig) -> None: ...


class ChannelKeeper:
    """Builds, starts, retries, restarts and stops the channels (see module)."""

    def __init__(
        self,
        host: ChannelHost,
        config: Callable[[], BotdConfig],
        context: ChannelContext,
        *,
        debug: bool = False,
        backoff: Callable[[], Backoff] | None = None,
        on_down: Callable[[str], None] | None = None,
        on_unreachable: Callable[[str], None] | None = None,
        on_reachable: Callable[[str], None] | None = None,
    ) -> None:
        """``on_down`` hears of each time a channel is marked down, ``on_unreachable`` of
        each failed try of a running channel to reach its platform (the metrics count both),
        ``on_reachable`` of each time a channel's platform answers again after failing
        (delivery then retries at once what was waiting out a backoff).
        The adapters are built with ``context``, its channel events pointed at the keeper."""
        self._host = host
        self.context = replace(
            context, on_channel_down=self.report_down, on_reachability=self.reachability
        )
        self._on_down = on_down
        self._on_unreachable = on_unreachable
        self._on_reachable = on_reachable
        self._config = config
        self._debug = debug
        self._new_backoff = backoff or (
            lambda: Backoff(CHANNEL_RETRY_FIRST, factor=2.0, cap=CHANNEL_RETRY_CAP)
        )
        self.states: dict[str, str] = {}
        """Each channel's state: ``starting``, ``running``, ``down`` or ``stopped``."""
        self.reasons: dict[str, str] = {}
        """Why each ``down`` channel is down, in one line."""
        self._backoffs: dict[str, Backoff] = {}
        self._retries: dict[str, asyncio.Task[None]] = {}
        self._starting: dict[str, asyncio.Task[bool]] = {}
        self._links: dict[str, Reachability] = {}
        self._closed = False

    def reachability(self, name: str, error: str | None) -> None:
        """An adapter's word on whether its platform answers (``PlatformLink``): ``error``
        when a try failed, None when one went through."""
        if self._closed:
            return
        link = self._links.get(name)
        if link is None:
            down_after = self._config().health.down_after
            link = self._links[name] = Reachability(f"channel {name}", down_after=down_after)
        if error is None:
            was_failing = link.failing
            link.answered()
            if was_failing and self._on_reachable is not None:
                self._on_reachable(name)
        else:
            link.failed(error)
            if self._on_unreachable is not None:
                self._on_unreachable(name)

    def view(self) -> dict[str, str]:
        """Each channel's state as ``/healthz`` shows it: a running channel whose platform
        has not answered for ``health.down_after`` seconds is ``down``."""
        return {
            name: "down" if state == "running" and self._outage(name) else state
            for name, state in self.states.items()
        }

    def down(self) -> dict[str, str]:
        """The channels that are down, each with why (``/status``)."""
        found: dict[str, str] = {}
        for name, state in self.states.items():
            outage = self._outage(name) if state == "running" else None
            if outage is not None:
                found[name] = f"unreachable for {span(outage.seconds)} ({outage.error})"
            elif state == "down":
                found[name] = self.reasons.get(name, "down")
        return found

    def problems(self) -> dict[str, str]:
        """What ``/healthz`` says after ``channel <name>:`` of each channel that is not
        running: ``down (why)``, ``down for 42 s (the last error)``, ``starting``."""
        found: dict[str, str] = {}
        for name, state in self.states.items():
            outage = self._outage(name) if state == "running" else None
            if outage is not None:
                found[name] = outage.describe()
            elif state == "down" and name in self.reasons:
                found[name] = f"down ({self.reasons[name]})"
            elif state != "running":
                found[name] = state
        return found

    def _outage(self, name: str) -> Outage | None:
        link = self._links.get(name)
        return None if link is None else link.outage()

    def running(self) -> int:
        return sum(1 for state in self.states.values() if state == "running")

    def backoff(self, name: str) -> Backoff:
        """The backoff of ``name``'s retries (reset when it comes up)."""
        found = self._backoffs.get(name)
        if found is None:
            found = self._backoffs[name] = self._new_backoff()
        return found

    def build_all(self, config: BotdConfig) -> None:
        """Build an adapter for every channel ``config`` enables (none started).

        Raises ``ChannelUnavailable`` when a channel is unknown or its SDK is not installed.
        """
        for name in config.channels.enabled():
            adapter = self._host.build_adapter(name, config, self.context)
            if adapter is not None:
                self._host.adapters[name] = adapter
        self._host.update_channels(config)

    async def start_all(self, *, wait: float = START_WAIT) -> None:
        """Start every built channel side by side; return once each has started or failed,
        or after ``wait`` seconds, leaving the slow ones starting in the background."""
        for name, adapter in dict(self._host.adapters).items():
            task = asyncio.create_task(self.start(name, adapter), name=f"channel-start:{name}")
            self._starting[name] = task
            task.add_done_callback(partial(self._started, name))
        pending = list(self._starting.values())
        if not pending:
            return
        _, slow = await asyncio.wait(pending, timeout=wait)
        if slow:
            names = ", ".join(sorted(n for n, t in self._starting.items() if t in slow))
            log.warning("channel(s) %s still starting after %.0fs; going on meanwhile", names, wait)

    def _started(self, name: str, task: asyncio.Task[bool]) -> None:
        if self._starting.get(name) is task:
            del self._starting[name]

    async def start(self, name: str, adapter: ChannelAdapter) -> bool:
        """Start ``adapter`` (already among the host's adapters); True when it runs.

        On failure the channel is down and retried in the background.
        """
        self.states[name] = "starting"
        failure = await self._attempt(name, adapter)
        if failure is None:
            return True
        self._down(name, failure)
        return False

    def report_down(self, name: str, reason: str) -> None:
        """A running channel stopped working for good: stop it and retry it (adapters call
        this through ``ChannelContext.on_channel_down``)."""
        if self._closed or self.states.get(name) != "running" or name in self._retries:
            return
        self._down(name, " ".join(reason.split()) or "stopped working", stale=True)

    async def forget(self, name: str) -> None:
        """End ``name``'s retries and drop its backoff (it is being stopped or rebuilt)."""
        tasks = [t for t in (self._retries.pop(name, None), self._starting.pop(name, None)) if t]
        self._backoffs.pop(name, None)
        self.reasons.pop(name, None)
        self._forget_link(name)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Shutdown: no more retries; the ones waiting or starting (first starts that are
        still going included) are cancelled now."""
        self._closed = True
        tasks: list[asyncio.Task[Any]] = [*self._retries.values(), *self._starting.values()]
        self._retries.clear()
        self._starting.clear()
        for name in list(self._links):
            self._forget_link(name)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def reload(
        self, config: BotdConfig, *, stop: Set[str], restart: Set[str], start: Set[str]
    ) -> None:
        """Apply a reload to ``config``: the ``stop`` and ``restart`` channels are stopped (and
        their retries under the old settings ended), then the ``start`` and ``restart`` ones
        built and started under ``config`` (down and retried when a start fails)."""
        host = self._host
        # Stop first: a restarted channel must not run twice, even for a moment.
        for name in sorted(stop | restart):
            await self.forget(name)
            adapter = host.adapters.pop(name, None)
            if adapter is not None:
                why = "its section changed" if name in restart else "removed from the config"
                log.info("stopping channel %s (%s)", name, why)
                await self._stop(name, adapter)
            if name in stop:
                self.states.pop(name, None)
        host.update_channels(config)
        for name in sorted(start | restart):
            try:
                adapter = host.build_adapter(name, config, self.context)
            except Exception as exc:
                log.error("channel %s cannot be built: %s", name, exc)
                self.states[name] = "down"
                self.reasons[name] = str(exc)
                continue
            if adapter is None:
                continue
            host.adapters[name] = adapter
            host.update_channels(config)
            await self.start(name, adapter)

    async def stop_inbound(self) -> None:
        """Every channel stops taking input (replies can still be sent)."""
        for name, adapter in self._host.adapters.items():
            try:
                await adapter.stop_inbound()
            except Exception:
                log.exception("stopping input of channel %s failed", name)

    async def stop_all(self) -> None:
        """Stop every channel's adapter (shutdown, after ``close`` and ``stop_inbound``)."""
        for name, adapter in self._host.adapters.items():
            await self._stop(name, adapter)

    # -- inside ---------------------------------------------------------------------------

    async def _stop(self, name: str, adapter: ChannelAdapter) -> None:
        try:
            await adapter.stop()
        except Exception:
            log.exception("stopping channel %s failed", name)
        self.states[name] = "stopped"

    async def _attempt(self, name: str, adapter: ChannelAdapter) -> str | None:
        """Start ``adapter``; None when it runs, else why not (logged by the caller)."""
        self._forget_link(name)  # a new connection: what the last one met is over
        try:
            await adapter.start(self._host.sink)
        except Exception as exc:
            if self._debug:
                log.debug("channel %s: start failed", name, exc_info=exc)
            return one_line(exc)
        failures = self.backoff(name).failures
        self.backoff(name).reset()
        self.states[name] = "running"
        self.reasons.pop(name, None)
        if failures:
            log.warning("channel %s is up again after %d failed attempt(s)", name, failures)
        else:
            log.info("channel %s running", name)
        return None

    def _forget_link(self, name: str) -> None:
        link = self._links.pop(name, None)
        if link is not None:
            link.reset()

    def _down(self, name: str, reason: str, *, stale: bool = False) -> None:
        self._forget_link(name)
        self.states[name] = "down"
        self.reasons[name] = reason
        if self._on_down is not None:
            self._on_down(name)
        if self._closed:
            log.error("channel %s down: %s", name, reason)
            return
        backoff = self.backoff(name)
        delay = backoff.next_delay()
        log.error("channel %s down: %s; retry %d in %.1fs", name, reason, backoff.failures, delay)
        self._retries[name] = asyncio.create_task(
            self._retry(name, delay, stale), name=f"channel-retry:{name}"
        )

    async def _retry(self, name: str, delay: float, stale: bool) -> None:
        host = self._host
        if stale:
            dead = host.adapters.get(name)
            if dead is not None:
                try:
                    await dead.stop()
                except Exception as exc:
                    log.warning("channel %s: stopping it failed: %s", name, one_line(exc))
        await asyncio.sleep(delay)
        config = self._config()
        try:
            adapter = host.build_adapter(name, config, self.context)
        except Exception as exc:
            self._retries.pop(name, None)
            self._down(name, one_line(exc))
            return
        if adapter is None:  # no longer configured
            self._retries.pop(name, None)
            return
        host.adapters[name] = adapter
        host.update_channels(config)
        failure = await self._attempt(name, adapter)
        if self._retries.get(name) is asyncio.current_task():
            del self._retries[name]
        if failure is not None:
            self._down(name, failure)
