"""The App: ``botd run``'s every configured channel, the sessions and the scheduler in one
process, built from a validated config and owning every task it starts.

``App.run`` holds an ``AsyncExitStack`` and an ``asyncio.TaskGroup``: the App's own tasks (the
systemd watchdog, the reload loop, the lease renewals) are in the group, and each part that
starts tasks of its own (the keeper's starts and retries, the sessions' workers, the MCP
servers, the pruner, the adapters) ends and awaits them in its close, which the stack calls:
when ``run`` returns, no task botd started is left.

First the foundation, each piece's close on the stack as it is made: logging, the state
directory's lock (``botd.ops.statelock``: a second daemon on the same directory is refused),
whether the health port is free (``check_health_port``), the first INFO line (``start_line``:
botd's version, the config file, the state dir and the channels), the store through its
backend (``botd.store.backends``, chosen once), the runtime (``botd.runtime.build_runtime``)
and, when the nodes share the store, this node's claim on its id (``hold_node``). Then the
services (``botd.services``), entered in the one order ``App.services`` declares; the stack
closes them in the reverse order, so the shutdown is the start read backwards:

=================  ==============================================  ==========================
service            at start                                        at shutdown
=================  ==============================================  ==========================
lease renewals     renewing this node's leases                     "stopped"; renewals end
http               (nothing: a server listens once a route is      every HTTP server stops
                   added, ``botd.http``)                           (``/healthz`` answers to here)
leases             (nothing)                                       released: free for others
channel outlets    (nothing: the adapters are built)               the adapters close
mcp                the MCP servers, in the background (one that    stopped (a stdio server's
                   fails is down in ``/healthz``, retried)         process is waited for)
acp agent          (nothing: the ACP agent's process starts when   its process stopped
                   a run first needs it)
sessions           (nothing: a conversation is loaded when the     running turns get
                   dispatcher hands it an entry)                   ``shutdown_grace``, the rest
                                                                   are cancelled
dispatcher         (nothing: it starts once the channels do)       no more claims or pulls
pruner             the daily pruning of old inbound ids            stopped
scheduler          started, the configured jobs synced             stopped
approvals          the approval requests still open, loaded        (nothing)
channel input      each channel started (``ChannelKeeper``: one    retries end, input stops
                   that fails is down and retried with backoff)
dispatch           the MCP servers waited for, the dispatcher      (nothing)
                   started: its first poll claims every
                   conversation the last process left (a
                   restart is "claim everything", ``Dispatcher``)
pairing welcomes   approved senders told they can talk, what they  stopped
                   wrote meanwhile handed on (``botd.owners``)
health             ``/healthz`` and ``/metrics`` served            (nothing: see http)
web                the web page served (``web.enabled``)           its live streams end, its
                                                                   routes go
ready              READY=1 to systemd                              STOPPING=1, "shutting down"
=================  ==============================================  ==========================

So input stops before anything it would hand messages to closes (a message received then
would be marked seen and dropped; left with the platform, a restart picks it up), running
turns finish before the MCP servers and the adapters they use close, and the leases are
released once nothing of this node runs. Nothing reaches a conversation but through the
dispatcher (every producer accepts into the inbox first), and it hands anything over only
once the channels can send: a takeover reads a conversation's whole backlog before anything
new of it, so what the last process left goes first. A cancelled run posts nothing more and
is left unanswered in the inbox: the next start resumes it. A service that fails to start
stops the start, and what started before it is closed the same way.

SIGHUP re-reads the config file (``RELOADING=1`` ... ``READY=1`` to systemd). An invalid file is
refused with every problem logged, and the running config is kept. Otherwise ``plan_reload``
(``botd.config.reload``, pure data) decides and the channel keeper applies the channels' part
(``ChannelKeeper.reload``): a channel whose section changed is stopped and started again alone,
added and removed channels are started and stopped; the scheduler's configured jobs are
re-synced, the router takes the new access policies, and a new ``shutdown_grace`` applies to the
next stop; unchanged channels are untouched. Settings that only apply at start (model, agent,
state_dir, health) are logged as such: ``agent.mcp_servers`` among them, since its servers run
from start to stop. A group's ``tools`` list is part of its channel's section and applies with
it. The skills of ``agent.skills_dir`` are read again at every reload, changed or not.

The App names no tool, no store backend and no platform: the runtime builds tools through
their specs, the store's backend says what it is, and the channels come from their registry.
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
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .channel_keeper import START_WAIT, ChannelKeeper
from .channels.base import ChannelAdapter, LeasedInput
from .channels.registry import platform_specs
from .chat import InboundMessage
from .cluster.leases import hold_node
from .config import BotdConfig, ConfigError, load_config, secret_values
from .config.reload import ReloadPlan, plan_reload
from .conversation import RunHooks
from .ops.logging import add_secrets, asyncio_exception_handler, configure_logging
from .ops.metrics import Backlog, Metrics
from .ops.node import PROBE_WAIT, NodeHealth
from .ops.outages import stuck_inbox
from .ops.ports import cannot_listen, health_url, listen_problem
from .ops.runs import RunLog
from .ops.statelock import StateLock
from .ops.status import StatusReport
from .ops.systemd import SystemdNotifier
from .runtime import Runtime, build_runtime
from .services import Service, Step, enter_services
from .store import ModelUsage, StoreError, StoreStatus
from .store.backends import store_backend
from .wiring import open_leases, scheduler_jobs

if TYPE_CHECKING:
    from .ops.health import HealthEndpoint
    from .web.page import WebPage

__all__ = ["App", "freeze_start_up", "settled_heap"]

log = logging.getLogger(__name__)

GC_YOUNG_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation (CPython's default is 700).

Every message allocates thousands of short-lived objects, almost all freed by reference
counting; at the default the cycle collector runs every few hundred of them and costs about
a tenth of the daemon's time under load. What a longer interval keeps alive is bounded by it.
"""


