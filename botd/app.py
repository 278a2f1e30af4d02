"""``botd run``: every configured channel, the sessions and the scheduler in one process.

Start order: logging, the state directory's lock (``botd.ops.statelock``: a second daemon on the
same directory is refused), whether the health port is free (``check_health_port``), the first
INFO line (``start_line``: botd's version, the config file, the state dir and the channels),
the runtime (``botd.wiring.build_runtime``: store, provider,
adapters' delivery side, sessions, scheduler, router), what the last process left unanswered
queued again (``SessionManager.resume``: before any channel takes input, so it goes first in
each conversation), the daily pruning of old inbound ids, the scheduler's jobs, the MCP
servers (``McpManager``, in the background: one that fails is down in ``/healthz`` and
retried with backoff, its tools left out of runs meanwhile), the adapters'
inbound side (``ChannelKeeper``: a channel that fails to start, or later stops working, is
down in ``/healthz`` and ``/status`` and retried with backoff while the others run), then
the resumed runs let go (``release``: the channels can send now), the health endpoint, and
READY=1 to systemd. SIGTERM or SIGINT (or the console's end of input) shuts down in bounded
order: end the channels' retries, stop taking input, let running turns finish within the
grace period (``shutdown_grace``) and cancel the rest (a cancelled run posts nothing more and
is left unanswered in the inbox: the next start resumes it), stop the MCP servers (a stdio
server's process is waited for), flush deliveries, close the adapters, the scheduler and
the store, STOPPING=1, exit 0.

SIGHUP re-reads the config file (``RELOADING=1`` ... ``READY=1`` to systemd). An invalid file
is refused with every problem logged, and the running config is kept. Otherwise
``plan_reload`` decides: a channel whose section changed is stopped and started again alone,
added and removed channels are started and stopped, the scheduler's configured jobs are
re-synced, the router takes the new access policies, and a new ``shutdown_grace`` applies to
the next stop; unchanged channels are untouched. Settings that only apply at start (model,
agent, state_dir, health) are logged as such: ``agent.mcp_servers`` among them, since its
servers run from start to stop. A group's ``tools`` list is part of its channel's section
and applies with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from . import __version__
from .channel_keeper import START_WAIT, ChannelKeeper
from .channels.base import ChannelAdapter
from .chat import InboundMessage
from .config import BotdConfig, ConfigError, load_config, secret_values
from .ops.health import HealthServer, cannot_listen
from .ops.logging import add_secrets, asyncio_exception_handler, configure_logging
from .ops.metrics import Backlog, Metrics
from .ops.outages import stuck_inbox
from .ops.ports import listen_problem
from .ops.statelock import StateLock
from .ops.systemd import SystemdNotifier
from .sessions import RunHooks
from .store import ModelUsage, Store
from .wiring import Runtime, build_runtime, scheduler_jobs

log = logging.getLogger(__name__)

GC_YOUNG_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation (CPython's default is 700).

Every message allocates thousands of short-lived objects, almost all freed by reference
counting; at the default the cycle collector runs every few hundred of them and costs about
a tenth of the daemon's time under load. What a longer interval keeps alive is bounded by it.
"""


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """The collector as the daemon runs it once started: what start-up allocated (modules,
    SDK clients, the config) frozen out of every collection, and a longer young interval.
    Restored on exit."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


MCP_START_WAIT = START_WAIT
"""How long start-up waits for the MCP servers once the channels started (or went on)."""

RESTART_ONLY = ("state_dir", "model", "agent", "health")
"""Top-level sections read only at start: a change is logged and waits for a restart."""
LIVE_KEYS = {"agent": {"message_targets"}}
"""Keys of those sections read when used (the message tool's targets): a reload applies them."""


def start_line(config: BotdConfig, config_path: Path | None) -> str:
    """The line botd logs first: its version, the config file, the state dir, the channels."""
    source = os.path.abspath(config_path) if config_path is not None else "(embedded default)"
    channels = ", ".join(config.channels.enabled()) or "none"
    state = os.path.abspath(config.state_dir)
    return f"botd {__version__} starting: config {source}, state {state}, channels {channels}"


def channel_sections(config: BotdConfig) -> dict[str, dict[str, Any]]:
    """Each enabled channel's section as plain data (what a reload compares)."""
    sections = config.channels.sections()
    return {name: sections[name].model_dump(mode="json") for name in config.channels.enabled()}


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """What a reload from one valid config to another has to do."""

    restart: frozenset[str] = frozenset()
    """Channels configured before and after whose section changed."""
    start: frozenset[str] = frozenset()
    stop: frozenset[str] = frozenset()
    jobs_changed: bool = False
    logging_changed: bool = False
    grace_changed: bool = False
    targets_changed: bool = False
    """``agent.message_targets`` changed (read live by the message tool)."""
    restart_only: tuple[str, ...] = ()
    """Changed top-level sections that take effect only when botd restarts."""
    unchanged: frozenset[str] = field(default_factory=frozenset)

    @property
    def empty(self) -> bool:
        return not (
            self.restart
            or self.start
            or self.stop
            or self.jobs_changed
            or self.logging_changed
            or self.grace_changed
            or self.targets_changed
            or self.restart_only
        )

    def describe(self) -> str:
        parts = [
            f"{what} {', '.join(sorted(names))}"
            for what, names in (
                ("restarting", self.restart),
                ("starting", self.start),
                ("stopping", self.stop),
            )
            if names
        ]
        if self.jobs_changed:
            parts.append("re-syncing scheduled jobs")
        if self.logging_changed:
            parts.append("new logging settings")
        if self.grace_changed:
            parts.append("new shutdown grace")
        if self.targets_changed:
            parts.append("new message targets")
        if self.restart_only:
            parts.append(f"changed {', '.join(self.restart_only)} (applies after a restart)")
        return "; ".join(parts) or "nothing changed"


def plan_reload(old: BotdConfig, new: BotdConfig) -> ReloadPlan:
    """Compare two valid configs section by section (see ``ReloadPlan``)."""
    before, after = channel_sections(old), channel_sections(new)
    both = before.keys() & after.keys()
    restart_only = tuple(
        key for key in RESTART_ONLY if _restart_view(old, key) != _restart_view(new, key)
    )
    return ReloadPlan(
        restart=frozenset(n for n in both if before[n] != after[n]),
        start=frozenset(after.keys() - before.keys()),
        stop=frozenset(before.keys() - after.keys()),
        jobs_changed=_dump(old.scheduler) != _dump(new.scheduler),
        logging_changed=_dump(old.logging) != _dump(new.logging),
        grace_changed=old.shutdown_grace != new.shutdown_grace,
        targets_changed=old.agent.message_targets != new.agent.message_targets,
        restart_only=restart_only,
        unchanged=frozenset(n for n in both if before[n] == after[n]),
    )


def _restart_view(config: BotdConfig, key: str) -> Any:
    """Section ``key`` without the keys a reload applies live."""
    value = getattr(config, key)
    if not hasattr(value, "model_dump"):
        return value
    return value.model_dump(mode="json", exclude=LIVE_KEYS.get(key))


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


class HealthPortUnavailable(RuntimeError):
    """``health.port`` cannot be listened on; the message names the key and the address."""


def check_health_port(config: BotdConfig) -> None:
    """Raise ``HealthPortUnavailable`` when health is enabled and its address is taken.

    Asked before any channel connects, so a port in use stops botd at start (exit 2, one
    line naming ``health.port``) instead of after every channel came up.
    """
    health = config.health
    if not health.enabled:
        return
    problem = listen_problem(health.host, health.port)
    if problem is not None:
        raise HealthPortUnavailable(cannot_listen(problem))


class Daemon:
    """One running botd (see the module docstring)."""

    def __init__(
        self,
        config: BotdConfig,
        env: Mapping[str, str] | None = None,
        *,
        config_path: Path | None = None,
        debug: bool = False,
    ) -> None:
        self.config = config
        self.debug = debug
        """Log at DEBUG whatever ``logging.level`` says (``botd --debug``)."""
        self.config_path = config_path
        self._env = dict(os.environ if env is None else env)
        self._stop = asyncio.Event()
        self._console_done = asyncio.Event()
        self._reload_requested = asyncio.Event()
        self.metrics = Metrics()
        self.channels: ChannelKeeper | None = None
        """Starts the channels and retries the ones that fail, once the runtime is built."""
        self.runtime: Runtime | None = None
        """The running parts, once built (for tests and introspection)."""
        self.health: HealthServer | None = None
        self.started = False
        """Whether start-up finished (READY=1): a failure after it is no start-up failure."""

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        """Re-read the config file soon (SIGHUP); ignored without a config file."""
        self._reload_requested.set()

    def run_hooks(self) -> RunHooks:
        """The sessions' hooks that feed ``self.metrics`` (runs, errors, reply latency,
        tokens)."""
        metrics = self.metrics

        def on_start(inbound: InboundMessage) -> None:
            metrics.run_started(inbound.channel)

        def on_end(inbound: InboundMessage, outcome: str) -> None:
            metrics.run_ended(inbound.channel, failed=outcome in ("error", "exception"))

        def on_first_reply(inbound: InboundMessage, seconds: float | None) -> None:
            if seconds is not None:
                metrics.observe_latency(inbound.channel, seconds)

        def on_usage(inbound: InboundMessage, usage: ModelUsage) -> None:
            metrics.add_tokens(usage.model, usage.counts())

        return RunHooks(
            on_start=on_start, on_end=on_end, on_first_reply=on_first_reply, on_usage=on_usage
        )

    def _configure_logging(self, config: BotdConfig) -> None:
        configure_logging(self.log_level(config), config.logging.format)

    def log_level(self, config: BotdConfig) -> str:
        """DEBUG under ``--debug``; else ``logging.level`` if the config sets it; else WARNING
        while the console is enabled (its chat is on the terminal the logs go to) and INFO
        otherwise."""
        if self.debug:
            return "DEBUG"
        if (
            "level" not in config.logging.model_fields_set
            and "console" in config.channels.enabled()
        ):
            return "WARNING"
        return config.logging.level

    async def run(self) -> int:
        config = self.config
        add_secrets(secret_values(config))  # before the first line is logged
        self._configure_logging(config)
        notifier = SystemdNotifier()

        async def end_of_input() -> None:
            self._console_done.set()

        # Before anything opens the database: one daemon per state directory.
        lock = StateLock(Path(config.state_dir))
        lock.acquire()

        def channel_down(name: str, reason: str) -> None:
            if self.channels is not None:
                self.channels.report_down(name, reason)

        def channels_down() -> dict[str, str]:
            return {} if self.channels is None else self.channels.down()

        def reachability(name: str, error: str | None) -> None:
            if self.channels is not None:
                self.channels.reachability(name, error)

        try:
            check_health_port(config)
            # Once nothing quick can refuse the start (a start refused is one line alone).
            log.info("%s", start_line(config, self.config_path))
            runtime = build_runtime(
                config,
                metrics=self.metrics,
                hooks=self.run_hooks(),
                on_end_of_input=end_of_input,
                on_channel_down=channel_down,
                on_reachability=reachability,
                channels_down=channels_down,
            )
        except BaseException:
            lock.release()
            raise
        self.runtime = runtime
        channels = self.channels = self._keeper(runtime)
        self.metrics.watch(self.channel_states, partial(store_backlog, runtime.store))
        health: HealthServer | None = None
        watchdog: asyncio.Task[None] | None = None
        reloader: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(asyncio_exception_handler)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self.request_stop)
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        try:
            await runtime.sessions.resume()
            runtime.pruner.start()
            runtime.scheduler.start()
            runtime.scheduler.sync_config_jobs(scheduler_jobs(config))
            # All at once: one that fails is down and retried in the background, one that
            # hangs goes on starting there; the rest go on.
            runtime.mcp.start()  # side by side with the channels
            await channels.start_all(dict(runtime.adapters))
            # Resumed runs get the MCP tools of the servers up by now.
            await runtime.mcp.wait_started(MCP_START_WAIT)
            await runtime.sessions.release()
            if config.health.enabled:
                health = HealthServer(
                    config.health.host,
                    config.health.port,
                    channel_states=self.channel_states,
                    channel_problems=channels.problems,
                    metrics=self.metrics,
                    components=lambda: health_components(runtime, self.config),
                )
                self.health = health
                await health.start()
            notifier.ready(self._running_status())
            self.started = True
            watchdog = asyncio.create_task(notifier.run_watchdog(self._stop))
            reloader = asyncio.create_task(self._reload_loop(runtime, notifier))
            with settled_heap():
                await self._wait_for_stop(runtime)
        finally:
            if reloader is not None:
                reloader.cancel()
                await asyncio.gather(reloader, return_exceptions=True)
            notifier.stopping()
            await self._shutdown(runtime, health)
            if watchdog is not None:
                watchdog.cancel()
                await asyncio.gather(watchdog, return_exceptions=True)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError):
                    loop.remove_signal_handler(sig)
            lock.release()
        return 0

    def channel_states(self) -> dict[str, str]:
        """Each channel's state, as ``/healthz`` and ``botd_channel_up`` show it (a running
        channel whose platform has been unreachable for ``health.down_after`` is down)."""
        return {} if self.channels is None else self.channels.view()

    def _keeper(self, runtime: Runtime) -> ChannelKeeper:
        def down(name: str) -> None:
            self.metrics.error(name, "channel_down")

        def unreachable(name: str) -> None:
            self.metrics.error(name, "unreachable")

        return ChannelKeeper(
            runtime,
            lambda: self.config,
            debug=self.debug,
            on_down=down,
            on_unreachable=unreachable,
        )

    def _running_status(self) -> str:
        channels = self.channels
        running = 0 if channels is None else channels.running()
        down = {} if channels is None else channels.down()
        return f"{running} channel(s) running" + (f", {len(down)} down" if down else "")

    async def _stop_channel(self, name: str, adapter: ChannelAdapter) -> None:
        try:
            await adapter.stop()
        except Exception:
            log.exception("stopping channel %s failed", name)
        if self.channels is not None:
            self.channels.states[name] = "stopped"

    # -- reload -----------------------------------------------------------------------------

    async def _reload_loop(self, runtime: Runtime, notifier: SystemdNotifier) -> None:
        """Serve SIGHUPs one at a time until shutdown."""
        while True:
            await self._reload_requested.wait()
            self._reload_requested.clear()
            try:
                await self.reload(runtime, notifier)
            except Exception:
                log.exception("reload failed; keeping what runs")

    async def reload(self, runtime: Runtime, notifier: SystemdNotifier) -> bool:
        """Re-read the config file and apply it; False when it was refused (or there is none)."""
        if self.config_path is None:
            log.warning("reload ignored: botd runs the embedded default config (no --config)")
            return False
        notifier.notify("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")
        try:
            log.info("reloading %s", self.config_path)
            try:
                new = load_config(self.config_path, self._env)
                add_secrets(secret_values(new))  # new tokens are masked before anything runs
            except ConfigError as exc:
                for problem in exc.problems:
                    where = f" (line {problem.line})" if problem.line is not None else ""
                    log.error("reload refused: %s%s: %s", problem.path, where, problem.message)
                log.error(
                    "reload refused: %d problem(s) in %s; keeping the running config",
                    len(exc.problems),
                    self.config_path,
                )
                return False
            except OSError as exc:
                log.error("reload refused: cannot read %s: %s", self.config_path, exc)
                return False
            plan = plan_reload(self.config, new)
            await self._apply(plan, new, runtime)
            self.config = runtime.config = new
            log.info("reloaded %s: %s", self.config_path, plan.describe())
            return True
        finally:
            notifier.ready(self._running_status())

    async def _apply(self, plan: ReloadPlan, new: BotdConfig, runtime: Runtime) -> None:
        adapters = runtime.adapters
        channels = self.channels
        if channels is None:  # reload before run() built one (tests drive reload directly)
            channels = self.channels = self._keeper(runtime)
        if plan.logging_changed:
            self._configure_logging(new)
        for key in plan.restart_only:
            log.warning("config %s changed: it applies when botd restarts", key)
        # Stop first: a restarted channel must not run twice, even for a moment.
        for name in sorted(plan.stop | plan.restart):
            await channels.forget(name)  # a retry under the old settings ends here
            adapter = adapters.pop(name, None)
            if adapter is not None:
                log.info("stopping channel %s (%s)", name, _why(name, plan))
                await self._stop_channel(name, adapter)
            if name in plan.stop:
                channels.states.pop(name, None)
        runtime.update_channels(new)
        for name in sorted(plan.start | plan.restart):
            try:
                adapter = runtime.build_adapter(name, new)
            except Exception as exc:
                log.error("channel %s cannot be built: %s", name, exc)
                channels.states[name] = "down"
                channels.reasons[name] = str(exc)
                continue
            if adapter is None:
                continue
            adapters[name] = adapter
            runtime.update_channels(new)
            await channels.start(name, adapter)  # down and retried when it fails
        if plan.jobs_changed:
            try:
                runtime.scheduler.sync_config_jobs(scheduler_jobs(new))
            except ValueError as exc:
                log.error("scheduled jobs not re-synced: %s", exc)
            else:
                log.info("scheduled jobs re-synced: %d configured", len(new.scheduler.jobs))

    # -- stop -------------------------------------------------------------------------------

    async def _wait_for_stop(self, runtime: Runtime) -> None:
        stop = asyncio.create_task(self._stop.wait())
        console = asyncio.create_task(self._console_done.wait())
        done, pending = await asyncio.wait({stop, console}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if console in done:
            # End of input on the console: answer what was typed, then stop.
            await runtime.sessions.drain()

    async def _shutdown(self, runtime: Runtime, health: HealthServer | None) -> None:
        log.info("shutting down")
        if self.channels is not None:
            await self.channels.close()  # retries waiting or starting end now
        # Stop taking input first: a message received now would be marked seen and then
        # dropped by the closing sessions; left with the platform, a restart picks it up.
        for name, adapter in runtime.adapters.items():
            try:
                await adapter.stop_inbound()
            except Exception:
                log.exception("stopping input of channel %s failed", name)
        runtime.scheduler.shutdown()
        await runtime.pruner.stop()
        # self.config, not the config botd started with: a reload may have changed the grace.
        grace = self.config.shutdown_grace
        log.info("running answers get %g s to finish", grace)
        await runtime.sessions.close(grace=grace)
        await runtime.mcp.close()  # no run calls a tool any more; stdio servers end here
        for name, adapter in runtime.adapters.items():
            await self._stop_channel(name, adapter)
        if health is not None:
            await health.stop()
        await runtime.provider.aclose()
        runtime.store.close()
        log.info("stopped")


def health_components(runtime: Runtime, config: BotdConfig) -> dict[str, str | None]:
    """``/healthz``'s components: each None while well, else what is wrong. The store (a
    write failing), the inbox (its oldest unanswered message older than
    ``health.stuck_after``), each model API (down: ``botd.ops.outages``) and MCP server."""
    inbox = runtime.store.inbox_backlog()
    models = runtime.model_health.items()
    return {
        "store": runtime.store.health.reason,
        "inbox": stuck_inbox(inbox.oldest_age, inbox.count, config.health.stuck_after),
        **{name: None if (o := m.outage()) is None else o.describe_calls() for name, m in models},
        **runtime.mcp.health(),
    }


def store_backlog(store: Store) -> Backlog:
    """What waits in ``store``: unfinished inbox rows (and the oldest's age), unsent pieces."""
    inbox = store.inbox_backlog()
    return Backlog(inbox.count, inbox.oldest_age, store.outbox_pending_count())


def _why(name: str, plan: ReloadPlan) -> str:
    return "its section changed" if name in plan.restart else "removed from the config"
