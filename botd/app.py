"""The App: ``botd run``'s every configured channel, the sessions and the scheduler in one
process, built from a validated config and owning every task it starts.

``build_runtime`` builds the parts in dependency order, each from parts already built: the
store, the model provider, the MCP servers, delivery, the intake (where accepted messages go),
the scheduler and the router (both handing to the intake), the channel keeper (which builds
the adapters and hears their events), the tools and the sessions; the intake is connected to
the sessions last (``Intake.connect``: the sessions' tools need the router and the scheduler).

``App.run`` holds an ``AsyncExitStack`` and an ``asyncio.TaskGroup``: the App's own tasks (the
systemd watchdog, the reload loop) are in the group, and each part that starts tasks of its
own (the keeper's starts and retries, the sessions' workers, the MCP servers, the pruner,
the adapters) ends and awaits them in its close, which the stack calls: when ``run``
returns, no task botd started is left.

Start order: logging, the state directory's lock (``botd.ops.statelock``: a second daemon on the
same directory is refused), whether the health port is free (``check_health_port``), the first
INFO line (``start_line``: botd's version, the config file, the state dir and the channels),
the runtime (``build_runtime``), what the last process left unanswered
queued again (``Conversations.resume``: before any channel takes input, so it goes first in
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

SIGHUP re-reads the config file (``RELOADING=1`` ... ``READY=1`` to systemd). An invalid file is
refused with every problem logged, and the running config is kept. Otherwise ``plan_reload``
(``botd.config.reload``, pure data) decides and the channel keeper applies the channels' part
(``ChannelKeeper.reload``): a channel whose section changed is stopped and started again alone,
added and removed channels are started and stopped; the scheduler's configured jobs are
re-synced, the router takes the new access policies, and a new ``shutdown_grace`` applies to the
next stop; unchanged channels are untouched. Settings that only apply at start (model, agent,
state_dir, health) are logged as such: ``agent.mcp_servers`` among them, since its servers run
from start to stop. A group's ``tools`` list is part of its channel's section and applies with
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .agent.mcp import McpManager, narrow
from .agent.message_tool import MessageTool
from .agent.schedule_tool import ScheduleTool
from .agent.tools import Tool
from .agent.types import Provider
from .approvals import PREFIX, Approvals
from .buttons.layout import ButtonRows
from .channel_keeper import START_WAIT, ChannelKeeper
from .channels.base import ChannelAdapter, InboundSink
from .channels.registry import ChannelContext, channel_specs, platform_specs
from .chat import Attachment, DownloadError, InboundMessage, MessageRef, Target
from .cluster.leases import LeaseKeeper, ProcessLeases, hold_node
from .config import BotdConfig, ConfigError, load_config, secret_values
from .config.reload import ReloadPlan, plan_reload
from .conversation import Conversations, RunHooks
from .conversation.ownership import Ownership
from .conversation.reactions import StatusReactions
from .delivery import ChannelDelivery
from .inbound.message_access import MessageAccess
from .inbound.router import Router
from .media import MediaResolver
from .media.sandbox import Sandbox
from .ops.logging import add_secrets, asyncio_exception_handler, configure_logging
from .ops.metrics import Backlog, Metrics
from .ops.node import PROBE_WAIT, NodeHealth
from .ops.outages import Reachability, stuck_inbox
from .ops.ports import cannot_listen, listen_problem
from .ops.statelock import StateLock
from .ops.systemd import SystemdNotifier
from .scheduler import Scheduler
from .store import (
    ConversationLedger,
    InboundLedger,
    InboundPruner,
    ModelUsage,
    Store,
    StoreError,
    StoreStatus,
)
from .store.sqlite import SqliteStore
from .wiring import (
    Specs,
    access_policies,
    approval_rules,
    build_adapter,
    build_provider,
    build_scheduler,
    delivery_chunking,
    delivery_modes,
    delivery_retry,
    describe_job,
    group_delivery_modes,
    media_settings,
    model_names,
    open_leases,
    open_ownership,
    open_pairing,
    open_store,
    reaction_rules,
    scheduler_jobs,
    session_settings,
)

if TYPE_CHECKING:
    from .ops.health import HealthServer

__all__ = ["App", "Runtime", "build_runtime", "settled_heap"]

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
    SDK clients, the config) frozen out of every collection, a longer young interval, and
    the collector on (``botd run`` starts with it off: ``botd.cli``). Restored on exit, the
    collector left on: the shutdown may still answer what the console's input held."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
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


# --------------------------------------------------------------------------- the runtime


class LiveConfig:
    """The config in force: the one botd started with, until a reload replaces it. The parts
    that read settings when they are used (the tools, the message targets, media) hold this."""

    def __init__(self, config: BotdConfig) -> None:
        self.current = config

    def get(self) -> BotdConfig:
        return self.current


class Intake:
    """Where accepted messages and scheduled prompts go: into the sessions.

    Built before the router and the scheduler (they hand to it) and connected to the
    sessions once those exist (``connect``): the sessions' tools need the router and the
    scheduler, so one side of that cycle is joined after construction.
    """

    def __init__(self, store: InboundLedger, metrics: Metrics) -> None:
        self._store = store
        self._metrics = metrics
        self._sessions: Conversations | None = None
        self._ownership: Ownership | None = None

    def connect(self, sessions: Conversations, ownership: Ownership | None = None) -> None:
        """``ownership``: cluster mode, where a message reaches its conversation through
        the node owning it (``Ownership.arrived``), not straight into this node's sessions."""
        self._sessions = sessions
        self._ownership = ownership

    async def _hand_on(self, message: InboundMessage) -> None:
        if self._ownership is not None:
            await self._ownership.arrived(message)
        else:
            await self.sessions.submit(message)

    @property
    def sessions(self) -> Conversations:
        if self._sessions is None:
            raise RuntimeError("the intake is not connected to the sessions yet")
        return self._sessions

    async def submit(self, message: InboundMessage) -> None:
        """An accepted message in from a channel (counted)."""
        self._metrics.message_in(message.channel)
        await self._hand_on(message)

    async def reply(self, target: Target, text: str) -> None:
        """A router's own answer (a pairing code), sent in the background: one retried
        through an outage of its chat must not hold up the channel's input for the others."""
        self.sessions.post_later(target, text)

    async def run_job(self, message: InboundMessage) -> None:
        """A scheduled job's prompt, accepted into the inbox by the scheduler's fire (so a
        run cut by a restart resumes and is answered once): handed to its conversation, not
        counted as a message in."""
        await self._hand_on(message)