def freeze_start_up() -> None:
    """Collect once, and freeze what survived out of every later collection.

    Start-up runs with the collector off (``botd.cli``), so the first collection walks
    every object start-up made: a few hundred thousand, over a second on a busy machine,
    with the event loop stopped meanwhile. ``App.run`` therefore settles the bulk (the
    runtime built) before this node claims any lease, when a stopped loop costs nothing,
    and ``settled_heap`` then walks only what starting the services added."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """The collector as the daemon runs it once started: what start-up allocated (modules,
    SDK clients, the config) frozen out of every collection (``freeze_start_up``), a longer
    young interval, and the collector on (``botd run`` starts with it off: ``botd.cli``).
    Restored on exit, the collector left on: the shutdown may still answer what the
    console's input held."""
    before = gc.get_threshold()
    freeze_start_up()
    gc.set_threshold(GC_YOUNG_THRESHOLD, before[1], before[2])
    gc.enable()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


MCP_START_WAIT = START_WAIT
"""How long start-up waits for the MCP servers once the channels started (or went on)."""


def start_line(config: BotdConfig, config_path: Path | None) -> str:
    """The line botd logs first: its version, the config file, the state dir, the channels."""
    source = os.path.abspath(config_path) if config_path is not None else "(embedded default)"
    channels = ", ".join(config.channels.enabled()) or "none"
    state = os.path.abspath(config.state_dir)
    return f"botd {__version__} starting: config {source}, state {state}, channels {channels}"


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


# --------------------------------------------------------------------------- the App


