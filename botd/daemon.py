"""``botd run``: every configured channel, the sessions and the scheduler in one process.

Start order: logging, store, provider, adapters' delivery side, sessions, router, scheduler,
then the adapters' inbound side, the health endpoint, and READY=1 to systemd. SIGTERM or
SIGINT (or the console's end of input) shuts down in bounded order: stop taking input, let
running turns finish within the grace period and cancel the rest, flush deliveries, close
the adapters, the scheduler and the store, STOPPING=1, exit 0.

SIGHUP re-reads the config file (``RELOADING=1`` ... ``READY=1`` to systemd). An invalid file
is refused with every problem logged, and the running config is kept. Otherwise
``plan_reload`` decides: a channel whose section changed is stopped and started again alone,
added and removed channels are started and stopped, the scheduler's configured jobs are
re-synced, and the router takes the new access policies; unchanged channels are untouched.
Settings that only apply at start (model, agent, state_dir, health) are logged as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .agent.message_tool import MessageTool
from .agent.providers import create_provider
from .agent.schedule_tool import ScheduleTool
from .agent.tools import Tool
from .agent.types import Provider
from .channels.base import ChannelAdapter
from .chat import InboundMessage, MessageRef, Target
from .config import BotdConfig, ConfigError, load_config
from .delivery import ChannelDelivery
from .health import HealthServer
from .logging import configure_logging
from .metrics import Metrics
from .router import PairingBook, Router
from .scheduler import JobInfo, Scheduler
from .sessions import RunHooks, SessionManager
from .store import Store
from .systemd import SystemdNotifier

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 10.0


def build_provider(config: BotdConfig) -> Provider:
    return create_provider(config.model.provider, **config.provider_settings())


CHANNEL_NAMES = ("telegram", "slack", "discord", "console")
RESTART_ONLY = ("state_dir", "model", "agent", "health")
"""Top-level sections read only at start: a change is logged and waits for a restart."""


def channel_sections(config: BotdConfig) -> dict[str, dict[str, Any]]:
    """Each enabled channel's section as plain data (what a reload compares)."""
    sections: dict[str, dict[str, Any]] = {}
    for name in config.channels.enabled():
        section = getattr(config.channels, name)
        sections[name] = section.model_dump(mode="json")
    return sections


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """What a reload from one valid config to another has to do."""

    restart: frozenset[str] = frozenset()
    """Channels configured before and after whose section changed."""
    start: frozenset[str] = frozenset()
    stop: frozenset[str] = frozenset()
    jobs_changed: bool = False
    logging_changed: bool = False
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
        if self.restart_only:
            parts.append(f"changed {', '.join(self.restart_only)} (applies after a restart)")
        return "; ".join(parts) or "nothing changed"


def plan_reload(old: BotdConfig, new: BotdConfig) -> ReloadPlan:
    """Compare two valid configs section by section (see ``ReloadPlan``)."""
    before, after = channel_sections(old), channel_sections(new)
    both = before.keys() & after.keys()
    restart_only = tuple(
        key for key in RESTART_ONLY if _dump(getattr(old, key)) != _dump(getattr(new, key))
    )
    return ReloadPlan(
        restart=frozenset(n for n in both if before[n] != after[n]),
        start=frozenset(after.keys() - before.keys()),
        stop=frozenset(before.keys() - after.keys()),
        jobs_changed=_dump(old.scheduler) != _dump(new.scheduler),
        logging_changed=_dump(old.logging) != _dump(new.logging),
        restart_only=restart_only,
        unchanged=frozenset(n for n in both if before[n] == after[n]),
    )


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def build_adapter(
    name: str, config: BotdConfig, store: Store, console_done: asyncio.Event
) -> ChannelAdapter | None:
    """The adapter of one configured channel (None when it is not configured); its SDK is
    imported only when used."""
    channels = config.channels
    if name == "telegram" and channels.telegram is not None:
        from .channels.telegram import TelegramAdapter

        tg = channels.telegram
        return TelegramAdapter(
            tg.token, store=store, api_base_url=tg.api_base_url, poll_timeout=tg.poll_timeout
        )
    if name == "slack" and channels.slack is not None:
        from .channels.slack import SlackAdapter

        sl = channels.slack
        return SlackAdapter(
            bot_token=sl.bot_token,
            app_token=sl.app_token,
            signing_secret=sl.signing_secret,
            mode=sl.mode,
            api_base_url=sl.api_base_url,
            store=store,
            reply_to_mode=sl.reply_to_mode,
            http_host=sl.http_host,
            http_port=sl.http_port,
            http_path=sl.http_path,
        )
    if name == "discord" and channels.discord is not None:
        from .channels.discord import DiscordAdapter

        dc = channels.discord
        return DiscordAdapter(
            dc.token,
            store=store,
            api_base_url=dc.api_base_url,
            gateway_url=dc.gateway_url,
            allow_bots=dc.allow_bots,
        )
    if name == "console" and channels.console is not None and channels.console.enabled:
        from .channels.console import ConsoleAdapter

        async def end_of_input() -> None:
            console_done.set()

        return ConsoleAdapter(on_end_of_input=end_of_input)
    return None