class Channels:
    """The live adapters and what follows them: delivery posts through them, the router
    takes their access policies (the ``ChannelKeeper``'s host)."""

    def __init__(
        self, specs: Specs, router: Router, delivery: ChannelDelivery, sink: InboundSink
    ) -> None:
        self.specs = specs
        self.adapters: dict[str, ChannelAdapter] = {}
        self.sink = sink
        self._router = router
        self._delivery = delivery

    def build_adapter(
        self, name: str, config: BotdConfig, context: ChannelContext
    ) -> ChannelAdapter | None:
        """A new adapter for channel ``name`` as ``config`` sets it up (None: not enabled)."""
        return build_adapter(name, config, context, self.specs)

    def update_channels(self, config: BotdConfig) -> None:
        """Point delivery at the live adapters and the router and delivery at ``config``'s
        access policies and delivery modes."""
        self._router.update_policies(access_policies(config, self.specs))
        self._delivery.set_channels(
            self.adapters,
            delivery_modes(config),
            retry=delivery_retry(config),
            chunking=delivery_chunking(config),
            group_modes=group_delivery_modes(config),
        )
        self._delivery.media = media_settings(config)

    async def download(
        self, message: InboundMessage, attachment: Attachment, max_bytes: int
    ) -> bytes:
        """A file a user sent, fetched through its channel."""
        adapter = self.adapters.get(message.channel)
        if adapter is None:
            raise DownloadError(f"the {message.channel} channel is not running")
        return await adapter.download(attachment, max_bytes)