class App:
    """One running botd (see the module docstring)."""

    def __init__(
        self,
        config: BotdConfig,
        env: Mapping[str, str] | None = None,
        *,
        config_path: Path | None = None,
        debug: bool = False,
        settle_heap: bool = True,
    ) -> None:
        self.config = config
        self.debug = debug
        """Log at DEBUG whatever ``logging.level`` says (``botd --debug``)."""
        self.settle_heap = settle_heap
        """Once started, collect and freeze what start-up allocated (``settled_heap``). A
        process that runs the App among other work of its own (the tests run many in one
        process) keeps its own collector policy instead: a full collection of its whole heap
        at each start would cost more than the daemon saves."""
        self.config_path = config_path
        self._env = dict(os.environ if env is None else env)
        self._stop = asyncio.Event()
        self._input_ended = False
        self._reload_requested = asyncio.Event()
        self.metrics = Metrics()
        self.runs = RunLog()
        """This process's runs in flight and the last that ended (the status shows them)."""
        self.status: StatusReport | None = None
        """What ``/healthz``, ``botd status`` and the web page show, once the runtime is
        built."""
        self.runtime: Runtime | None = None
        """The running parts, once built (for tests and introspection)."""
        self.health: HealthEndpoint | None = None
        self.web: WebPage | None = None
        self._lock: StateLock | None = None
        """The state dir's lock, once taken (``run``)."""
        self.started = False
        """Whether start-up finished (READY=1): a failure after it is no start-up failure."""

    @property
    def channels(self) -> ChannelKeeper | None:
        """The keeper of the channels, once the runtime is built."""
        return None if self.runtime is None else self.runtime.keeper

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        """Re-read the config file soon (SIGHUP); ignored without a config file."""
        self._reload_requested.set()

    async def _end_of_input(self) -> None:
        """The console's input ended: answer what was typed, then stop."""
        self._input_ended = True
        self._stop.set()

    def run_hooks(self) -> RunHooks:
        """The sessions' hooks that feed ``self.metrics`` (runs, errors, reply latency,
        tokens)."""
        metrics, runs = self.metrics, self.runs

        def on_start(inbound: InboundMessage) -> None:
            metrics.run_started(inbound.channel)
            runs.started(inbound)

        def on_end(inbound: InboundMessage, outcome: str) -> None:
            metrics.run_ended(inbound.channel, failed=outcome in ("error", "exception"))
            runs.ended(inbound, outcome)

        def on_first_reply(inbound: InboundMessage, seconds: float | None) -> None:
            if seconds is not None:
                metrics.observe_latency(inbound.channel, seconds)

        def on_usage(inbound: InboundMessage, usage: ModelUsage) -> None:
            metrics.add_tokens(usage.model, usage.counts())
            runs.used(inbound, usage)

        return RunHooks(
            on_start=on_start, on_end=on_end, on_first_reply=on_first_reply, on_usage=on_usage
        )

    def _configure_logging(self, config: BotdConfig) -> None:
        configure_logging(self.log_level(config), config.logging.format)

    def log_level(self, config: BotdConfig) -> str:
        """DEBUG under ``--debug``; else ``logging.level`` if the config sets it; else WARNING
        while a ``local`` channel is enabled (the console: its chat is on the terminal the logs
        go to) and INFO otherwise."""
        if self.debug:
            return "DEBUG"
        platforms = platform_specs(config.channels)
        if "level" not in config.logging.model_fields_set and any(
            name in platforms and platforms[name].local for name in config.channels.enabled()
        ):
            return "WARNING"
        return config.logging.level

    async def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT (or the console's end of input), stop; 0."""
        config = self.config
        add_secrets(secret_values(config))  # before the first line is logged
        self._configure_logging(config)
        notifier = SystemdNotifier()
        # Every background task of the App is in this group and every part's own tasks are
        # ended and awaited by its close on the stack: nothing botd started outlives run().
        async with contextlib.AsyncExitStack() as stack:
            # Before anything opens the database: one daemon per state directory.
            lock = self._lock = StateLock(Path(config.state_dir), config=self.config_path)
            lock.acquire()
            stack.callback(lock.release)
            check_health_port(config)
            # Once nothing quick can refuse the start (a start refused is one line alone).
            log.info("%s", start_line(config, self.config_path))
            backend = store_backend(config.store)
            store = await backend.open(config)
            stack.push_async_callback(store.aclose)
            leases = open_leases(config, store, backend)
            runtime = self.runtime = build_runtime(
                config,
                store=store,
                backend=backend,
                metrics=self.metrics,
                hooks=self.run_hooks(),
                on_end_of_input=self._end_of_input,
                debug=self.debug,
                leases=leases,
            )
            stack.push_async_callback(runtime.aclose)
            if self.settle_heap:
                # Before any lease is held: this stops the loop for as long as it walks
                # start-up's objects (``freeze_start_up``), past a short lease's renewal.
                freeze_start_up()
            if backend.cluster:
                # The database's state-dir lock: one process per node_id. Claimed once the
                # runtime is built (which writes nothing, and on a slow machine can take longer
                # than a short lease), right before its renewals start.
                await hold_node(leases)
            self.metrics.watch(self.channel_states, partial(store_backlog, runtime.store))
            stack.enter_context(self._signals())
            tasks = await stack.enter_async_context(asyncio.TaskGroup())
            # Pinging systemd's watchdog until the very end, shutdown included.
            tasks.create_task(notifier.run_watchdog(self._stop), name="systemd-watchdog")
            await enter_services(stack, self.services(runtime, notifier, tasks))
            reloader = tasks.create_task(self._reload_loop(runtime, notifier), name="reloader")
            with settled_heap() if self.settle_heap else contextlib.nullcontext():
                await self._stop.wait()
            reloader.cancel()
            await asyncio.wait({reloader})  # a reload under way ends before the shutdown
            if self._input_ended:
                # End of input on the console: answer what was typed, then stop.
                await runtime.dispatcher.drain()
        return 0

    def services(
        self, runtime: Runtime, notifier: SystemdNotifier, tasks: asyncio.TaskGroup
    ) -> list[Service]:
        """What ``run`` enters once the runtime is built, in this order; the stack closes them
        in the reverse order (the module docstring says why each is where it is)."""
        keeper, sessions, dispatcher = runtime.keeper, runtime.sessions, runtime.dispatcher
        renewals: list[asyncio.Task[None]] = []

        async def renew_leases() -> None:
            renewals.append(tasks.create_task(runtime.leases.run(), name="lease-renewal"))

        async def stopped() -> None:
            log.info("stopped")  # every other service is closed
            for task in renewals:
                task.cancel()  # the task group awaits it

        async def start_mcp() -> None:
            runtime.mcp.start()  # in the background, side by side with the channels

        async def close_sessions() -> None:
            # self.config, not the config botd started with: a reload may have changed it.
            grace = self.config.shutdown_grace
            log.info("running answers get %g s to finish", grace)
            await sessions.close(grace=grace)

        async def start_pruner() -> None:
            runtime.pruner.start()

        async def start_scheduler() -> None:
            await runtime.scheduler.start()
            await runtime.scheduler.sync_config_jobs(scheduler_jobs(self.config))

        async def stop_input() -> None:
            await keeper.close()  # retries waiting or starting end now
            # Stop taking input first: a message received now would be marked seen and then
            # dropped by the closing sessions; left with the platform, a restart picks it up.
            await keeper.stop_inbound()

        async def dispatch() -> None:
            # Resumed runs get the MCP tools of the servers up by now.
            await runtime.mcp.wait_started(MCP_START_WAIT)
            await dispatcher.start()  # its first poll claims what the last process left

        async def start_welcomes() -> None:
            if runtime.welcomes is not None:
                await runtime.welcomes.start()

        async def stop_welcomes() -> None:
            if runtime.welcomes is not None:
                await runtime.welcomes.stop()

        async def ready() -> None:
            notifier.ready(self._running_status())
            self.started = True

        async def stopping() -> None:
            self._stop.set()  # the watchdog ends once the stack has closed the rest
            notifier.stopping()
            log.info("shutting down")

        return [
            Step("lease renewals", renew_leases, stopped),
            # Closed once the leases are released: /healthz answers through the shutdown.
            runtime.http,
            # Nothing of this node runs any more: what it held is free for the others at once.
            Step("leases", on_close=runtime.leases.release_all),
            # The adapters close once no run sends through them any more.
            Step("channel outlets", on_close=keeper.stop_all),
            Step("mcp", start_mcp, runtime.mcp.close),  # closed once no run calls a tool
            Step("acp agent", on_close=runtime.close_acp),  # stopped once no run prompts it
            Step("sessions", on_close=close_sessions),
            Step("dispatcher", on_close=dispatcher.close),
            Step("pruner", start_pruner, runtime.pruner.stop),
            Step("scheduler", start_scheduler, runtime.scheduler.close),
            Step("approvals", runtime.router.load_approvals),
            # Input first to stop: nothing arrives that the closing parts would drop.
            Step("channel input", keeper.start_all, stop_input),
            Step("dispatch", dispatch),
            Step("pairing welcomes", start_welcomes, stop_welcomes),
            Step("health", partial(self._serve_health, runtime)),
            Step("web", partial(self._serve_web, runtime), self._close_web),
            Step("ready", ready, stopping),
        ]

    def _status_report(self, runtime: Runtime) -> StatusReport:
        """The one ``StatusReport`` of this run (``/healthz`` and the web page share it)."""
        if self.status is None:
            config = self.config
            node = NodeHealth(
                config.store.node_id,
                runtime.backend.name,
                runtime.store,
                runtime.leases,
                schema_known=runtime.backend.known_schema(),
                inputs=lambda: input_leases(runtime.adapters),
            )
            self.status = StatusReport(
                channel_states=self.channel_states,
                channel_problems=runtime.keeper.problems,
                metrics=self.metrics,
                components=lambda: health_components(runtime, self.config, node),
                node=node.view,
                runs=self.runs,
            )
        return self.status

    async def _serve_health(self, runtime: Runtime) -> None:
        """``/healthz`` and ``/metrics`` on the HTTP server at ``health.host``/``port``
        (``health.enabled``)."""
        config = self.config
        if not config.health.enabled:
            return
        from .ops.health import HealthEndpoint  # aiohttp: imported only to serve it

        health = self.health = HealthEndpoint(self._status_report(runtime))
        port = await health.serve(runtime.http, config.health.host, config.health.port)
        if self._lock is not None:  # botd status, without --config, asks it there
            self._lock.record(health=health_url(config.health.host, port))

    async def _serve_web(self, runtime: Runtime) -> None:
        """The web page on the HTTP server at ``web.host``/``port`` (``web.enabled``); its
        close (the stack's) stops its live updates."""
        if not self.config.web.enabled:
            return
        from .web.page import WebPage  # aiohttp: imported only to serve it

        page = self.web = WebPage(runtime, self._status_report(runtime), lambda: self.config.web)
        await page.serve()

    async def _close_web(self) -> None:
        """The page's live streams end (a stream never ends by itself), its routes go."""
        if self.web is not None:
            await self.web.close()

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT stop, SIGHUP reloads, while the block runs."""
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(asyncio_exception_handler)
        handlers = {
            signal.SIGTERM: self.request_stop,
            signal.SIGINT: self.request_stop,
            signal.SIGHUP: self.request_reload,
        }
        for sig, handler in handlers.items():
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, handler)
        try:
            yield
        finally:
            for sig in handlers:
                with contextlib.suppress(NotImplementedError):
                    loop.remove_signal_handler(sig)

    def channel_states(self) -> dict[str, str]:
        """Each channel's state, as ``/healthz`` and ``botd_channel_up`` show it (a running
        channel whose platform has been unreachable for ``health.down_after`` is down)."""
        return {} if self.runtime is None else self.runtime.keeper.view()

    def _running_status(self) -> str:
        keeper = self.channels
        running = 0 if keeper is None else keeper.running()
        down = {} if keeper is None else keeper.down()
        return f"{running} channel(s) running" + (f", {len(down)} down" if down else "")

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
        if plan.logging_changed:
            self._configure_logging(new)
        for key in plan.restart_only:
            log.warning("config %s changed: it applies when botd restarts", key)
        await runtime.keeper.reload(new, stop=plan.stop, restart=plan.restart, start=plan.start)
        runtime.update_channels(new)
        runtime.skills.load(new)  # the folders as they are now, checked by load_config
        if plan.jobs_changed:
            try:
                await runtime.scheduler.sync_config_jobs(scheduler_jobs(new))
            except ValueError as exc:
                log.error("scheduled jobs not re-synced: %s", exc)
            else:
                log.info("scheduled jobs re-synced: %d configured", len(new.scheduler.jobs))


async def health_components(
    runtime: Runtime, config: BotdConfig, node: NodeHealth
) -> dict[str, str | None]:
    """``/healthz``'s components: each None while well, else what is wrong. The store (its
    database cannot be read now, or a write failing), the inbox (its oldest unanswered
    message older than ``health.stuck_after``; not read while the database is away), each
    model API (down: ``botd.ops.outages``) and MCP server."""
    database = await node.probe()
    store = runtime.store.health.reason
    stuck = None
    if not database.reachable:
        store = f"{database.where} cannot be read: {database.reason}"
    else:
        try:
            inbox = await runtime.store.inbox_backlog()
        except StoreError as exc:  # gone since the probe: the next probe says so
            store = str(exc)
        else:
            stuck = stuck_inbox(inbox.oldest_age, inbox.count, config.health.stuck_after)
    models = runtime.model_health.items()
    return {
        "store": store,
        "inbox": stuck,
        **node.problems(config.health.down_after),
        **{name: None if (o := m.outage()) is None else o.describe_calls() for name, m in models},
        **runtime.mcp.health(),
    }


def input_leases(adapters: Mapping[str, ChannelAdapter]) -> dict[str, list[str]]:
    """Each channel whose input one node of several takes at a time, with its leases
    (``LeasedInput``)."""
    return {
        name: adapter.input_leases()
        for name, adapter in adapters.items()
        if isinstance(adapter, LeasedInput)
    }


async def store_backlog(store: StoreStatus) -> Backlog:
    """What waits in ``store``: unfinished inbox rows (and the oldest's age), unsent pieces.
    Bounded by ``PROBE_WAIT``: a database that went away must not hold up ``/healthz``."""
    async with asyncio.timeout(PROBE_WAIT):
        inbox = await store.inbox_backlog()
        return Backlog(inbox.count, inbox.oldest_age, await store.outbox_pending_count())