def build_adapters(
    config: BotdConfig, store: Store, console_done: asyncio.Event
) -> dict[str, ChannelAdapter]:
    """One adapter per configured channel."""
    adapters: dict[str, ChannelAdapter] = {}
    for name in CHANNEL_NAMES:
        adapter = build_adapter(name, config, store, console_done)
        if adapter is not None:
            adapters[name] = adapter
    return adapters


class Daemon:
    """One running botd (see the module docstring)."""

    def __init__(
        self,
        config: BotdConfig,
        env: Mapping[str, str] | None = None,
        *,
        config_path: Path | None = None,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self._env = dict(os.environ if env is None else env)
        self._stop = asyncio.Event()
        self._console_done = asyncio.Event()
        self._reload_requested = asyncio.Event()
        self.metrics = Metrics()
        self._states: dict[str, str] = {}

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        """Re-read the config file soon (SIGHUP); ignored without a config file."""
        self._reload_requested.set()

    def run_hooks(self) -> RunHooks:
        """The sessions' hooks that feed ``self.metrics`` (runs, errors, reply latency)."""
        metrics = self.metrics

        def on_start(inbound: InboundMessage) -> None:
            metrics.run(inbound.channel)

        def on_end(inbound: InboundMessage, outcome: str) -> None:
            if outcome in ("error", "exception"):
                metrics.error(inbound.channel)

        def on_first_reply(inbound: InboundMessage, seconds: float | None) -> None:
            if seconds is not None:
                metrics.observe_latency(inbound.channel, seconds)

        return RunHooks(on_start=on_start, on_end=on_end, on_first_reply=on_first_reply)

    async def run(self) -> int:
        config = self.config
        configure_logging(config.logging.level, config.logging.format)
        state_dir = Path(config.state_dir)
        notifier = SystemdNotifier()
        store = Store.open(state_dir)
        provider = build_provider(config)
        adapters = build_adapters(config, store, self._console_done)
        delivery = ChannelDelivery(adapters, config.delivery_modes())
        sessions_holder: list[SessionManager] = []

        async def submit(message: InboundMessage) -> None:
            self.metrics.inc("messages_in", channel=message.channel)
            await sessions_holder[0].submit(message)

        scheduler = Scheduler(state_dir, submit, timezone=config.scheduler.timezone)

        async def send(target: Target, text: str) -> MessageRef:
            refs = await delivery.send_text(target, text)
            self.metrics.inc("messages_out", channel=target.channel)
            return refs[0] if refs else MessageRef(target, "")

        def tools(message: InboundMessage) -> Sequence[Tool]:
            enabled = set(self.config.agent.tools)
            chosen: list[Tool] = []
            if "message" in enabled:
                # The live adapter dict: a channel added or removed by a reload counts at once.
                chosen.append(MessageTool(send, allow=lambda t: t.channel in adapters))
            if "schedule" in enabled:
                chosen.append(ScheduleTool(scheduler))
            return chosen

        def jobs(conversation_key: str) -> list[str]:
            return [_describe_job(info) for info in scheduler.list_jobs(conversation_key)]

        sessions = SessionManager(
            store,
            provider,
            delivery,
            config.session_settings(state_dir),
            tools=tools,
            jobs=jobs,
            hooks=self.run_hooks(),
        )
        sessions_holder.append(sessions)

        async def reply(target: Target, text: str) -> None:
            await delivery.send_text(target, text)

        router = Router(
            store,
            submit,
            reply,
            config.access_policies(),
            pairing=PairingBook(state_dir / "pairing.json"),
        )
        health: HealthServer | None = None
        watchdog: asyncio.Task[None] | None = None
        reloader: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self.request_stop)
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        try:
            scheduler.start()
            scheduler.sync_config_jobs(config.scheduler_jobs())
            for name, adapter in adapters.items():
                await self._start_channel(name, adapter, router)
            if config.health.enabled:
                health = HealthServer(
                    config.health.host,
                    config.health.port,
                    channel_states=lambda: dict(self._states),
                    metrics=self.metrics,
                )
                await health.start()
            notifier.ready(f"{len(adapters)} channel(s) running")
            watchdog = asyncio.create_task(notifier.run_watchdog(self._stop))
            runtime = _Runtime(store, adapters, delivery, router, scheduler, notifier)
            reloader = asyncio.create_task(self._reload_loop(runtime))
            await self._wait_for_stop(sessions)
        finally:
            if reloader is not None:
                reloader.cancel()
                await asyncio.gather(reloader, return_exceptions=True)
            notifier.stopping()
            await self._shutdown(adapters, sessions, scheduler, store, health, provider)
            if watchdog is not None:
                watchdog.cancel()
                await asyncio.gather(watchdog, return_exceptions=True)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError):
                    loop.remove_signal_handler(sig)
        return 0

    async def _start_channel(self, name: str, adapter: ChannelAdapter, router: Router) -> None:
        self._states[name] = "starting"
        await adapter.start(router.handle)  # type: ignore[arg-type]
        self._states[name] = "running"
        log.info("channel %s running", name)

    async def _stop_channel(self, name: str, adapter: ChannelAdapter) -> None:
        try:
            await adapter.stop()
        except Exception:
            log.exception("stopping channel %s failed", name)
        self._states[name] = "stopped"

    # -- reload -----------------------------------------------------------------------------

    async def _reload_loop(self, runtime: _Runtime) -> None:
        """Serve SIGHUPs one at a time until shutdown."""
        while True:
            await self._reload_requested.wait()
            self._reload_requested.clear()
            try:
                await self.reload(runtime)
            except Exception:
                log.exception("reload failed; keeping what runs")

    async def reload(self, runtime: _Runtime) -> bool:
        """Re-read the config file and apply it; False when it was refused (or there is none)."""
        if self.config_path is None:
            log.warning("reload ignored: botd runs the embedded default config (no --config)")
            return False
        notifier = runtime.notifier
        notifier.notify("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")
        try:
            log.info("reloading %s", self.config_path)
            try:
                new = load_config(self.config_path, self._env)
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
            self.config = new
            log.info("reloaded %s: %s", self.config_path, plan.describe())
            return True
        finally:
            running = sum(1 for state in self._states.values() if state == "running")
            notifier.ready(f"{running} channel(s) running")

    async def _apply(self, plan: ReloadPlan, new: BotdConfig, runtime: _Runtime) -> None:
        adapters, delivery, router = runtime.adapters, runtime.delivery, runtime.router
        if plan.logging_changed:
            configure_logging(new.logging.level, new.logging.format)
        for key in plan.restart_only:
            log.warning("config %s changed: it applies when botd restarts", key)
        # Stop first: a restarted channel must not run twice, even for a moment.
        for name in sorted(plan.stop | plan.restart):
            adapter = adapters.pop(name, None)
            if adapter is not None:
                log.info("stopping channel %s (%s)", name, _why(name, plan))
                await self._stop_channel(name, adapter)
            if name in plan.stop:
                self._states.pop(name, None)
        router.update_policies(new.access_policies())
        delivery.set_channels(adapters, new.delivery_modes())
        for name in sorted(plan.start | plan.restart):
            adapter = build_adapter(name, new, runtime.store, self._console_done)
            if adapter is None:
                continue
            adapters[name] = adapter
            delivery.set_channels(adapters, new.delivery_modes())
            try:
                await self._start_channel(name, adapter, router)
            except Exception:
                log.exception("starting channel %s failed", name)
                self._states[name] = "failed"
        if plan.jobs_changed:
            try:
                runtime.scheduler.sync_config_jobs(new.scheduler_jobs())
            except ValueError as exc:
                log.error("scheduled jobs not re-synced: %s", exc)
            else:
                log.info("scheduled jobs re-synced: %d configured", len(new.scheduler.jobs))

    # -- stop -------------------------------------------------------------------------------

    async def _wait_for_stop(self, sessions: SessionManager) -> None:
        stop = asyncio.create_task(self._stop.wait())
        console = asyncio.create_task(self._console_done.wait())
        done, pending = await asyncio.wait({stop, console}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if console in done:
            # End of input on the console: answer what was typed, then stop.
            await sessions.drain()

    async def _shutdown(
        self,
        adapters: dict[str, ChannelAdapter],
        sessions: SessionManager,
        scheduler: Scheduler,
        store: Store,
        health: HealthServer | None,
        provider: Provider,
    ) -> None:
        log.info("shutting down")
        # Stop taking input first: a message received now would be marked seen and then
        # dropped by the closing sessions; left with the platform, a restart picks it up.
        for name, adapter in adapters.items():
            try:
                await adapter.stop_inbound()
            except Exception:
                log.exception("stopping input of channel %s failed", name)
        scheduler.shutdown()
        await sessions.close(grace=SHUTDOWN_GRACE_SECONDS)
        for name, adapter in adapters.items():
            await self._stop_channel(name, adapter)
        if health is not None:
            await health.stop()
        await provider.aclose()
        store.close()
        log.info("stopped")


@dataclass(eq=False)
class _Runtime:
    """What a reload changes in a running daemon."""

    store: Store
    adapters: dict[str, ChannelAdapter]
    delivery: ChannelDelivery
    router: Router
    scheduler: Scheduler
    notifier: SystemdNotifier


def _why(name: str, plan: ReloadPlan) -> str:
    return "its section changed" if name in plan.restart else "removed from the config"


def _describe_job(info: JobInfo) -> str:
    when = (
        info.next_run_time.isoformat(timespec="minutes")
        if info.next_run_time is not None
        else "not scheduled"
    )
    return f"{info.id}: {info.description} (next {when})"