class Toolbox:
    """The tools a run gets, chosen when it starts: the configured ones (read live), the
    running MCP servers' tools, narrowed by the group's ``tools`` list."""

    def __init__(
        self,
        live: LiveConfig,
        delivery: ChannelDelivery,
        scheduler: Scheduler,
        router: Router,
        message_access: MessageAccess,
        mcp: McpManager,
        sandbox: Sandbox,
    ) -> None:
        self._live = live
        self._delivery = delivery
        self._scheduler = scheduler
        self._router = router
        self._message_access = message_access
        self._mcp = mcp
        self._sandbox = sandbox

    async def _send(self, target: Target, text: str) -> MessageRef:
        refs = await self._delivery.send_text(target, text)
        return refs[0] if refs else MessageRef(target, "")

    async def _send_media(self, target: Target, text: str, media: Sequence[str]) -> MessageRef:
        refs = await self._delivery.send_text(target, text, media=media)
        return refs[0] if refs else MessageRef(target, "")

    async def _send_buttons(
        self, target: Target, text: str, media: Sequence[str], rows: ButtonRows
    ) -> MessageRef:
        refs = await self._delivery.send_text(target, text, media=media, buttons=rows)
        return refs[-1] if refs else MessageRef(target, "")  # the message with the buttons

    def for_message(self, message: InboundMessage) -> Sequence[Tool]:
        agent = self._live.current.agent
        enabled = set(agent.tools)
        chosen: list[Tool] = []
        if "message" in enabled:
            refusal = self._message_access.refusal
            channels = self._live.current.channels.enabled()
            chosen.append(
                MessageTool(
                    self._send,
                    refusal=refusal,
                    send_media=self._send_media,
                    send_buttons=self._send_buttons,
                    channels=channels,
                )
            )
        if "schedule" in enabled:
            chosen.append(ScheduleTool(self._scheduler))
        if "web_fetch" in enabled:
            from .agent.web_fetch_tool import WebFetchTool  # httpx: only when it is enabled

            web = agent.web_fetch
            chosen.append(
                WebFetchTool(
                    allow_hosts=web.allow_hosts,
                    max_bytes=web.max_bytes,
                    max_chars=web.max_chars,
                    timeout=web.timeout,
                    sandbox=self._sandbox,
                )
            )
        chosen.extend(self._mcp.tools())  # the servers running now
        rule = (
            None if message.is_direct else self._router.group_rule(message.channel, message.chat_id)
        )
        if rule is not None and rule.tools is not None:
            return narrow(chosen, rule.tools)
        return chosen

    async def jobs(self, conversation_key: str) -> list[str]:
        return [describe_job(info) for info in await self._scheduler.list_jobs(conversation_key)]


@dataclass(eq=False)
class Runtime:
    """A built botd: its parts, connected and not yet started."""

    live: LiveConfig
    store: Store
    provider: Provider
    channels: Channels
    keeper: ChannelKeeper
    delivery: ChannelDelivery
    sessions: Conversations
    scheduler: Scheduler
    router: Router
    pruner: InboundPruner
    """Forgets inbound ids past the platforms' redelivery windows (started by the App)."""
    mcp: McpManager
    """The MCP servers whose tools runs get (started and closed by the App)."""
    leases: LeaseKeeper
    """This node's leases (renewed by the App's task while it runs, released at its stop)."""
    ownership: Ownership | None = None
    """Cluster mode (postgres): the conversations this node owns by lease, and the claimer;
    None on SQLite (this node runs every conversation)."""
    model_health: dict[str, Reachability] = field(default_factory=dict)
    """Whether each model API answers, by ``model:<provider>/<model>`` (``/healthz``)."""

    @property
    def config(self) -> BotdConfig:
        return self.live.current

    @config.setter
    def config(self, config: BotdConfig) -> None:
        self.live.current = config

    @property
    def adapters(self) -> dict[str, ChannelAdapter]:
        """The live adapters by channel (the keeper adds and removes entries)."""
        return self.channels.adapters

    def update_channels(self, config: BotdConfig) -> None:
        self.channels.update_channels(config)

    async def aclose(self) -> None:
        """Close what construction opened (the store, the provider's client)."""
        await self.provider.aclose()
        await self.store.aclose()


def build_runtime(
    config: BotdConfig,
    *,
    metrics: Metrics | None = None,
    hooks: RunHooks | None = None,
    on_end_of_input: Callable[[], Awaitable[None]] | None = None,
    debug: bool = False,
    specs: Specs | None = None,
    store: Store | None = None,
    leases: LeaseKeeper | None = None,
) -> Runtime:
    """Every part of a botd for ``config``, connected and not yet started.

    Built in dependency order, each part from parts already built; the one cycle (the
    sessions' tools reach the router and the scheduler, which hand messages to the
    sessions) is closed by ``Intake.connect``. ``on_end_of_input`` is called when the
    console's input ends; ``metrics`` counts messages in and out, channels down and
    unreachable. Raises ``ChannelUnavailable`` when an enabled channel's SDK is missing.
    ``store``: the store ``open_store`` opened for the config (the runtime's close closes
    it); without one, the SQLite store in ``state_dir`` is opened here. ``leases``: this
    node's lease keeper (``open_leases``); without one, an in-memory one for a single node.
    """
    counters = Metrics() if metrics is None else metrics
    registry = channel_specs() if specs is None else specs
    state_dir = Path(config.state_dir)
    live = LiveConfig(config)
    opened_here = store is None
    if store is None:
        store = SqliteStore.open(state_dir)
    if leases is None:
        leases = LeaseKeeper(ProcessLeases(), config.store.node_id, config.store.lease_ttl)
    model_health: dict[str, Reachability] = {}
    try:
        provider = build_provider(config, model_health)
        mcp = McpManager(config.agent.mcp_servers)  # refused at once without the SDK
        delivery = ChannelDelivery(
            {},  # the channels, once built (``Channels.update_channels``)
            delivery_modes(config),
            retry=delivery_retry(config),
            media=media_settings(config),
            counts=counters,  # every message out, counted where it is sent
            chunking=delivery_chunking(config),
            group_modes=group_delivery_modes(config),
            buttons=store,  # each message's buttons: what a press of it may be
        )
        intake = Intake(store, counters)
        scheduler = build_scheduler(config, store, state_dir, intake.run_job, leases)
        router = Router(
            store,
            intake.submit,
            intake.reply,
            access_policies(config, registry),
            pairing=open_pairing(config, store),
            session_started=partial(session_started, store),
        )
        channels = Channels(registry, router, delivery, router.handle)
        keeper = ChannelKeeper(
            channels,
            live.get,
            ChannelContext(
                offsets=store,
                on_end_of_input=on_end_of_input,
                has_conversation=partial(has_conversation, store),
                admits=router.admits,
                model=f"{config.model.provider} provider (model {config.model.model_name})",
                leases=leases if config.store.backend == "postgres" else None,
            ),
            debug=debug,
            on_down=partial(counters.error, kind="channel_down"),
            on_unreachable=partial(counters.error, kind="unreachable"),
        )
        # Everything read live: the router's current policies, the current config's targets
        # and the adapters a reload adds channels to and removes them from.
        message_access = MessageAccess(
            router, lambda: live.current.agent.message_targets, channels.adapters
        )
        # One pool of reading workers for files users send and pages the model fetches:
        # together they never run more than its slots of parsing at once.
        reading = Sandbox()
        toolbox = Toolbox(live, delivery, scheduler, router, message_access, mcp, reading)
        # Asks a person before a listed tool runs; presses of its buttons come to it.
        approvals = Approvals(store, delivery, lambda: approval_rules(live.current))
        router.press_handlers.register(PREFIX, approvals.press)
        sessions = Conversations(
            store,
            provider,
            delivery,
            session_settings(config, state_dir),
            tools=toolbox.for_message,
            jobs=toolbox.jobs,
            hooks=hooks,
            channels_down=keeper.down,
            servers_down=mcp.down,
            models=model_names(config),
            media=MediaResolver(lambda: live.current.media, channels.download, sandbox=reading),
            reactions=StatusReactions(channels.adapters, reaction_rules(live.get)),
            approvals=approvals,
        )
        ownership = open_ownership(config, store, sessions, leases)
        intake.connect(sessions, ownership)
        keeper.build_all(config)
    except BaseException:
        if opened_here and isinstance(store, SqliteStore):
            store.close()
        raise
    return Runtime(
        live=live,
        store=store,
        provider=provider,
        channels=channels,
        keeper=keeper,
        delivery=delivery,
        sessions=sessions,
        scheduler=scheduler,
        router=router,
        pruner=InboundPruner(store),
        mcp=mcp,
        leases=leases,
        ownership=ownership,
        model_health=model_health,
    )


async def session_started(store: Store, conversation_key: str) -> float | None:
    """When ``conversation_key``'s current session began (a ``/new`` starts another): its
    buttons from before then are expired."""
    session = await store.stored_session(conversation_key)
    return None if session is None else session.created_at


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
    ) -> None:
        self.config = config
        self.debug = debug
        """Log at DEBUG whatever ``logging.level`` says (``botd --debug``)."""
        self.config_path = config_path
        self._env = dict(os.environ if env is None else env)
        self._stop = asyncio.Event()
        self._input_ended = False
        self._reload_requested = asyncio.Event()
        self.metrics = Metrics()
        self.runtime: Runtime | None = None
        """The running parts, once built (for tests and introspection)."""
        self.health: HealthServer | None = None
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
            lock = StateLock(Path(config.state_dir))
            lock.acquire()
            stack.callback(lock.release)
            check_health_port(config)
            # Once nothing quick can refuse the start (a start refused is one line alone).
            log.info("%s", start_line(config, self.config_path))
            store = await open_store(config)
            stack.push_async_callback(store.aclose)
            leases = open_leases(config, store)
            runtime = self.runtime = build_runtime(
                config,
                store=store,
                metrics=self.metrics,
                hooks=self.run_hooks(),
                on_end_of_input=self._end_of_input,
                debug=self.debug,
                leases=leases,
            )
            stack.push_async_callback(runtime.aclose)
            if config.store.backend == "postgres":
                # The database's state-dir lock: one process per node_id. Claimed once the
                # runtime is built (which writes nothing, and on a slow machine can take longer
                # than a short lease), right before its renewals start.
                await hold_node(leases)
            self.metrics.watch(self.channel_states, partial(store_backlog, runtime.store))
            stack.enter_context(self._signals())
            tasks = await stack.enter_async_context(asyncio.TaskGroup())
            # Pinging systemd's watchdog until the very end, shutdown included.
            tasks.create_task(notifier.run_watchdog(self._stop), name="systemd-watchdog")
            renewals = tasks.create_task(leases.run(), name="lease-renewal")
            stack.callback(renewals.cancel)  # after the shutdown has released the leases
            stack.push_async_callback(self._shutdown, runtime, notifier)
            await self._start(runtime, notifier)
            reloader = tasks.create_task(self._reload_loop(runtime, notifier), name="reloader")
            with settled_heap():
                await self._stop.wait()
            reloader.cancel()
            await asyncio.wait({reloader})  # a reload under way ends before the shutdown
            if self._input_ended:
                # End of input on the console: answer what was typed, then stop.
                await runtime.sessions.drain()
        return 0

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

    async def _start(self, runtime: Runtime, notifier: SystemdNotifier) -> None:
        config = self.config
        if runtime.ownership is None:
            await runtime.sessions.resume()
        # (Cluster mode resumes nothing at start: the claimer takes over what no node owns.)
        runtime.pruner.start()
        await runtime.scheduler.start()
        await runtime.scheduler.sync_config_jobs(scheduler_jobs(config))
        # All at once: one that fails is down and retried in the background, one that hangs
        # goes on starting there; the rest go on.
        runtime.mcp.start()  # side by side with the channels
        await runtime.router.load_approvals()
        await runtime.keeper.start_all()
        # Resumed runs get the MCP tools of the servers up by now.
        await runtime.mcp.wait_started(MCP_START_WAIT)
        await runtime.sessions.release()
        if runtime.ownership is not None:
            runtime.ownership.start()
        if config.health.enabled:
            from .ops.health import HealthServer  # aiohttp: imported only to serve it

            node = NodeHealth(
                config.store.node_id, config.store.backend, runtime.store, runtime.leases
            )
            health = HealthServer(
                config.health.host,
                config.health.port,
                channel_states=self.channel_states,
                channel_problems=runtime.keeper.problems,
                metrics=self.metrics,
                components=lambda: health_components(runtime, self.config, node),
                node=node.view,
            )
            self.health = health
            await health.start()
        notifier.ready(self._running_status())
        self.started = True

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
        if plan.jobs_changed:
            try:
                await runtime.scheduler.sync_config_jobs(scheduler_jobs(new))
            except ValueError as exc:
                log.error("scheduled jobs not re-synced: %s", exc)
            else:
                log.info("scheduled jobs re-synced: %d configured", len(new.scheduler.jobs))

    # -- stop -------------------------------------------------------------------------------

    async def _shutdown(self, runtime: Runtime, notifier: SystemdNotifier) -> None:
        self._stop.set()  # the watchdog ends once the stack has closed the rest
        notifier.stopping()
        log.info("shutting down")
        keeper = runtime.keeper
        await keeper.close()  # retries waiting or starting end now
        # Stop taking input first: a message received now would be marked seen and then
        # dropped by the closing sessions; left with the platform, a restart picks it up.
        await keeper.stop_inbound()
        await runtime.scheduler.close()
        await runtime.pruner.stop()
        # self.config, not the config botd started with: a reload may have changed the grace.
        grace = self.config.shutdown_grace
        log.info("running answers get %g s to finish", grace)
        if runtime.ownership is not None:
            await runtime.ownership.close()  # no more claims or pulls
        await runtime.sessions.close(grace=grace)
        await runtime.mcp.close()  # no run calls a tool any more; stdio servers end here
        await keeper.stop_all()
        # Nothing of this node runs any more: what it held is free for the others at once.
        await runtime.leases.release_all()
        if self.health is not None:
            await self.health.stop()
        log.info("stopped")


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
        **{name: None if (o := m.outage()) is None else o.describe_calls() for name, m in models},
        **runtime.mcp.health(),
    }


async def store_backlog(store: StoreStatus) -> Backlog:
    """What waits in ``store``: unfinished inbox rows (and the oldest's age), unsent pieces.
    Bounded by ``PROBE_WAIT``: a database that went away must not hold up ``/healthz``."""
    async with asyncio.timeout(PROBE_WAIT):
        inbox = await store.inbox_backlog()
        return Backlog(inbox.count, inbox.oldest_age, await store.outbox_pending_count())


async def has_conversation(store: ConversationLedger, conversation_key: str) -> bool:
    """Whether ``store`` has a session under ``conversation_key`` (a Slack thread's context
    is fetched only for a conversation botd does not know yet)."""
    return await store.stored_session(conversation_key) is not None
